use super::*;

/// `simulate --seeds` runs the scenario once per seed and reports each
/// strategy's spread and the per-seed summaries, each with its own seed.
#[test]
fn simulate_over_several_seeds_reports_the_spread_and_each_seed() {
    let j = cli_json(&[
        "simulate",
        "simulations/smoke.yaml",
        "--seeds",
        "3-4",
        "--strategies",
        "quartermaster,on-demand",
        "--output",
        "json",
    ]);
    assert_eq!(j["seeds"], serde_json::json!([3, 4]));
    let per_seed: Vec<f64> = (0..2)
        .map(|i| {
            assert_eq!(j["per_seed"][i]["seed"], serde_json::json!(3 + i as u64));
            j["per_seed"][i]["strategies"]["quartermaster"]["total_cost"]
                .as_f64()
                .unwrap()
        })
        .collect();
    let cost = &j["strategies"]["quartermaster"]["total_cost"];
    assert!((cost["mean"].as_f64().unwrap() - (per_seed[0] + per_seed[1]) / 2.0).abs() < 1e-6);
    assert_eq!(cost["min"].as_f64().unwrap(), per_seed[0].min(per_seed[1]));
    assert_eq!(cost["seeds"], serde_json::json!(2));
    assert!(j["comparisons"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["against"] == "on-demand" && c["measure"] == "total_cost"));
    let bad = cli(&["simulate", "simulations/smoke.yaml", "--seeds", "7-1"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("must go upwards"));
}

/// `simulate --sweep` gives, for each value, exactly what `simulate
/// --seeds` gives for the scenario file with that value written in it, and
/// writes sweep.json and a frontier.png; a misspelt path is refused before
/// anything runs.
#[test]
fn a_sweep_point_is_the_seeds_run_of_the_scenario_with_that_value_written_in() {
    let dir = crate::support::TempDir::new("qm-sweep");
    let report = dir.join("report");
    let values = ["0", "8"];
    let sweep = format!("nodePools.train.risk.riskAversion={}", values.join(","));
    let report_arg = report.display().to_string();
    let j = cli_json(&[
        "simulate",
        "simulations/smoke.yaml",
        "--sweep",
        &sweep,
        "--seeds",
        "1-2",
        "--output",
        "json",
        "--report",
        &report_arg,
    ]);
    assert_eq!(j["seeds"], serde_json::json!([1, 2]));
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(written, j, "sweep.json is what --output json printed");
    let png = std::fs::read(report.join("frontier.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "frontier.png is a PNG");

    let smoke = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/smoke.yaml"),
    )
    .unwrap();
    let pools = "    capacityTypes: [spot, on-demand]\n";
    assert!(smoke.contains(pools));
    for (k, v) in values.iter().enumerate() {
        let file = dir.join(format!("smoke-{v}.yaml"));
        let text = smoke.replace(pools, &format!("{pools}    risk: {{riskAversion: {v}}}\n"));
        std::fs::write(&file, text).unwrap();
        let file_arg = file.display().to_string();
        let seeds = cli_json(&[
            "simulate",
            &file_arg,
            "--seeds",
            "1-2",
            "--strategies",
            "quartermaster,greedy,on-demand",
            "--output",
            "json",
        ]);
        let point = &j["points"][k];
        assert_eq!(
            point["settings"]["nodePools.train.risk.riskAversion"],
            v.parse::<u32>().unwrap()
        );
        for strategy in ["quartermaster", "greedy", "on-demand"] {
            for measure in ["total_cost", "lost_share", "p95_slowdown", "interruptions"] {
                assert_eq!(
                    point["strategies"][strategy][measure], seeds["strategies"][strategy][measure],
                    "riskAversion {v}: {strategy}'s {measure}"
                );
            }
        }
    }

    let bad = cli(&[
        "simulate",
        "simulations/smoke.yaml",
        "--sweep",
        "nodePools.train.risk.riskAverson=1,2",
    ]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("did you mean riskAversion?"), "{err}");
}

/// On the smoke scenario (a storm on g5/g6 spot), raising the pool's
/// riskAversion never raises quartermaster's lost work, on the mean over
/// seeds 1-5 (a single seed's draw can go either way: at 2 one seed lost
/// more than at 1), and the highest value loses far less than 0: the knob
/// the frontier sweeps does what it says.
#[test]
fn on_the_smoke_scenario_more_risk_aversion_never_raises_mean_lost_work() {
    use quartermaster::sim::{seeds, sweep};
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations/smoke.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let values = "nodePools.train.risk.riskAversion=0,1,2,4,8,15,30";
    let points =
        sweep::scenarios("smoke.yaml", &text, &catalog, &[values.parse().unwrap()]).unwrap();
    let runs = sim::simulate_sweep(
        points,
        &catalog,
        path.parent().unwrap(),
        None,
        &[StrategyName::Quartermaster],
        &[1, 2, 3, 4, 5],
        &mut |_, _, _, _| {},
    )
    .unwrap();
    let lost: Vec<(String, f64)> = runs
        .iter()
        .map(|(p, r)| {
            let mean = r.spread("quartermaster", seeds::lost_share).unwrap().mean;
            (p.values(), mean)
        })
        .collect();
    for pair in lost.windows(2) {
        assert!(
            pair[1].1 <= pair[0].1,
            "riskAversion {} loses {:.2}% against {:.2}% at {}: {lost:?}",
            pair[1].0,
            pair[1].1 * 100.0,
            pair[0].1 * 100.0,
            pair[0].0
        );
    }
    let (first, last) = (lost[0].1, lost[lost.len() - 1].1);
    assert!(last < first / 4.0, "{lost:?}");
}
