//! `quartermaster controller` as a user meets it: `--help` documents every
//! flag, and bad values are refused with a clear message before anything
//! connects to a cluster.

use crate::support;

use std::process::{Command, Output};
use support::fake_api::FakeApi;
use support::fake_http::HttpApi;
use support::scale::{free_port, http_get};

fn controller(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quartermaster"))
        .arg("controller")
        .args(args)
        // No QM_* variable or kubeconfig from the caller's environment.
        .env_clear()
        // The tests run side by side and several get as far as serving
        // their endpoints: each takes a free loopback port of its own
        // (one listener for both), never the default 8080/8081, which a
        // parallel test or anything else on the machine may hold.
        .env("QM_METRICS_ADDR", "127.0.0.1:0")
        .env("QM_HEALTH_ADDR", "127.0.0.1:0")
        .output()
        .expect("the binary runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn help_documents_every_flag() {
    let out = controller(&["--help"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let help = String::from_utf8(out.stdout).unwrap();

    // The flags of the issue and the loop's timing knobs are all there.
    for flag in [
        "--cloud",
        "--region",
        "--cluster-name",
        "--metrics-addr",
        "--health-addr",
        "--leader-elect",
        "--lease-name",
        "--lease-namespace",
        "--aws-config",
        "--log-format",
        "--log-level",
        "--lease-duration",
        "--lease-renew-deadline",
        "--lease-retry-period",
        "--batch-idle",
        "--batch-max",
        "--tick",
        "--launch-timeout",
        "--registration-timeout",
        "--gc-grace",
        "--shutdown-timeout",
        "--interruption-queue",
        "--price-refresh-interval",
        "--device-data",
    ] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(flag)),
            "{flag} missing from:\n{help}"
        );
    }

    // Every option line is followed by its description (long help puts it
    // on the next, indented line).
    let lines: Vec<&str> = help.lines().collect();
    let mut options = 0;
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if !(t.starts_with("--") || t.starts_with("-h") || t.starts_with("-V")) {
            continue;
        }
        options += 1;
        let next = lines.get(i + 1).map(|l| l.trim()).unwrap_or("");
        assert!(
            !next.is_empty() && !next.starts_with('-'),
            "{t:?} has no description:\n{help}"
        );
    }
    assert!(options >= 23, "{options} options in:\n{help}");

    // Choices, defaults and environment fallbacks are shown.
    for choice in ["- aws:", "- simulated:", "- text:", "- json:"] {
        assert!(help.contains(choice), "{choice} undocumented:\n{help}");
    }
    assert!(help.contains("[env: QM_REGION="), "{help}");
    assert!(help.contains("[default: 15s]"), "{help}");
}

#[test]
fn an_unknown_cloud_is_refused_with_the_choices() {
    let out = controller(&["--cloud", "gcp", "--cluster-name", "c"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("invalid value 'gcp' for '--cloud"), "{err}");
    assert!(err.contains("aws") && err.contains("simulated"), "{err}");
}

#[test]
fn a_duration_without_unit_and_a_bad_address_are_refused() {
    let out = controller(&["--cluster-name", "c", "--lease-duration", "15"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("--lease-duration") && err.contains("no unit"),
        "{err}"
    );

    let out = controller(&["--cluster-name", "c", "--metrics-addr", "localhost"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--metrics-addr"), "{}", stderr(&out));
}

#[test]
fn the_cluster_name_is_required() {
    let out = controller(&["--cloud", "simulated"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--cluster-name"), "{}", stderr(&out));
}

#[test]
fn inconsistent_lease_timings_fail_before_connecting_to_a_cluster() {
    let out = controller(&[
        "--cloud",
        "simulated",
        "--cluster-name",
        "c",
        "--leader-elect",
        "--lease-duration",
        "10s",
        "--lease-renew-deadline",
        "10s",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("renew deadline"), "{err}");
    assert!(!err.contains("Kubernetes API"), "{err}");
}

#[test]
fn a_region_without_offerings_is_refused_with_the_known_regions() {
    let out = controller(&["--cluster-name", "c", "--region", "mars-north-1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("mars-north-1") && err.contains("us-east-1"),
        "{err}"
    );
}

#[test]
fn the_aws_cloud_runs_without_a_settings_file_but_not_with_a_missing_one() {
    // No --aws-config: the settings are discovered from EKS by cluster
    // name, once connected; the controller gets as far as the cluster.
    let out = controller(&["--cloud", "aws", "--cluster-name", "c"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("Kubernetes API"), "{err}");
    assert!(!err.contains("--aws-config"), "{err}");

    let out = controller(&[
        "--cloud",
        "aws",
        "--cluster-name",
        "c",
        "--aws-config",
        "/nonexistent/aws.yaml",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("/nonexistent/aws.yaml"), "{err}");
}

#[test]
fn device_data_that_does_not_read_is_refused_with_its_line_before_connecting() {
    let dir = support::TempDir::new("qm-controller-cli");
    let bad = dir.join("devices.yaml");
    std::fs::write(
        &bad,
        "instanceTypes:\n  g7e.2xlarge:\n  - driver: gpu.nvidia.com\n    kind: gpu\n    cuont: 1\n",
    )
    .unwrap();
    let out = controller(&[
        "--cluster-name",
        "c",
        "--device-data",
        bad.to_str().unwrap(),
    ]);
    assert_ne!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(
        err.contains("devices.yaml") && err.contains("cuont") && !err.contains("Kubernetes API"),
        "{err}"
    );

    // Data that reads: the controller gets as far as the cluster.
    let good = dir.join("good.yaml");
    std::fs::write(
        &good,
        "instanceTypes:\n  g7e.2xlarge:\n  - driver: gpu.nvidia.com\n    kind: gpu\n    count: 1\n    \
         attributes: {type: gpu, productName: NVIDIA RTX PRO 6000}\n    capacity: {memory: 96Gi}\n",
    )
    .unwrap();
    let out = controller(&[
        "--cluster-name",
        "c",
        "--device-data",
        good.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert!(err.contains("Kubernetes API"), "{err}");
}

/// The chart's example AWS settings as its ConfigMap renders them from
/// `settings.*` (templates/_helpers.tpl, `quartermaster.awsSettings`;
/// scripts/validate-chart checks the rendered file), written to a file.
fn chart_aws_settings(dir: &std::path::Path) -> std::path::PathBuf {
    let values = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/helm/quartermaster/ci/aws-values.yaml"
    ))
    .unwrap();
    let values: serde_json::Value = serde_norway::from_str(&values).unwrap();
    let mut settings = serde_json::json!({});
    for (field, key) in [
        ("clusterName", "clusterName"),
        ("kubernetesVersion", "kubernetesVersion"),
        ("clusterEndpoint", "clusterEndpoint"),
        ("certificateAuthority", "clusterCABundle"),
        ("serviceCidr", "serviceCidr"),
    ] {
        settings[field] = values["settings"][key].clone();
    }
    let path = dir.join("aws.yaml");
    std::fs::write(&path, serde_norway::to_string(&settings).unwrap()).unwrap();
    path
}

#[test]
fn the_charts_aws_settings_are_accepted_and_must_name_the_same_cluster() {
    let dir = support::TempDir::new("qm-controller-cli");
    let file = chart_aws_settings(&dir);
    let file = file.to_str().unwrap();
    let run = |cluster: &str| {
        Command::new(env!("CARGO_BIN_EXE_quartermaster"))
            .args(["controller", "--cloud", "aws", "--aws-config", file])
            .args(["--cluster-name", cluster])
            .args([
                "--metrics-addr",
                "127.0.0.1:0",
                "--health-addr",
                "127.0.0.1:0",
            ])
            .env_clear()
            .env("KUBECONFIG", dir.join("no-kubeconfig"))
            .output()
            .unwrap()
    };

    // Accepted: the controller gets as far as looking for a cluster.
    let out = run("prod");
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("Kubernetes API"), "{err}");
    assert!(!err.contains("EC2 settings"), "{err}");

    let out = run("staging");
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains(r#"names cluster "prod""#), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_syncs_leads_serves_and_hands_the_lease_back_on_sigterm() {
    let server = HttpApi::start(FakeApi::new()).await;
    let dir = support::TempDir::new("qm-controller-e2e");
    let kubeconfig = dir.join("kubeconfig");
    server.write_kubeconfig(&kubeconfig);
    let (metrics_port, health_port) = (free_port(), free_port());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_quartermaster"))
        .args([
            "controller",
            "--cloud",
            "simulated",
            "--cluster-name",
            "e2e",
        ])
        .args([
            "--leader-elect",
            "--lease-namespace",
            "qm",
            "--lease-identity",
            "qm-e2e",
        ])
        .args(["--metrics-addr", &format!("127.0.0.1:{metrics_port}")])
        .args(["--health-addr", &format!("127.0.0.1:{health_port}")])
        .args(["--log-format", "json"])
        .env_clear()
        .env("KUBECONFIG", &kubeconfig)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();

    // Ready once the watches synced; leading once the lease is taken.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut ready = false;
    let mut leading = false;
    while tokio::time::Instant::now() < deadline && !(ready && leading) {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        ready = http_get(health_port, "/readyz").await.map(|r| r.0) == Some(200);
        leading = http_get(metrics_port, "/metrics")
            .await
            .is_some_and(|(_, body)| body.contains("quartermaster_leader 1"));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the controller exited early"
        );
    }
    assert!(ready && leading, "ready: {ready}, leading: {leading}");
    assert_eq!(
        http_get(health_port, "/healthz").await.map(|r| r.0),
        Some(200)
    );

    // SIGTERM: the loop finishes, the lease is released, exit 0.
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "no exit after SIGTERM"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    let mut logs = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut logs).unwrap();
    assert!(status.success(), "{status}: {logs}");
    assert!(logs.contains("released the lease"), "{logs}");

    let requests = server.api.state.lock().unwrap().requests.clone();
    let last_lease_write = requests
        .iter()
        .rfind(|r| r.path.contains("/leases") && r.method != http::Method::GET)
        .expect("lease writes");
    assert_eq!(last_lease_write.method, http::Method::PUT);
    assert!(last_lease_write
        .path
        .starts_with("/apis/coordination.k8s.io/v1/namespaces/qm/leases/quartermaster"));
    assert!(
        last_lease_write.body["spec"]["holderIdentity"].is_null(),
        "{:?}",
        last_lease_write.body
    );
    assert!(requests.iter().any(|r| r
        .path
        .starts_with("/apis/quartermaster.dev/v1alpha1/nodepools")));
    drop(server);
}
