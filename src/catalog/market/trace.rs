//! Spot traces in the SkyPilot format
//! (`{"metadata": {"gap_seconds": N}, "data": [...]}`), parsed from text
//! with errors that name the file. Two kinds, which the file cannot tell
//! apart by itself: a *preemption* trace counts running instances of a pool
//! kept filled (a drop is a reclaim, a rise a relaunch); an *availability*
//! trace holds launch probes (how many launches succeeded at each tick, 0 =
//! the pool was closed). Used by the fit and by trace replay.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A trace that cannot be used, naming the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spot trace {file}: {problem}")]
pub struct Error {
    /// The file (path or name as given).
    pub file: String,
    /// What is wrong.
    pub problem: String,
}

/// Running instances or launch probes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum TraceKind {
    /// Running count of a pool kept filled: drops are reclaims.
    Preemption,
    /// Launch probes: 0 means no launch succeeded (the pool was closed).
    Availability,
}

impl TraceKind {
    /// The kind named by a folder of the path (`.../preemption/...` or
    /// `.../availability/...`), as in the SkyPilot repository.
    pub fn from_path(path: &str) -> Option<TraceKind> {
        let mut kind = None;
        for part in path.split(['/', '\\']) {
            match part {
                "preemption" => kind = Some(TraceKind::Preemption),
                "availability" => kind = Some(TraceKind::Availability),
                _ => {}
            }
        }
        kind
    }
}

impl fmt::Display for TraceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TraceKind::Preemption => "preemption",
            TraceKind::Availability => "availability",
        })
    }
}

/// One parsed trace.
#[derive(Debug, Clone, PartialEq)]
pub struct SpotTrace {
    /// The file it came from.
    pub file: String,
    /// What it counts.
    pub kind: TraceKind,
    /// Seconds between ticks.
    pub gap_seconds: f64,
    /// The count at each tick.
    pub data: Vec<u32>,
}

impl SpotTrace {
    /// Parses a trace of `kind` from the text of `file`.
    ///
    /// # Errors
    /// [`Error`] naming `file` when the text is not JSON, lacks
    /// `metadata.gap_seconds` (a positive number) or a non-empty `data`
    /// array of non-negative integers, or is a preemption trace in which no
    /// instance ever ran (a probe trace of failures, or the wrong file).
    pub fn parse(file: &str, kind: TraceKind, text: &str) -> Result<SpotTrace, Error> {
        let fail = |problem: String| Error {
            file: file.to_string(),
            problem,
        };
        if text.trim().is_empty() {
            return Err(fail("the file is empty".into()));
        }
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| fail(format!("not JSON: {e}")))?;
        let Some(object) = value.as_object() else {
            return Err(fail(
                "not a SkyPilot trace: expected an object with `metadata` and `data`".into(),
            ));
        };
        let gap_seconds = object
            .get("metadata")
            .and_then(|m| m.get("gap_seconds"))
            .ok_or_else(|| fail("not a SkyPilot trace: no `metadata.gap_seconds`".into()))?
            .as_f64()
            .filter(|g| g.is_finite() && *g > 0.0)
            .ok_or_else(|| fail("`metadata.gap_seconds` must be a positive number".into()))?;
        let data = object
            .get("data")
            .and_then(|d| d.as_array())
            .ok_or_else(|| fail("not a SkyPilot trace: no `data` array".into()))?;
        if data.is_empty() {
            return Err(fail("`data` is empty: no ticks".into()));
        }
        let data = data
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| {
                        fail(format!("data[{i}] = {v} is not a count (an integer >= 0)"))
                    })
            })
            .collect::<Result<Vec<u32>, Error>>()?;
        if kind == TraceKind::Preemption && data.iter().all(|&n| n == 0) {
            return Err(fail(
                "a preemption trace in which no instance ever ran: is it a launch-probe \
                 (availability) trace?"
                    .into(),
            ));
        }
        Ok(SpotTrace {
            file: file.to_string(),
            kind,
            gap_seconds,
            data,
        })
    }

    /// Hours between ticks.
    pub fn gap_hours(&self) -> f64 {
        self.gap_seconds / 3600.0
    }

    /// Length of the trace, hours.
    pub fn hours(&self) -> f64 {
        self.data.len() as f64 * self.gap_hours()
    }

    /// The largest count: the pool size of a preemption trace, the probes
    /// per tick of an availability trace.
    pub fn size(&self) -> u32 {
        self.data.iter().copied().max().unwrap_or(0)
    }

    /// Each drop of the count: `(tick, count before, how many went)`.
    pub fn drops(&self) -> impl Iterator<Item = (usize, u32, u32)> + '_ {
        self.data
            .windows(2)
            .enumerate()
            .filter(|(_, w)| w[1] < w[0])
            .map(|(i, w)| (i + 1, w[0], w[0] - w[1]))
    }

    /// The runs of ticks with a count of 0 as `(first tick, length)`.
    pub fn zero_runs(&self) -> Vec<(usize, usize)> {
        let mut runs = Vec::new();
        let mut start = None;
        for (i, &n) in self.data.iter().enumerate() {
            match (n, start) {
                (0, None) => start = Some(i),
                (1.., Some(s)) => {
                    runs.push((s, i - s));
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            runs.push((s, self.data.len() - s));
        }
        runs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(kind: TraceKind, text: &str) -> Result<SpotTrace, Error> {
        SpotTrace::parse("t/us-east-1a_v100_1.json", kind, text)
    }

    #[test]
    fn a_trace_parses_with_its_drops_and_zero_runs() {
        let t = parse(
            TraceKind::Preemption,
            r#"{"metadata":{"gap_seconds":360},"data":[4,4,2,2,0,0,3,4],"prices":[1]}"#,
        )
        .unwrap();
        assert_eq!(t.gap_hours(), 0.1);
        assert_eq!(t.size(), 4);
        assert_eq!(t.drops().collect::<Vec<_>>(), [(2, 4, 2), (4, 2, 2)]);
        assert_eq!(t.zero_runs(), [(4, 2)]);
        assert!((t.hours() - 0.8).abs() < 1e-12);
    }

    #[test]
    fn malformed_empty_and_wrong_kind_traces_name_the_file_and_the_problem() {
        let cases = [
            (TraceKind::Preemption, "", "empty"),
            (TraceKind::Preemption, "{\"metadata\":", "not JSON"),
            (TraceKind::Preemption, "[1,0,1]", "not a SkyPilot trace"),
            (TraceKind::Preemption, r#"{"data":[1]}"#, "gap_seconds"),
            (
                TraceKind::Availability,
                r#"{"metadata":{"gap_seconds":0},"data":[1]}"#,
                "positive",
            ),
            (
                TraceKind::Availability,
                r#"{"metadata":{"gap_seconds":60},"data":[]}"#,
                "empty",
            ),
            (
                TraceKind::Availability,
                r#"{"metadata":{"gap_seconds":60},"data":[1,-1]}"#,
                "data[1]",
            ),
            (
                TraceKind::Preemption,
                r#"{"metadata":{"gap_seconds":60},"data":[0,0,0]}"#,
                "availability",
            ),
        ];
        for (kind, text, problem) in cases {
            let e = parse(kind, text).unwrap_err().to_string();
            assert!(e.contains("t/us-east-1a_v100_1.json"), "{e}");
            assert!(e.contains(problem), "{problem:?} missing from {e}");
        }
    }

    #[test]
    fn the_kind_comes_from_the_folder() {
        assert_eq!(
            TraceKind::from_path("x/skypilot/preemption/1-node/a.json"),
            Some(TraceKind::Preemption)
        );
        assert_eq!(
            TraceKind::from_path("availability/16-node/b.json"),
            Some(TraceKind::Availability)
        );
        assert_eq!(TraceKind::from_path("other/c.json"), None);
    }
}
