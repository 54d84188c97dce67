//! A moto server for AWS tests. `scripts/test` starts one for the whole
//! suite and exports `MOTO_ENDPOINT`; without it (a plain `cargo test`),
//! [`Moto::start`] installs and starts a server of its own through
//! `scripts/moto-server` and stops it when dropped. Tests share a server, so
//! each test names its resources uniquely (see [`unique`]).

#![allow(dead_code)]

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::config::{Credentials, SharedCredentialsProvider};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running moto server (ours or the suite's).
pub struct Moto {
    endpoint: String,
    child: Option<Child>,
}

impl Moto {
    /// The suite's server, or a new one on a free loopback port.
    ///
    /// # Panics
    /// When moto cannot be installed or does not answer within a minute:
    /// the test cannot run without it.
    pub fn start() -> Moto {
        if let Ok(endpoint) = std::env::var("MOTO_ENDPOINT") {
            return Moto {
                endpoint,
                child: None,
            };
        }
        let port = super::free_port();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/moto-server");
        let child = Command::new(script)
            .args(["start", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("scripts/moto-server starts");
        let moto = Moto {
            endpoint: format!("http://127.0.0.1:{port}"),
            child: Some(child),
        };
        // The first start may install moto (about a minute).
        let until = Instant::now() + Duration::from_secs(240);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < until,
                "moto server did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        moto
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// SDK configuration for this server: region us-east-1, static test
    /// credentials, the loopback endpoint; nothing leaves the machine.
    pub fn sdk_config(&self) -> SdkConfig {
        self.sdk_config_in("us-east-1")
    }

    /// As [`Moto::sdk_config`], in another region.
    pub fn sdk_config_in(&self, region: &str) -> SdkConfig {
        SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(region.to_string()))
            .endpoint_url(&self.endpoint)
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                "testing", "testing", None, None, "moto",
            )))
            .http_client(quartermaster::cloud::aws::http_client())
            .build()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A name no other test on the shared server uses: `prefix` plus the
/// process ID and a per-process counter.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
