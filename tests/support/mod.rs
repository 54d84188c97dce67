pub mod api_server;
pub mod aws_world;
pub mod fake_api;
pub mod fake_http;
pub mod faulty_aws;
pub mod moto;
pub mod prometheus;
pub mod scale;

/// The embedded catalog, parsed once per test process and shared by every
/// test that plans or launches through it.
pub fn catalog() -> std::sync::Arc<quartermaster::catalog::Catalog> {
    static C: std::sync::OnceLock<std::sync::Arc<quartermaster::catalog::Catalog>> =
        std::sync::OnceLock::new();
    C.get_or_init(|| std::sync::Arc::new(quartermaster::catalog::Catalog::embedded().unwrap()))
        .clone()
}

/// The controller tests' clock: `s` seconds after 2026-01-05T00:00:00Z.
pub fn t(s: i64) -> quartermaster::core::Time {
    use chrono::TimeZone;
    chrono::Utc.timestamp_opt(1_767_571_200 + s, 0).unwrap()
}

/// A free port on 127.0.0.1 for a server a test starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// A fresh directory under the system's temporary one, removed with all it holds when the
/// test that made it ends, passing or panicking, so that test runs leave nothing behind. It
/// derefs to its [`std::path::Path`] (`dir.join("file")`).
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    /// Creates `<tmp>/<prefix>-<pid>-<n>`, unique within and across test processes.
    pub fn new(prefix: &str) -> Self {
        let dir = std::env::temp_dir().join(moto::unique(prefix));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        Self(dir)
    }
}

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
