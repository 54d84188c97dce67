//! A cluster's device data (`--device-data FILE`, `QM_DEVICE_DATA`) kept
//! current while the controller runs: the file is read again every poll
//! (a ConfigMap mounted as a volume is updated in place by kubelet's
//! symlink swap, so its content is compared, not a watch on the path), and
//! each change is laid over the catalog the loop decides on
//! ([`crate::catalog::Catalog::with_devices`]), over every catalog the
//! price refresh sends too. Content that does not read is refused, logged
//! and counted (`quartermaster_device_data_rejected`); the last good data
//! stays in force. This is driver I/O: the core only ever sees a catalog.
//! See `docs/dra.md` ("Device data without a restart").

use crate::catalog::{Catalog, DeviceData};
use crate::metrics::Metrics;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How often the file is read again.
pub const POLL_EVERY: Duration = Duration::from_secs(10);

/// What reading the file again came to.
#[derive(Debug)]
pub enum Reload {
    /// The content is the one last read.
    Unchanged,
    /// New content that reads: the data to lay over the catalog.
    Changed(Arc<DeviceData>),
    /// New content (or no file) that does not read: why. The last good
    /// data stays in force.
    Refused(String),
}

/// The device data file and what was last read from it.
#[derive(Debug)]
pub struct DeviceFile {
    path: PathBuf,
    /// The content last read, good or not (so a bad file is reported once
    /// per change, not every poll).
    seen: Option<Result<String, String>>,
    /// The data of the last content that read.
    good: Option<Arc<DeviceData>>,
}

impl DeviceFile {
    /// The file at `path`, with `current` the data read from it at start-up.
    pub fn new(path: PathBuf, current: Option<Arc<DeviceData>>) -> DeviceFile {
        let seen = std::fs::read_to_string(&path).map_err(|e| e.to_string());
        DeviceFile {
            path,
            seen: Some(seen),
            good: current,
        }
    }

    /// The data in force: the last content that read.
    pub fn current(&self) -> Option<Arc<DeviceData>> {
        self.good.clone()
    }

    /// Reads the file again.
    pub fn poll(&mut self) -> Reload {
        let read = std::fs::read_to_string(&self.path).map_err(|e| e.to_string());
        if self.seen.as_ref() == Some(&read) {
            return Reload::Unchanged;
        }
        self.seen = Some(read.clone());
        let name = self.path.display().to_string();
        match read {
            Err(e) => Reload::Refused(format!("cannot read {name}: {e}")),
            Ok(text) => match DeviceData::parse(&name, &text) {
                Ok(d) => {
                    let d = Arc::new(d);
                    self.good = Some(d.clone());
                    Reload::Changed(d)
                }
                Err(e) => Reload::Refused(e.to_string()),
            },
        }
    }
}

/// `catalog` with `devices` laid over it (the catalog as it is without).
pub fn overlay(catalog: &Catalog, devices: Option<&DeviceData>) -> Arc<Catalog> {
    match devices {
        Some(d) => Arc::new(catalog.clone().with_devices(d)),
        None => Arc::new(catalog.clone()),
    }
}

/// Forwards every catalog of `upstream` (prices, reservations) to `out`
/// with the file's device data laid over it, and reads the file again
/// every `every`, sending the catalog again when its data changed, until
/// `stop`.
pub async fn keep_devices_current(
    mut file: DeviceFile,
    mut upstream: watch::Receiver<Arc<Catalog>>,
    out: watch::Sender<Arc<Catalog>>,
    metrics: Arc<Metrics>,
    every: Duration,
    stop: CancellationToken,
) {
    let mut poll = tokio::time::interval(every);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = upstream.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = poll.tick() => match file.poll() {
                Reload::Unchanged => continue,
                Reload::Changed(d) => {
                    metrics.device_data_rejected.set(0);
                    tracing::info!(
                        file = %file.path.display(),
                        types = d.instance_types.len(),
                        "device data changed; laid over the catalog from the next round"
                    );
                }
                Reload::Refused(why) => {
                    metrics.device_data_rejected.set(1);
                    tracing::error!(
                        file = %file.path.display(),
                        "device data refused, the last good data stays in force: {why}"
                    );
                    continue;
                }
            },
        }
        let base = upstream.borrow_and_update().clone();
        out.send_replace(overlay(&base, file.current().as_deref()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::GpuLayout;

    /// Device data giving `type_name` one GPU with `memory`.
    fn data(type_name: &str, memory: &str) -> String {
        format!(
            "instanceTypes:\n  {type_name}:\n  - driver: gpu.nvidia.com\n    kind: gpu\n    count: 1\n    attributes: {{type: gpu, productName: NVIDIA Test}}\n    capacity: {{memory: {memory}}}\n"
        )
    }

    /// A fresh directory of this test process for `test`.
    fn scratch(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("qm-device-data-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn memory_of(c: &Catalog, type_name: &str) -> String {
        let it = c.instance_type(type_name).unwrap();
        let t = c.device_templates(it, GpuLayout::Whole);
        t.iter()
            .find(|t| t.kind == "gpu")
            .map(|t| t.capacity["gpu.nvidia.com/memory"].clone())
            .unwrap_or_default()
    }

    #[tokio::test(start_paused = true)]
    async fn a_changed_file_changes_the_templates_of_the_next_catalog_and_a_broken_one_keeps_the_last_good(
    ) {
        let path = scratch("changes").join("devices.yaml");
        std::fs::write(&path, data("g6e.xlarge", "40Gi")).unwrap();
        let first = DeviceData::parse("f", &data("g6e.xlarge", "40Gi")).unwrap();
        let base = Arc::new(Catalog::embedded().unwrap());
        let file = DeviceFile::new(path.clone(), Some(Arc::new(first.clone())));
        let (up_tx, up_rx) = watch::channel(base.clone());
        let (out_tx, mut out_rx) = watch::channel(overlay(&base, Some(&first)));
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Arc::new(Metrics::new(&mut registry));
        let stop = CancellationToken::new();
        let task = tokio::spawn(keep_devices_current(
            file,
            up_rx,
            out_tx,
            metrics.clone(),
            Duration::from_secs(10),
            stop.clone(),
        ));
        let before = out_rx.borrow_and_update().clone();
        assert_eq!(memory_of(&before, "g6e.xlarge"), "40Gi");

        // The ConfigMap changes: the next catalog has the new templates,
        // under a new revision (what the DRA resolver caches by).
        std::fs::write(&path, data("g6e.xlarge", "44Gi")).unwrap();
        out_rx.changed().await.unwrap();
        let after = out_rx.borrow_and_update().clone();
        assert_eq!(memory_of(&after, "g6e.xlarge"), "44Gi");
        assert_ne!(after.revision(), before.revision());
        assert_eq!(metrics.device_data_rejected.get(), 0);

        // Broken content: refused, counted, the last good data kept; a
        // price refresh still carries it.
        std::fs::write(
            &path,
            "instanceTypes: {g6e.xlarge: [{driver: gpu.nvidia.com, bogus: 1}]}\n",
        )
        .unwrap();
        tokio::time::sleep(Duration::from_secs(25)).await;
        assert_eq!(metrics.device_data_rejected.get(), 1);
        assert!(!out_rx.has_changed().unwrap());
        up_tx.send_replace(Arc::new(Catalog::embedded().unwrap()));
        out_rx.changed().await.unwrap();
        let refreshed = out_rx.borrow_and_update().clone();
        assert_eq!(memory_of(&refreshed, "g6e.xlarge"), "44Gi");

        // Fixed again: back in force, no longer reported.
        std::fs::write(&path, data("g6e.xlarge", "46Gi")).unwrap();
        out_rx.changed().await.unwrap();
        assert_eq!(memory_of(&out_rx.borrow_and_update(), "g6e.xlarge"), "46Gi");
        assert_eq!(metrics.device_data_rejected.get(), 0);
        stop.cancel();
        task.await.unwrap();
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn between_rounds_a_changed_file_changes_what_a_claim_matches_and_a_broken_one_does_not() {
        use crate::cluster::dra::{Objects, Resolver};
        use crate::cluster::{ClaimRef, Pod, Resources};
        let path = scratch("rounds").join("devices.yaml");
        std::fs::write(&path, data("g6e.xlarge", "40Gi")).unwrap();
        let first = Arc::new(DeviceData::parse("f", &data("g6e.xlarge", "40Gi")).unwrap());
        let mut file = DeviceFile::new(path.clone(), Some(first.clone()));
        let embedded = Catalog::embedded().unwrap();
        // A claim for a GPU of the overriding product with 42Gi.
        let mut objects = Objects::default();
        objects.add_class(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "gpu.nvidia.com"},
                "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}
            }))
            .unwrap(),
        );
        objects.add_template(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "test-42", "namespace": "ml"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "gpu.nvidia.com",
                    "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA Test'"}}],
                    "capacity": {"requests": {"memory": "42Gi"}}
                }}]}}}
            }))
            .unwrap(),
        );
        let mut pod = Pod::new("ml/a", Resources::new().with("cpu", 1000));
        pod.resource_claims.push(ClaimRef {
            name: "gpu".into(),
            claim: None,
            template: Some("test-42".into()),
            generated: None,
            group: None,
        });
        // One resolver across rounds, as the controller keeps it.
        let mut resolver = Resolver::new();
        let mut serves = |catalog: &Catalog| {
            let mut pods = vec![pod.clone()];
            resolver.attach(&mut pods, &objects, catalog);
            pods[0].devices.as_ref().is_some_and(|d| {
                d.shapes
                    .iter()
                    .any(|(k, r)| k.instance_type == "g6e.xlarge" && r.is_ok())
            })
        };
        let round1 = overlay(&embedded, file.current().as_deref());
        assert!(!serves(&round1), "40Gi is less than the claim asks");
        std::fs::write(&path, data("g6e.xlarge", "44Gi")).unwrap();
        assert!(matches!(file.poll(), Reload::Changed(_)));
        let round2 = overlay(&embedded, file.current().as_deref());
        assert!(serves(&round2), "the next round matches the new templates");
        std::fs::write(&path, "instanceTypes: {g6e.xlarge: 7}\n").unwrap();
        assert!(matches!(file.poll(), Reload::Refused(_)));
        let round3 = overlay(&embedded, file.current().as_deref());
        assert!(serves(&round3), "a broken file keeps the last good data");
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }

    #[test]
    fn a_file_read_again_unchanged_is_not_reported_again() {
        let path = scratch("unchanged").join("devices.yaml");
        std::fs::write(&path, "not: [device data").unwrap();
        let mut file = DeviceFile::new(path.clone(), None);
        assert!(matches!(file.poll(), Reload::Unchanged));
        std::fs::remove_file(&path).unwrap();
        match file.poll() {
            Reload::Refused(why) => assert!(why.starts_with("cannot read"), "{why}"),
            r => panic!("{r:?}"),
        }
        assert!(matches!(file.poll(), Reload::Unchanged));
        assert!(file.current().is_none());
        let _ = std::fs::remove_dir_all(path.parent().unwrap());
    }
}
