//! Which rows of a trace a replay takes, and when: a window `[from, to)` of
//! the trace's time with the pods alive at `from` carried in, rows dropped
//! by their final status, and censored rows (alive at the trace's end)
//! kept as given, run to the end of the simulation, or dropped. Pure: rows
//! in, rows out, with a note of everything left out.

use super::trace::{Censored, TraceJob};
use schemars::JsonSchema;
use serde::Deserialize;
use std::collections::BTreeMap;

/// What to do with rows still running when the trace ended (`censored`
/// `end` or `both`: their `duration_s` is only a lower bound).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CensoredRows {
    /// Replay the duration as written (the default).
    #[default]
    AsGiven,
    /// Keep them running to the end of the simulation, as they did to the
    /// end of the trace.
    RunToEnd,
    /// Leave every censored row out (start or end).
    Drop,
}

/// The rows to replay.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Window {
    /// Trace seconds at which the replay starts.
    pub from_s: f64,
    /// Trace seconds from which on no row is replayed (None: the end).
    pub to_s: Option<f64>,
    /// Whether pods submitted before `from` and alive at it are replayed,
    /// from the simulation's start, for the rest of their run.
    pub carry_in: bool,
    /// Final statuses whose rows are left out (compared without case).
    pub drop_status: Vec<String>,
    /// Censored rows.
    pub censored: CensoredRows,
    /// Seconds the simulation lasts (how long `run-to-end` rows run).
    pub horizon_s: f64,
}

/// The rows a window keeps, with submit times from its start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selected {
    /// The rows, in order; a carried-in row starts at 0 with what was left
    /// of its run and has no queue time.
    pub rows: Vec<TraceJob>,
    /// How many rows were carried in.
    pub carried_in: usize,
    /// What was left out, for the report (`3 rows with status Failed`).
    pub notes: Vec<String>,
}

impl Window {
    /// The rows of `rows` this window replays.
    pub fn select(&self, rows: Vec<TraceJob>) -> Selected {
        let mut out = Selected::default();
        let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
        let (mut censored, mut before, mut after, mut extended) = (0, 0, 0, 0);
        for mut row in rows {
            if let Some(s) = self
                .drop_status
                .iter()
                .find(|s| s.eq_ignore_ascii_case(&row.status))
            {
                *by_status.entry(s.clone()).or_default() += 1;
                continue;
            }
            if self.censored == CensoredRows::Drop && row.censored != Censored::None {
                censored += 1;
                continue;
            }
            if self.to_s.is_some_and(|to| row.submit_s >= to) {
                after += 1;
                continue;
            }
            let run_to_end = self.censored == CensoredRows::RunToEnd && row.censored.at_end();
            let end = row.submit_s + row.duration_s;
            if row.submit_s < self.from_s {
                if !(self.carry_in && (end > self.from_s || run_to_end)) {
                    before += 1;
                    continue;
                }
                row.duration_s = (end - self.from_s).max(0.0);
                row.submit_s = 0.0;
                row.queue_s = None;
                out.carried_in += 1;
            } else {
                row.submit_s -= self.from_s;
            }
            if run_to_end {
                // Past the end of the simulation: it never finishes in it.
                row.duration_s = row.duration_s.max(self.horizon_s - row.submit_s + 1.0);
                extended += 1;
            }
            out.rows.push(row);
        }
        for (status, n) in by_status {
            out.notes
                .push(format!("{n} rows with status {status} left out"));
        }
        let counts = [
            (censored, "censored rows left out"),
            (before, "rows that ended before the window's start left out"),
            (after, "rows submitted after the window's end left out"),
            (
                out.carried_in,
                "pods alive at the window's start carried in",
            ),
            (extended, "censored rows run to the end of the simulation"),
        ];
        out.notes.extend(
            counts
                .into_iter()
                .filter(|(n, _)| *n > 0)
                .map(|(n, what)| format!("{n} {what}")),
        );
        out
    }
}

/// The mean and 95th percentile of `queue_s` (the original cluster's
/// queue times), over the pods that have one.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct QueueTime {
    /// Pods with a queue time.
    pub pods: usize,
    /// Mean seconds.
    pub mean_s: f64,
    /// 95th percentile, seconds.
    pub p95_s: f64,
}

impl QueueTime {
    /// Over `queues` (seconds); None without any.
    pub fn of(queues: &[f64]) -> Option<QueueTime> {
        if queues.is_empty() {
            return None;
        }
        let mut q = queues.to_vec();
        q.sort_by(f64::total_cmp);
        let rank = ((q.len() as f64 * 0.95).ceil() as usize).clamp(1, q.len());
        Some(QueueTime {
            pods: q.len(),
            mean_s: q.iter().sum::<f64>() / q.len() as f64,
            p95_s: q[rank - 1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, submit: f64, duration: f64, status: &str, censored: Censored) -> TraceJob {
        TraceJob {
            job_id: id.into(),
            submit_s: submit,
            duration_s: duration,
            gpus: 1.0,
            queue_s: Some(10.0),
            status: status.into(),
            censored,
            ..Default::default()
        }
    }

    fn rows() -> Vec<TraceJob> {
        vec![
            row("alive", 100.0, 1000.0, "", Censored::None),
            row("gone", 100.0, 100.0, "", Censored::None),
            row("failed", 600.0, 100.0, "Failed", Censored::None),
            row("in", 700.0, 100.0, "Succeeded", Censored::None),
            row("open", 800.0, 100.0, "", Censored::End),
            row("late", 2000.0, 100.0, "", Censored::None),
        ]
    }

    fn ids(s: &Selected) -> Vec<(&str, f64, f64)> {
        s.rows
            .iter()
            .map(|r| (r.job_id.as_str(), r.submit_s, r.duration_s))
            .collect()
    }

    #[test]
    fn a_window_carries_in_the_pods_alive_at_its_start_and_drops_the_rest() {
        let w = Window {
            from_s: 500.0,
            to_s: Some(1500.0),
            carry_in: true,
            drop_status: vec!["failed".into()],
            horizon_s: 3600.0,
            ..Default::default()
        };
        let s = w.select(rows());
        assert_eq!(
            ids(&s),
            [
                ("alive", 0.0, 600.0),
                ("in", 200.0, 100.0),
                ("open", 300.0, 100.0)
            ]
        );
        assert_eq!(s.carried_in, 1);
        assert_eq!(s.rows[0].queue_s, None, "a carried-in pod did not queue");
        assert_eq!(
            s.notes,
            [
                "1 rows with status failed left out",
                "1 rows that ended before the window's start left out",
                "1 rows submitted after the window's end left out",
                "1 pods alive at the window's start carried in",
            ]
        );
        let without = Window {
            carry_in: false,
            ..w
        };
        assert_eq!(without.select(rows()).rows[0].job_id, "in");
    }

    #[test]
    fn censored_rows_run_to_the_end_or_are_dropped_when_asked() {
        let w = Window {
            censored: CensoredRows::RunToEnd,
            horizon_s: 3600.0,
            ..Default::default()
        };
        let s = w.select(rows());
        let open = s.rows.iter().find(|r| r.job_id == "open").unwrap();
        assert!(open.submit_s + open.duration_s > 3600.0, "{open:?}");
        assert!(s
            .notes
            .contains(&"1 censored rows run to the end of the simulation".into()));
        let dropped = Window {
            censored: CensoredRows::Drop,
            ..w
        }
        .select(rows());
        assert!(dropped.rows.iter().all(|r| r.job_id != "open"));
        assert_eq!(dropped.rows.len(), 5);
    }

    #[test]
    fn queue_time_is_the_mean_and_p95_of_the_known_ones() {
        assert_eq!(QueueTime::of(&[]), None);
        let q = QueueTime::of(&(1..=20).map(f64::from).collect::<Vec<_>>()).unwrap();
        assert_eq!((q.pods, q.mean_s, q.p95_s), (20, 10.5, 19.0));
    }
}
