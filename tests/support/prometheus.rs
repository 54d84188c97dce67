//! A real Prometheus scraping a fixture DCGM exporter of ours, both on
//! loopback. `scripts/test` starts one Prometheus for the whole suite and
//! exports `PROMETHEUS_URL` and `PROMETHEUS_TARGETS` (the directory of its
//! file_sd target files); without them (a plain `cargo test`),
//! [`Prometheus::start`] starts one of its own through
//! `scripts/prometheus-server` (which installs Debian's package when
//! missing) and stops it when dropped. Each [`Exporter`] serves the
//! DCGM-format series a test chooses and registers itself as a target;
//! tests that share a server name their nodes and namespaces uniquely
//! (see [`unique`]).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running Prometheus (ours or the suite's).
pub struct Prometheus {
    url: String,
    targets: PathBuf,
    child: Option<(Child, PathBuf)>,
}

impl Prometheus {
    /// The suite's server, or a new one on a free loopback port.
    ///
    /// # Panics
    /// When Prometheus cannot be installed or is not ready within two
    /// minutes: the test cannot run without it.
    pub fn start() -> Prometheus {
        if let (Ok(url), Ok(targets)) = (
            std::env::var("PROMETHEUS_URL"),
            std::env::var("PROMETHEUS_TARGETS"),
        ) {
            return Prometheus {
                url,
                targets: targets.into(),
                child: None,
            };
        }
        Prometheus::start_in(std::env::temp_dir().join(format!("qm-prometheus-{}", unique("p"))))
    }

    /// A new server on a free loopback port keeping its data in `dir`
    /// (`dir/tsdb`: blocks put there before, e.g. by `promtool tsdb
    /// create-blocks-from openmetrics`, are served), removed when dropped.
    ///
    /// # Panics
    /// As [`Prometheus::start`].
    pub fn start_in(dir: PathBuf) -> Prometheus {
        let port = super::free_port();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/prometheus-server");
        let child = Command::new(script)
            .args([
                "start",
                &port.to_string(),
                dir.to_str().expect("utf-8 path"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("scripts/prometheus-server starts");
        let p = Prometheus {
            url: format!("http://127.0.0.1:{port}"),
            targets: dir.join("targets"),
            child: Some((child, dir)),
        };
        let until = Instant::now() + Duration::from_secs(120);
        while get(port, "/-/ready").is_none_or(|(status, _)| status != 200) {
            assert!(
                Instant::now() < until,
                "Prometheus did not get ready on port {port}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Waits until `promql` (an instant query) returns `n` series, at most
    /// a minute.
    ///
    /// # Panics
    /// When it never does.
    pub fn wait_for_series(&self, promql: &str, n: usize) {
        let port: u16 = self
            .url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port");
        let path = format!("/api/v1/query?query={}", encode(promql));
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let found = get(port, &path)
                .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
                .and_then(|v| v["data"]["result"].as_array().map(Vec::len))
                .unwrap_or(0);
            if found >= n {
                return;
            }
            assert!(
                Instant::now() < until,
                "{promql} has {found} series, not {n}"
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some((child, dir)) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A fixture DCGM exporter: serves `/metrics` in Prometheus' text format
/// from a thread on a loopback port, registered with a [`Prometheus`] as a
/// scrape target while it lives.
pub struct Exporter {
    body: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    port: u16,
    target: PathBuf,
}

impl Exporter {
    /// Serves `body` (exposition text) and registers with `prom`.
    pub fn start(prom: &Prometheus, body: String) -> Exporter {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let port = listener.local_addr().expect("bound").port();
        listener.set_nonblocking(true).expect("non-blocking");
        let body = Arc::new(Mutex::new(body));
        let stop = Arc::new(AtomicBool::new(false));
        let (served, stopped) = (body.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let text = served.lock().unwrap().clone();
                        let _ = answer(conn, &text);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        std::fs::create_dir_all(&prom.targets).expect("targets directory");
        let target = prom.targets.join(format!("{}.json", unique("exporter")));
        let tmp = target.with_extension("tmp");
        std::fs::write(&tmp, format!(r#"[{{"targets": ["127.0.0.1:{port}"]}}]"#))
            .expect("target file");
        std::fs::rename(&tmp, &target).expect("target file in place");
        Exporter {
            body,
            stop,
            port,
            target,
        }
    }

    /// Replaces what is served.
    pub fn serve(&self, body: String) {
        *self.body.lock().unwrap() = body;
    }

    /// `127.0.0.1:PORT`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = std::fs::remove_file(&self.target);
    }
}

/// One GPU's series in the exporter's format: the field and value for GPU
/// `gpu` of `host` (its model), attributed to `pod` (`namespace/name`)
/// when given, with extra labels.
pub fn series(
    field: &str,
    host: &str,
    gpu: u32,
    model: &str,
    pod: Option<&str>,
    extra: &[(&str, &str)],
    value: f64,
) -> String {
    let mut labels = vec![
        format!("gpu=\"{gpu}\""),
        format!("UUID=\"GPU-{host}-{gpu}\""),
        format!("device=\"nvidia{gpu}\""),
        format!("modelName=\"{model}\""),
        format!("Hostname=\"{host}\""),
    ];
    if let Some((ns, name)) = pod.and_then(|p| p.split_once('/')) {
        labels.push("container=\"main\"".into());
        labels.push(format!("namespace=\"{ns}\""));
        labels.push(format!("pod=\"{name}\""));
    }
    for (k, v) in extra {
        labels.push(format!("{k}=\"{v}\""));
    }
    format!("{field}{{{}}} {value}\n", labels.join(","))
}

/// A name unique in this run (`prefix-<pid>-<n>`), lowercase.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn answer(mut conn: TcpStream, body: &str) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    // The request line and headers; the body (none for a GET) is ignored.
    while reader.read_line(&mut line)? > 2 {
        line.clear();
    }
    write!(
        conn,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    conn.flush()
}

/// A GET on loopback: the status and body (`None` when nothing answers).
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    conn.read_to_string(&mut text).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b)?;
    // Chunked answers: keep the JSON between the first `{` and the last `}`.
    let body = match (body.find('{'), body.rfind('}')) {
        (Some(a), Some(b)) if a <= b => body[a..=b].to_string(),
        _ => body.to_string(),
    };
    Some((status, body))
}

/// Percent-encodes a query parameter.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
