//! Properties that must hold for every plan, checked over many seeded
//! workloads with random NodePool limits: every pending pod is placed exactly
//! once or explained, and no pool ends up over its limits; and, on small
//! instances, the planner's plan is the optimum an exhaustive search finds
//! (`oracle`).

mod oracle;

use quartermaster::api::labels as l;
use quartermaster::catalog::Catalog;
use quartermaster::plan::{self, workload, Input, Options, Plan, Strategy};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, BTreeSet};

fn check(plan: &Plan, input: &Input, label: &str) {
    let mut seen = BTreeSet::new();
    let names = plan
        .nodes
        .iter()
        .flat_map(|n| n.pods.iter())
        .chain(plan.existing.iter().map(|e| &e.pod))
        .chain(plan.unschedulable.iter().map(|u| &u.pod));
    for name in names {
        assert!(seen.insert(name.clone()), "{label}: {name} appears twice");
    }
    let all: BTreeSet<String> = input.pods.iter().map(|p| p.name.clone()).collect();
    assert_eq!(
        seen, all,
        "{label}: some pod is neither placed nor explained"
    );
    assert!(plan.unschedulable.iter().all(|u| !u.reason.is_empty()));

    for pool in input.pools {
        let mine: Vec<_> = plan
            .nodes
            .iter()
            .filter(|n| n.nodepool == pool.name)
            .collect();
        if let Some(max) = pool.limits.nodes {
            assert!(
                mine.len() as i64 <= max,
                "{label}: {} has {} nodes > {max}",
                pool.name,
                mine.len()
            );
        }
        if let Some(max) = pool.limits.cost_per_hour {
            let cost: f64 = mine.iter().map(|n| n.price_per_hour).sum();
            assert!(
                cost <= max + 1e-6,
                "{label}: {} costs {cost} > {max}",
                pool.name
            );
        }
        let gpus: i64 = mine
            .iter()
            .map(|n| {
                input
                    .catalog
                    .instance_type(&n.instance_type)
                    .and_then(|t| t.accelerator.as_ref())
                    .filter(|a| a.manufacturer == "NVIDIA")
                    .map_or(0, |a| a.count as i64)
            })
            .sum();
        let limit = pool.limits.resources.get(l::RESOURCE_GPU);
        if limit > 0 && pool.sharing == quartermaster::cluster::GpuSharing::None {
            assert!(
                gpus <= limit,
                "{label}: {} has {gpus} GPUs > {limit}",
                pool.name
            );
        }
    }
    // Pods of a gang are all placed or none is.
    let mut gangs: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let placed: BTreeSet<&String> = plan.nodes.iter().flat_map(|n| n.pods.iter()).collect();
    for p in input.pods {
        if let Some(g) = &p.group {
            let e = gangs.entry(g.name.clone()).or_default();
            e.0 += 1;
            e.1 += placed.contains(&p.name) as usize;
        }
    }
    if plan.strategy == Strategy::Mip {
        for (g, (members, on_new)) in gangs {
            assert!(
                on_new == 0 || on_new == members,
                "{label}: gang {g} split {on_new}/{members}"
            );
        }
    }
}

#[test]
fn every_pod_is_placed_once_or_explained_and_limits_hold() {
    let catalog = Catalog::embedded().unwrap();
    for seed in 0..12u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut pools = workload::pools();
        for pool in &mut pools {
            if rng.random_bool(0.5) {
                pool.limits.nodes = Some(rng.random_range(1..=20));
            }
            if rng.random_bool(0.5) {
                pool.limits.cost_per_hour = Some(rng.random_range(5..=300) as f64);
            }
            if rng.random_bool(0.5) {
                pool.limits
                    .resources
                    .set(l::RESOURCE_GPU, rng.random_range(1..=64));
            }
        }
        let pods = workload::pods(rng.random_range(20..=300), seed);
        let input = Input {
            catalog: &catalog,
            region: "us-east-1",
            pools: &pools,
            nodes: &[],
            pods: &pods,
            unavailable: &|_| false,
            learned_rate: None,
            now: None,
        };
        for strategy in [Strategy::Mip, Strategy::Greedy] {
            let p = plan::plan(&input, strategy, &Options::default(), &|| 0.0);
            check(&p, &input, &format!("seed {seed} {strategy:?}"));
        }
    }
}

/// Instances the optimality oracle checks.
const ORACLE_INSTANCES: u64 = 2000;

/// How `seed`'s instance fares: `Err` says how a plan broke a rule or
/// missed the optimum.
fn oracle_check(source: &oracle::Source, seed: u64) -> Result<(), String> {
    let opts = Options {
        mip_gap: std::env::var("QM_GAP")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.01),
        ..Options::default()
    };
    let inst = oracle::instance(source, seed);
    let input = inst.input();
    let rules = oracle::Rules::new(&input, &opts);
    let t0 = std::time::Instant::now();
    let best = rules.optimum();
    let t1 = t0.elapsed().as_secs_f64();
    let mip = plan::plan(&input, Strategy::Mip, &opts, &|| 0.0);
    let t2 = t0.elapsed().as_secs_f64() - t1;
    if std::env::var("QM_ORACLE_TRACE").is_ok() {
        eprintln!(
            "seed {seed}: oracle {t1:.3}s mip {t2:.3}s {:?} pods {} cands",
            inst.pods.len(),
            rules_cands(&rules)
        );
    }
    let v = rules
        .value_of(&mip)
        .map_err(|e| format!("seed {seed}: the MIP plan breaks a rule: {e}"))?;
    if v.worse_than(&best, opts.mip_gap) {
        return Err(format!(
            "seed {seed}: the MIP plan {v:?} misses the optimum {best:?}: {:#?}\n{inst:#?}",
            mip.nodes
        ));
    }
    if best.worse_than(&v, 1e-9) {
        return Err(format!(
            "seed {seed}: the MIP plan {v:?} beats the oracle's optimum {best:?}"
        ));
    }
    // The bound over the pods the plan placed never exceeds what it costs,
    // nor the optimum when that places every pod too.
    let lb = plan::bound::lower_bound(&input, &plan::launched_pods(&input, &mip), &opts);
    if lb > v.cost * (1.0 + 1e-9) + 1e-6
        || (best.unplaced == 0 && lb > best.cost * (1.0 + 1e-9) + 1e-6)
    {
        return Err(format!(
            "seed {seed}: the lower bound {lb} exceeds the plan {v:?} or the optimum {best:?}"
        ));
    }
    let greedy = plan::plan(&input, Strategy::Greedy, &opts, &|| 0.0);
    // Greedy ignores gangs; where its plan keeps every rule, it cannot do
    // better than the optimum.
    if let Ok(g) = rules.value_of(&greedy) {
        if best.worse_than(&g, 1e-9) {
            return Err(format!(
                "seed {seed}: greedy {g:?} beats the oracle's optimum {best:?}"
            ));
        }
    }
    Ok(())
}

#[test]
fn on_small_instances_the_plan_is_the_exhaustive_optimum_and_greedy_never_beats_it() {
    let source = oracle::Source::new(&Catalog::embedded().unwrap());
    let n: u64 = std::env::var("QM_ORACLE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ORACLE_INSTANCES);
    let from: u64 = std::env::var("QM_ORACLE_FROM")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let failures: Vec<String> = (from..from + n)
        .filter_map(|seed| oracle_check(&source, seed).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {ORACLE_INSTANCES} instances failed; the first:\n{}",
        failures.len(),
        failures
            .iter()
            .take(if std::env::var("QM_ORACLE_TRACE").is_ok() {
                20
            } else {
                3
            })
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn rules_cands(r: &oracle::Rules) -> usize {
    r.cands_len()
}
