//! Runs of the engine compared with themselves.

use super::*;

/// The scenario's first strategy, run with the nodes' revision given to the
/// core and without it.
fn both_ways(file: &str) -> (StrategyResult, StrategyResult) {
    let catalog = Arc::new(Catalog::embedded().unwrap());
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let scenario = Scenario::parse(&std::fs::read_to_string(path).unwrap(), &catalog).unwrap();
    let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("simulations");
    let workload = super::super::load_jobs(&scenario, &catalog, &base, None).unwrap();
    let run = |blind: bool| {
        let mut engine =
            Engine::new(&scenario, &catalog, &workload.jobs, scenario.strategies[0]).unwrap();
        engine.blind = blind;
        engine.run(&mut |_| {})
    };
    (run(false), run(true))
}

#[test]
fn the_core_decides_the_same_whether_or_not_it_is_told_the_nodes_revision() {
    // A storm (notices, drains, replacements, consolidation) and an image
    // release (every node drifts at once).
    let (told, blind) = both_ways("simulations/interruption-storm.yaml");
    assert!(told.spot_notices > 0, "no storm");
    assert_eq!(told, blind);
    let (told, blind) = both_ways("simulations/image-release.yaml");
    assert_eq!(told, blind);
}
