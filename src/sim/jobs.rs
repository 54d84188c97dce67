//! The simulated workload's life: a job waits, runs, checkpoints, is evicted
//! or interrupted (losing the work since its last checkpoint, or everything
//! without checkpoints), restarts with an overhead, and finishes. Pure
//! bookkeeping in virtual time; the engine decides when things happen.
//!
//! Work model: a job needs `work_s` seconds of useful running. Each restart
//! after an interruption first spends `restart_overhead_s` (rescheduling,
//! loading the checkpoint) before useful work resumes. A checkpointing job
//! saves its progress every `checkpoint_interval_s` of useful work, and also
//! when asked. Every checkpoint takes the job's `checkpoint_write_s` to
//! write, while the job keeps working (asynchronous checkpointing): the one
//! of progress `p` is complete when progress reaches `p + write`, a
//! requested one `write` seconds after the request. A checkpoint the job
//! loses its node before completing saves nothing: the job falls back to
//! its last complete one (`docs/checkpointing.md`).

use super::workload::SimJob;
use crate::core::Time;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Where a job is.
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    /// Not submitted yet.
    Future,
    /// Waiting for a node since `since`.
    Waiting {
        /// When it (re)entered the queue.
        since: Time,
    },
    /// Running on `node` since `since`, with `base_s` of saved progress at
    /// that start.
    Running {
        /// NodeClaim of its node.
        node: String,
        /// When it started this run.
        since: Time,
        /// Saved progress it started from.
        base_s: f64,
        /// Whether this start is a restart (pays the overhead).
        restart: bool,
        /// Seconds requested checkpoints paused it in this run.
        paused_s: f64,
    },
    /// Finished at `at`.
    Done {
        /// When.
        at: Time,
    },
}

/// Lost work by cause, in the unit of its holder (seconds for a job,
/// GPU-hours for a strategy), so a user sees which lever would help:
/// checkpoint more often (`rework`), restart faster (`restarts`), or
/// checkpoint less often (`checkpoint_pauses`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct LostBy {
    /// Progress made since the last complete checkpoint when the node was
    /// lost, redone after the restart.
    pub rework: f64,
    /// Restart overhead paid (rescheduling, loading the checkpoint) in runs
    /// that were interrupted again or ended by an interruption.
    pub restarts: f64,
    /// Training stopped while requested checkpoints were copied out.
    pub checkpoint_pauses: f64,
}

impl LostBy {
    /// Adds `other` scaled by `k` (seconds of a job to GPU-hours: `gpus / 3600`).
    pub fn add_scaled(&mut self, other: &LostBy, k: f64) {
        self.rework += other.rework * k;
        self.restarts += other.restarts * k;
        self.checkpoint_pauses += other.checkpoint_pauses * k;
    }
}

/// The jobs' finish times, soonest first. A job's finish moves when it
/// starts, pauses for a requested checkpoint or stops, and each move adds an
/// entry ([`Finishes::push`]); an entry the job has moved away from is stale,
/// and is dropped when it comes up rather than woken for: before, the
/// simulator ran a round of the whole core for each of them, about a quarter
/// of all rounds on a checkpointing workload.
#[derive(Debug, Default)]
pub struct Finishes(BinaryHeap<Reverse<(Time, usize)>>);

impl Finishes {
    /// Job `i` (an index into `jobs`) is now due to finish at `at`.
    pub fn push(&mut self, at: Time, i: usize) {
        self.0.push(Reverse((at, i)));
    }

    /// The next time a job finishes, as the jobs stand; stale entries
    /// before it are dropped.
    pub fn next(&mut self, jobs: &[JobRun]) -> Option<Time> {
        while let Some(&Reverse((at, i))) = self.0.peek() {
            if jobs[i].finish_time() == Some(at) {
                return Some(at);
            }
            self.0.pop();
        }
        None
    }

    /// The next job finishing at or before `now` and when, dropping stale
    /// entries; None once none is left to finish by then.
    pub fn pop_due(&mut self, now: Time, jobs: &[JobRun]) -> Option<(Time, usize)> {
        let at = self.next(jobs)?;
        if at > now {
            return None;
        }
        self.0.pop().map(|Reverse(e)| e)
    }
}

/// One job and its history.
#[derive(Debug, Clone)]
pub struct JobRun {
    /// The job.
    pub job: SimJob,
    /// Where it is.
    pub phase: Phase,
    /// Progress saved by checkpoints (seconds of useful work).
    pub saved_s: f64,
    /// A requested checkpoint is being written: (request time, progress it
    /// will save).
    pub writing: Option<(Time, f64)>,
    /// Seconds spent waiting for a node, over all waits.
    pub waited_s: f64,
    /// Times it was interrupted or evicted while running.
    pub interruptions: u32,
    /// Checkpoints taken (periodic and requested).
    pub checkpoints: u32,
    /// Seconds of useful work lost to interruptions (plus restart overheads
    /// and checkpoint pauses): the sum of `lost_by`.
    pub lost_s: f64,
    /// `lost_s` by cause.
    pub lost_by: LostBy,
    /// Has it ever started.
    pub started: bool,
    /// Seconds its first node took from launch to Ready, nominally (the
    /// startup it would have on on-demand; see `p95_slowdown`).
    pub startup_s: f64,
}

fn secs(a: Time, b: Time) -> f64 {
    (b - a).num_milliseconds() as f64 / 1000.0
}

impl JobRun {
    /// A job not yet submitted.
    pub fn new(job: SimJob) -> JobRun {
        JobRun {
            job,
            phase: Phase::Future,
            saved_s: 0.0,
            writing: None,
            waited_s: 0.0,
            interruptions: 0,
            checkpoints: 0,
            lost_s: 0.0,
            lost_by: LostBy::default(),
            started: false,
            startup_s: 0.0,
        }
    }

    /// GPUs the job's pod holds: whole GPUs count one each, a MIG instance
    /// its share of a GPU (`1g.10gb` is 1/7), time-sliced shares their part
    /// of a GPU ([`SimJob::gpu_share`]), so GPU-hours charge the share.
    pub fn gpus(&self) -> f64 {
        self.job
            .gpu_share
            .unwrap_or_else(|| self.job.pod.requests.gpus())
    }

    /// The job appears.
    pub fn submit(&mut self, now: Time) {
        self.phase = Phase::Waiting { since: now };
    }

    /// Seconds the current run spends restarting before useful work: the
    /// restart overhead after an interruption, nothing on the first start.
    fn overhead(&self) -> f64 {
        match self.phase {
            Phase::Running { restart: true, .. } => self.job.restart_overhead_s,
            _ => 0.0,
        }
    }

    /// Useful progress at `now` (saved progress before the run plus useful
    /// time in this run).
    pub fn progress(&self, now: Time) -> f64 {
        match &self.phase {
            Phase::Running {
                since,
                base_s,
                paused_s,
                ..
            } => (base_s + (secs(*since, now) - self.overhead() - paused_s).max(0.0))
                .min(self.job.work_s),
            Phase::Done { .. } => self.job.work_s,
            _ => self.saved_s,
        }
    }

    /// Periodic checkpoints of this run complete by `now`: the one of
    /// progress `k x interval` is complete once progress passes it by the
    /// write time.
    fn periodic_complete(&self, now: Time) -> f64 {
        match self.job.checkpoint_interval_s.filter(|i| *i > 0.0) {
            Some(i) if matches!(self.phase, Phase::Running { .. }) => {
                let written = self.progress(now) - self.job.checkpoint_write_s;
                if written < 0.0 {
                    0.0
                } else {
                    (written / i).floor()
                }
            }
            _ => 0.0,
        }
    }

    /// Progress saved at `now`: the last complete periodic checkpoint, or
    /// what a complete requested checkpoint saved; all of it for a serving
    /// replica, which holds no work to lose.
    pub fn saved(&self, now: Time) -> f64 {
        if self.job.stateless {
            return self.progress(now);
        }
        let mut saved = self.saved_s;
        if let Some(i) = self.job.checkpoint_interval_s.filter(|i| *i > 0.0) {
            saved = saved.max(self.periodic_complete(now) * i);
        }
        if self.checkpoint_acknowledged(now) {
            if let Some((_, value)) = self.writing {
                saved = saved.max(value);
            }
        }
        saved
    }

    /// The job starts on `node`.
    pub fn start(&mut self, node: &str, now: Time) {
        if let Phase::Waiting { since } = self.phase {
            self.waited_s += secs(since, now);
        }
        let restart = self.started;
        self.started = true;
        // A serving replica's demand went on while it waited: it serves
        // until its demand ends, not for its full span from now.
        if self.job.stateless {
            self.saved_s = self
                .saved_s
                .max(secs(self.job.submit, now).clamp(0.0, self.job.work_s));
        }
        self.phase = Phase::Running {
            node: node.to_string(),
            since: now,
            base_s: self.saved_s,
            restart,
            paused_s: 0.0,
        };
    }

    /// When the job will finish if nothing interrupts it.
    pub fn finish_time(&self) -> Option<Time> {
        match &self.phase {
            Phase::Running {
                since,
                base_s,
                paused_s,
                ..
            } => {
                let mut left = (self.job.work_s - base_s).max(0.0);
                // A serving replica ends with its demand: a restart's
                // overhead is time it is down, not time added at the end.
                if !self.job.stateless {
                    left += self.overhead() + paused_s;
                }
                Some(*since + chrono::Duration::milliseconds((left * 1000.0).ceil() as i64))
            }
            _ => None,
        }
    }

    /// The job finishes.
    pub fn finish(&mut self, now: Time) {
        self.count_periodic_checkpoints(now);
        self.settle_restart(now);
        self.phase = Phase::Done { at: now };
    }

    /// Charges the restart overhead the current run has paid by `now` as
    /// lost work, when the run ends: interrupted, finished, or cut off by
    /// the end of the simulation. (A restart that ran to the finish pays
    /// its whole overhead too: node time that moved no work forward.)
    pub fn settle_restart(&mut self, now: Time) {
        let paid = match &self.phase {
            Phase::Running { since, .. } => self.overhead().min(secs(*since, now).max(0.0)),
            _ => 0.0,
        };
        self.lost_s += paid;
        self.lost_by.restarts += paid;
    }

    fn count_periodic_checkpoints(&mut self, now: Time) {
        if let (Some(i), Phase::Running { base_s, .. }) = (
            self.job.checkpoint_interval_s.filter(|i| *i > 0.0),
            &self.phase,
        ) {
            let before = (base_s / i).floor();
            let after = self.periodic_complete(now);
            self.checkpoints += (after - before).max(0.0) as u32;
        }
    }

    /// The workload is asked to checkpoint at `now`; returns when it will
    /// acknowledge, or `None` if it does not checkpoint.
    pub fn request_checkpoint(&mut self, now: Time) -> Option<Time> {
        if self.job.checkpoint_interval_s.is_none() || !matches!(self.phase, Phase::Running { .. })
        {
            return None;
        }
        // A finished write is kept; a new request starts a new one.
        if self.checkpoint_acknowledged(now) {
            self.saved_s = self.saved(now);
            self.writing = None;
        }
        if self.writing.is_none() {
            self.writing = Some((now, self.progress(now)));
            self.checkpoints += 1;
            // Training stops while the state is copied out: the job ends
            // that much later, and the time is lost work.
            let pause = crate::core::cadence::pause_s(&self.job.pod);
            if let Phase::Running { paused_s, .. } = &mut self.phase {
                *paused_s += pause;
                self.lost_s += pause;
                self.lost_by.checkpoint_pauses += pause;
            }
        }
        let write = self.job.checkpoint_write_s;
        self.writing
            .map(|(at, _)| at + chrono::Duration::milliseconds((write * 1000.0).ceil() as i64))
    }

    /// Whether the last requested checkpoint is complete (acknowledged) at
    /// `now`.
    pub fn checkpoint_acknowledged(&self, now: Time) -> bool {
        self.writing
            .is_some_and(|(at, _)| secs(at, now) >= self.job.checkpoint_write_s)
    }

    /// The job loses its node at `now` (evicted or interrupted): it keeps
    /// what was saved, loses the rest, and waits again.
    pub fn stop(&mut self, now: Time) {
        if !matches!(self.phase, Phase::Running { .. }) {
            return;
        }
        self.count_periodic_checkpoints(now);
        let saved = self.saved(now);
        let rework = (self.progress(now) - saved).max(0.0);
        self.lost_s += rework;
        self.lost_by.rework += rework;
        self.settle_restart(now);
        self.saved_s = saved;
        self.writing = None;
        self.interruptions += 1;
        self.phase = Phase::Waiting { since: now };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{Pod, Resources};
    use chrono::TimeZone;

    fn t(s: i64) -> Time {
        chrono::Utc.timestamp_opt(1_767_571_200 + s, 0).unwrap()
    }

    fn job(work: f64, interval: Option<f64>) -> JobRun {
        job_writing(work, interval, 20.0)
    }

    fn job_writing(work: f64, interval: Option<f64>, write: f64) -> JobRun {
        JobRun::new(SimJob {
            pod: Pod::new("ns/j", Resources::new().with("nvidia.com/gpu", 8)),
            submit: t(0),
            work_s: work,
            checkpoint_interval_s: interval,
            checkpoint_write_s: write,
            restart_overhead_s: 300.0,
            stateless: false,
            gpu_share: None,
            gpu_use: None,
        })
    }

    #[test]
    fn a_finish_the_job_moved_away_from_is_never_due() {
        let mut jobs = vec![job(3600.0, Some(1800.0)), job(7200.0, None)];
        let mut finishes = Finishes::default();
        for (i, j) in jobs.iter_mut().enumerate() {
            j.submit(t(0));
            j.start("n1", t(0));
            finishes.push(j.finish_time().unwrap(), i);
        }
        let first = jobs[0].finish_time().unwrap();
        assert_eq!(finishes.next(&jobs), Some(first));
        // A requested checkpoint pauses the first job: its finish moves.
        jobs[0].request_checkpoint(t(600));
        let moved = jobs[0].finish_time().unwrap();
        assert!(moved > first, "{moved} after {first}");
        finishes.push(moved, 0);
        assert_eq!(finishes.next(&jobs), Some(moved), "not the old time");
        assert_eq!(finishes.pop_due(first, &jobs), None, "nothing is due then");
        assert_eq!(finishes.pop_due(moved, &jobs), Some((moved, 0)));
        // A stopped job never finishes; the other one still does.
        jobs[1].stop(t(700));
        assert_eq!(finishes.next(&jobs), None);
        jobs[1].start("n2", t(800));
        let restarted = jobs[1].finish_time().unwrap();
        finishes.push(restarted, 1);
        assert_eq!(finishes.pop_due(restarted, &jobs), Some((restarted, 1)));
        assert_eq!(finishes.pop_due(restarted, &jobs), None);
    }

    #[test]
    fn an_uninterrupted_job_finishes_after_its_work() {
        let mut j = job(3600.0, None);
        j.submit(t(0));
        j.start("n1", t(100));
        assert_eq!(j.waited_s, 100.0);
        assert_eq!(j.finish_time(), Some(t(3700)));
        j.finish(t(3700));
        assert_eq!(j.lost_s, 0.0);
        assert_eq!(j.gpus(), 8.0);
        let mig = crate::cluster::Resources::new().with("nvidia.com/mig-1g.10gb", 7);
        assert!(
            (mig.gpus() - 1.0).abs() < 1e-9,
            "seven 1g slices are one GPU"
        );
    }

    #[test]
    fn a_quarter_gpu_trace_job_is_charged_a_quarter_of_a_gpu() {
        use crate::sim::trace::{FractionalGpu, TraceJob};
        let row = TraceJob {
            job_id: "q".into(),
            submit_s: 0.0,
            duration_s: 3600.0,
            gpus: 0.25,
            gpu_models: vec![],
            cpu_milli: 1000,
            memory_mib: 1024,
            ..Default::default()
        };
        let spec = crate::sim::workload::TraceSpec {
            path: "t.csv".into(),
            ..Default::default()
        };
        let sliced = FractionalGpu::TimeSliced { replicas: 4 };
        let run = JobRun::new(spec.jobs(&[row], t(0), &sliced).remove(0));
        assert_eq!(run.job.pod.requests.get("nvidia.com/gpu.shared"), 1);
        assert_eq!(run.gpus(), 0.25);
        // A serving replica, and the planner is told: a reclaim stakes its
        // restart and relaunch, not half of its hour of run.
        assert!(run.job.stateless && !run.job.pod.holds_work);
        let e = crate::plan::risk::exposure(&run.job.pod);
        assert!(e.lost_hours < 0.25, "{e:?}");
    }

    #[test]
    fn an_interrupted_serving_replica_loses_only_its_restart_and_ends_with_its_demand() {
        let mut j = job(10_000.0, None);
        j.job.stateless = true;
        j.submit(t(0));
        // Waiting 400 s for its first node shortens its span: the demand it
        // serves ends at 10,000 s.
        j.start("n1", t(400));
        assert_eq!(j.finish_time(), Some(t(10_000)));
        j.stop(t(6400));
        assert_eq!(j.lost_s, 0.0, "no work to redo");
        assert_eq!(j.saved_s, 6400.0);
        // Down for 600 s, then the restart overhead: it is down for that
        // too, and still ends with its demand.
        j.start("n2", t(7000));
        assert_eq!(j.finish_time(), Some(t(10_000)));
        j.stop(t(7100));
        assert_eq!(j.lost_s, 100.0, "the part of the overhead it paid");
        // Restarted in the last moments of its demand: it ends with the
        // demand, having paid only the overhead it had time for.
        j.start("n3", t(9_900));
        assert_eq!(j.finish_time(), Some(t(10_000)));
        j.finish(t(10_000));
        assert_eq!(j.lost_s, 200.0);
        // A batch job with no checkpoints loses everything instead.
        let mut b = job(10_000.0, None);
        b.submit(t(0));
        b.start("n1", t(0));
        b.stop(t(6400));
        assert_eq!(b.lost_s, 6400.0);
    }

    #[test]
    fn an_interrupted_checkpointing_job_loses_at_most_one_interval() {
        let mut j = job(10_000.0, Some(1800.0));
        j.submit(t(0));
        j.start("n1", t(0));
        // Interrupted 1000 s after its third checkpoint (at 5400 s).
        j.stop(t(6400));
        assert_eq!(j.saved_s, 5400.0);
        assert_eq!(j.lost_s, 1000.0);
        assert!(j.lost_s <= 1800.0);
        assert_eq!(j.checkpoints, 3);
        // The restart pays the overhead, then resumes from the checkpoint.
        j.start("n2", t(7000));
        assert_eq!(j.finish_time(), Some(t(7000 + 300 + 4600)));
    }

    #[test]
    fn a_requested_checkpoint_saves_everything_once_written() {
        let mut j = job(10_000.0, Some(1800.0));
        j.submit(t(0));
        j.start("n1", t(0));
        let ack = j.request_checkpoint(t(2500)).unwrap();
        assert_eq!(ack, t(2520));
        assert!(!j.checkpoint_acknowledged(t(2510)));
        assert!(j.checkpoint_acknowledged(t(2520)));
        j.stop(t(2530));
        assert_eq!(j.saved_s, 2500.0);
        assert_eq!(j.lost_s, 30.0);
    }

    #[test]
    fn a_requested_checkpoint_pauses_the_job_for_its_pause_and_the_pause_is_lost_work() {
        let default = crate::core::cadence::DEFAULT_CHECKPOINT_PAUSE_S;
        let mut j = job(3600.0, Some(1800.0));
        j.submit(t(0));
        j.start("n1", t(0));
        j.request_checkpoint(t(1000)).unwrap();
        // A second request while the first is written starts no new write.
        j.request_checkpoint(t(1005)).unwrap();
        assert_eq!(j.finish_time(), Some(t(3600 + default as i64)));
        assert_eq!(j.lost_s, default);
        // A pod that checkpoints synchronously says so: it pauses longer.
        let mut sync = job(3600.0, Some(1800.0));
        sync.job.pod.checkpoint_pause_s = Some(60.0);
        sync.submit(t(0));
        sync.start("n1", t(0));
        sync.request_checkpoint(t(1000)).unwrap();
        assert_eq!(sync.finish_time(), Some(t(3660)));
        sync.finish(t(3660));
        assert_eq!(sync.lost_s, 60.0);
    }

    #[test]
    fn lost_work_is_split_by_cause_and_the_causes_add_up_to_the_total() {
        let pause = crate::core::cadence::DEFAULT_CHECKPOINT_PAUSE_S;
        let mut j = job(10_000.0, Some(1800.0));
        j.submit(t(0));
        j.start("n1", t(0));
        // A requested checkpoint at 1000 s: its pause is lost.
        j.request_checkpoint(t(1000)).unwrap();
        // Reclaimed at 2500 s: progress 2500 s less the pause, saved by the
        // periodic checkpoint of 1800 s: the rest is redone.
        j.stop(t(2500));
        let rework = 2500.0 - pause - 1800.0;
        assert_eq!(j.lost_by.checkpoint_pauses, pause);
        assert_eq!(j.lost_by.rework, rework);
        assert_eq!(j.lost_by.restarts, 0.0, "the first start pays no overhead");
        // Restarted, and reclaimed again 100 s in, inside its 300 s overhead.
        j.start("n2", t(3000));
        j.stop(t(3100));
        assert_eq!(j.lost_by.restarts, 100.0);
        assert_eq!(j.lost_by.rework, rework, "no progress yet");
        // Restarted once more and run to the finish: that restart's whole
        // overhead is lost too, though nothing interrupted it.
        j.start("n3", t(3200));
        let done = j.finish_time().unwrap();
        j.finish(done);
        assert_eq!(j.lost_by.restarts, 100.0 + 300.0);
        let by = j.lost_by;
        assert_eq!(by.rework + by.restarts + by.checkpoint_pauses, j.lost_s);
        // A strategy adds them up in GPU-hours.
        let mut total = LostBy::default();
        total.add_scaled(&by, 2.0 / 3600.0);
        assert_eq!(total.restarts, 800.0 / 3600.0);
    }

    #[test]
    fn a_checkpoint_interrupted_before_it_is_written_saves_nothing() {
        // Four minutes to write: a request at 2500 s is complete at 2740 s.
        let mut j = job_writing(10_000.0, Some(1800.0), 240.0);
        j.submit(t(0));
        j.start("n1", t(0));
        assert_eq!(j.request_checkpoint(t(2500)), Some(t(2740)));
        // Reclaimed two minutes after the request: the periodic checkpoint
        // of 1800 s (complete at 2040 s) is what is left.
        j.stop(t(2620));
        assert_eq!(j.saved_s, 1800.0);
        assert_eq!(j.lost_s, 820.0);
        // A periodic checkpoint is only complete one write time after the
        // progress it saves: stopped at 1800 + 100 s, it falls back to 0.
        let mut k = job_writing(10_000.0, Some(1800.0), 240.0);
        k.submit(t(0));
        k.start("n1", t(0));
        k.stop(t(1900));
        assert_eq!(k.saved_s, 0.0);
        assert_eq!(k.checkpoints, 0);
        assert_eq!(k.lost_s, 1900.0);
    }

    #[test]
    fn a_job_without_checkpoints_restarts_from_zero() {
        let mut j = job(3600.0, None);
        j.submit(t(0));
        j.start("n1", t(0));
        assert_eq!(j.request_checkpoint(t(100)), None);
        j.stop(t(3000));
        assert_eq!(j.saved_s, 0.0);
        assert_eq!(j.lost_s, 3000.0);
        j.start("n2", t(3100));
        assert_eq!(j.finish_time(), Some(t(3100 + 300 + 3600)));
    }
}
