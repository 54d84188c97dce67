//! `quartermaster market fit` on small synthetic SkyPilot fixtures of our
//! own (`tests/fixtures/spot/`): it writes a market file the catalog can
//! load, and a bad trace fails naming the file and the problem.

use quartermaster::catalog::MarketParams;
use std::path::Path;
use std::process::{Command, Output};

fn fit(traces: &Path, out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quartermaster"))
        .args(["market", "fit", "--traces"])
        .arg(traces)
        .arg("--out")
        .arg(out)
        .output()
        .expect("runs")
}

fn fixtures(which: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/spot")
        .join(which)
}

#[test]
fn fitting_the_fixtures_writes_a_market_file_with_provenance_that_loads() {
    let out = std::env::temp_dir().join(format!("qm-market-{}.json", std::process::id()));
    let run = fit(&fixtures("good"), &out);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    let params = MarketParams::parse(&text).unwrap();
    // 4 -> 2 takes one of three others, 4 -> 3 none, 4 -> 1 two more.
    assert!((params.reference.co_reclaim_probability - 3.0 / 9.0).abs() < 1e-9);
    assert!((params.reference.obtainability - 0.7).abs() < 1e-9);
    assert!(params.reference.mean_rate_per_hour() > 0.0);
    let files = params.provenance["files"].as_array().unwrap();
    assert_eq!(files.len(), 3);
    assert!(files
        .iter()
        .all(|f| f["sha256"].as_str().unwrap().len() == 64));
}

#[test]
fn an_empty_trace_fails_naming_the_file() {
    let out = std::env::temp_dir().join(format!("qm-market-bad-{}.json", std::process::id()));
    let run = fit(&fixtures("bad"), &out);
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(
        err.contains("empty_v100_1.json") && err.contains("empty"),
        "{err}"
    );
    assert!(!out.exists());
}
