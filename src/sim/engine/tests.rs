//! Runs of the engine compared with themselves.

use super::*;

/// The scenario's first strategy, run knowing the nodes' revision (given to
/// the core, and kept by binding with the jobs that fit nowhere) and
/// without it; and how many waiting jobs the knowing run's binds passed
/// over.
fn both_ways(file: &str) -> (StrategyResult, StrategyResult, usize) {
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let scenario = Scenario::parse(&std::fs::read_to_string(path).unwrap(), &catalog).unwrap();
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations");
    let workload = super::super::load_jobs(&scenario, &catalog, &base, None).unwrap();
    let run = |blind: bool| {
        let mut engine =
            Engine::new(&scenario, &catalog, &workload.jobs, scenario.strategies[0]).unwrap();
        engine.blind = blind;
        let passed = engine.passed_over.clone();
        (engine.run(&mut |_| {}), passed.get())
    };
    let ((told, passed), (blind, _)) = (run(false), run(true));
    (told, blind, passed)
}

#[test]
fn the_run_is_the_same_whether_or_not_it_knows_the_nodes_revision() {
    // A storm (notices, drains, replacements, consolidation; jobs wait for
    // nodes to boot while others finish), an image release (every node
    // drifts at once) and a week of faulty GPUs.
    let (told, blind, passed) = both_ways("simulations/interruption-storm.yaml");
    assert!(told.spot_notices > 0, "no storm");
    assert!(passed > 0, "no bind passed over a waiting job");
    assert_eq!(told, blind);
    let (told, blind, _) = both_ways("simulations/image-release.yaml");
    assert_eq!(told, blind);
    // A faulty GPU: repair reboots its node, reading every node's
    // signals (kept while the nodes are the same).
    let (told, blind, _) = both_ways("simulations/training-week.yaml");
    assert!(told.faults > 0 && told.reboots > 0, "no repairs");
    assert_eq!(told, blind);
}
