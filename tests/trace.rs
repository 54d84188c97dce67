//! The trace reader on the real Alibaba trace in `../shared/traces` (read in
//! place, never copied), checked against the counts its README publishes.

use quartermaster::sim::trace;

#[test]
fn the_shared_alibaba_trace_parses_with_its_published_counts() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/traces/alibaba-v2025-dlrm.csv"
    );
    let text = std::fs::read_to_string(path).expect("shared/traces beside the checkout");
    let jobs = trace::parse(&text).unwrap();
    // shared/traces/README.md: 23,871 rows, 7,386 GPU pods (all gpus=1).
    assert_eq!(jobs.len(), 23_871);
    let gpu: Vec<_> = jobs.iter().filter(|j| j.gpus > 0.0).collect();
    assert_eq!(gpu.len(), 7_386);
    assert!(gpu.iter().all(|j| j.gpus == 1.0));
    assert!(jobs.windows(2).all(|w| w[0].submit_s <= w[1].submit_s));
    assert!(jobs.iter().all(|j| j.gpu_models.is_empty()));
    // Censoring, all rows: none 12,390, start 2,603, end 4,201, both 4,677;
    // a pod that existed before the trace has no queue time.
    use trace::Censored;
    let count = |c: Censored| jobs.iter().filter(|j| j.censored == c).count();
    assert_eq!(
        [
            Censored::None,
            Censored::Start,
            Censored::End,
            Censored::Both
        ]
        .map(count),
        [12_390, 2_603, 4_201, 4_677]
    );
    assert!(jobs
        .iter()
        .filter(|j| matches!(j.censored, Censored::Start | Censored::Both))
        .all(|j| j.queue_s.is_none()));
}
