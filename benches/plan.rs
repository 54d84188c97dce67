//! Planner benchmark: the MIP and the greedy baseline on the same seeded
//! workload over us-east-1's full catalog, so their times compare as a ratio
//! in one run. `cargo bench --bench plan`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use quartermaster::catalog::Catalog;
use quartermaster::plan::{self, workload, Input, Options, Strategy};
use std::time::Instant;

fn bench(c: &mut Criterion) {
    let catalog = Catalog::embedded().expect("embedded catalog");
    let pools = workload::pools();
    let mut group = c.benchmark_group("plan");
    group.sample_size(10);
    for n in [500, 2000] {
        let pods = workload::pods(n, 1);
        let input = Input::offline(&catalog, "us-east-1", &pools, &pods);
        for strategy in [Strategy::Mip, Strategy::Greedy] {
            group.bench_with_input(
                BenchmarkId::new(format!("{strategy:?}").to_lowercase(), n),
                &input,
                |b, input| {
                    b.iter(|| {
                        let start = Instant::now();
                        plan::plan(input, strategy, &Options::default(), &|| {
                            start.elapsed().as_secs_f64()
                        })
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
