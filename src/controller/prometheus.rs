//! A client of the Prometheus HTTP API (`GET /api/v1/query`, instant
//! queries), plain HTTP, as Prometheus, Thanos, Mimir or VictoriaMetrics
//! serve it in a cluster: the controller's and `quartermaster report gpu`'s
//! one way to read DCGM's series ([`read_usage`]). Every request has a
//! timeout and a size limit; every failure is a classified [`Error`] that
//! names the URL, never a panic. What the answers mean is
//! `cluster::gpu_use`'s.

use crate::cluster::gpu_use::{self, Assembler, Field, Sample, Usage};
use crate::core::Time;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Largest answer read (a fleet of 40,000 GPUs answers a few MB).
pub const MAX_ANSWER_BYTES: usize = 256 << 20;

/// Errors of a query. All are retryable (the next read tries again) but
/// [`Error::Url`], which is a configuration error.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The configured URL is not an `http://` URL.
    #[error("Prometheus URL {url:?}: {reason}")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// No connection, or it broke.
    #[error("Prometheus at {url} is unreachable: {reason}")]
    Unreachable {
        /// The base URL.
        url: String,
        /// The transport's error.
        reason: String,
    },
    /// No answer within the timeout.
    #[error("Prometheus at {url} did not answer within {timeout:?}")]
    Timeout {
        /// The base URL.
        url: String,
        /// The timeout.
        timeout: Duration,
    },
    /// An HTTP error status (a query error is `Api` where the body says).
    #[error("Prometheus at {url} answered HTTP {status}: {body}")]
    Status {
        /// The base URL.
        url: String,
        /// The status.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// The answer is not the API's JSON (or too large).
    #[error("Prometheus at {url}: unreadable answer: {reason}")]
    Answer {
        /// The base URL.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The API refused the query (`status: error`).
    #[error("Prometheus at {url} refused the query ({kind}): {message}")]
    Api {
        /// The base URL.
        url: String,
        /// `errorType`.
        kind: String,
        /// `error`.
        message: String,
    },
}

/// This module's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A client of one Prometheus-compatible API.
#[derive(Clone)]
pub struct Prometheus {
    base: String,
    timeout: Duration,
    client: Client<HttpConnector, Empty<Bytes>>,
}

impl std::fmt::Debug for Prometheus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prometheus")
            .field("base", &self.base)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Prometheus {
    /// A client of the API at `url` (`http://host:port`, with a path
    /// prefix if the server has one), each query at most `timeout`.
    ///
    /// # Errors
    /// [`Error::Url`] when `url` is not a plain `http://` URL.
    pub fn new(url: &str, timeout: Duration) -> Result<Prometheus> {
        let bad = |reason: &str| Error::Url {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let uri: http::Uri = url.parse().map_err(|_| bad("not a URL"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => return Err(bad(
                "https is not supported: give the in-cluster http:// service (or a local proxy)",
            )),
            _ => return Err(bad("expected http://host:port")),
        }
        if uri.host().is_none() || uri.query().is_some() {
            return Err(bad("expected http://host:port[/prefix] without a query"));
        }
        Ok(Prometheus {
            base: url.trim_end_matches('/').to_string(),
            timeout,
            client: Client::builder(TokioExecutor::new()).build_http(),
        })
    }

    /// The base URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// Runs an instant query at `at` and returns its vector's samples.
    ///
    /// # Errors
    /// See [`Error`].
    pub async fn query(&self, promql: &str, at: Time) -> Result<Vec<Sample>> {
        let uri = format!(
            "{}/api/v1/query?query={}&time={}.{:03}",
            self.base,
            percent_encode(promql),
            at.timestamp(),
            at.timestamp_subsec_millis()
        );
        let unreachable = |reason: String| Error::Unreachable {
            url: self.base.clone(),
            reason,
        };
        let request = http::Request::get(uri.as_str())
            .header(http::header::ACCEPT, "application/json")
            .body(Empty::new())
            .map_err(|e| unreachable(e.to_string()))?;
        let work = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| Error::Answer {
                    url: self.base.clone(),
                    reason: e.to_string(),
                })?
                .to_bytes();
            Ok::<_, Error>((status, body))
        };
        let (status, body) = tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| Error::Timeout {
                url: self.base.clone(),
                timeout: self.timeout,
            })??;
        parse_answer(&self.base, status.as_u16(), &body)
    }
}

#[derive(Deserialize)]
struct Answer {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<Series>,
}

#[derive(Deserialize)]
struct Series {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

/// The samples of an API answer (a `vector`), or why there are none.
fn parse_answer(url: &str, status: u16, body: &[u8]) -> Result<Vec<Sample>> {
    let answer: std::result::Result<Answer, _> = serde_json::from_slice(body);
    let answer = match answer {
        Ok(a) => a,
        Err(e) if (200..300).contains(&status) => {
            return Err(Error::Answer {
                url: url.to_string(),
                reason: e.to_string(),
            })
        }
        Err(_) => {
            return Err(Error::Status {
                url: url.to_string(),
                status,
                body: String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
            })
        }
    };
    if answer.status != "success" {
        return Err(Error::Api {
            url: url.to_string(),
            kind: answer.error_type.unwrap_or_default(),
            message: answer.error.unwrap_or_default(),
        });
    }
    let data = answer.data.ok_or_else(|| Error::Answer {
        url: url.to_string(),
        reason: "no data".into(),
    })?;
    if data.result_type != "vector" {
        return Err(Error::Answer {
            url: url.to_string(),
            reason: format!("a {} where a vector was asked for", data.result_type),
        });
    }
    Ok(data
        .result
        .into_iter()
        .map(|s| Sample {
            labels: s.metric,
            // The API writes numbers as strings ("NaN", "+Inf" included);
            // one that is not a number is absurd, as NaN is.
            value: s.value.1.parse().unwrap_or(f64::NAN),
        })
        .collect())
}

/// `s` with every byte but the URL's unreserved ones percent-encoded.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Reads the DCGM exporter's series over `window` ending at `at`: one
/// query per field, folded in one at a time.
///
/// # Errors
/// The first query's error; a field the exporter does not serve (no
/// series: profiling metrics are optional) is no error.
pub async fn read_usage(prom: &Prometheus, window: Duration, at: Time) -> Result<Usage> {
    let mut a = Assembler::default();
    for (field, promql) in gpu_use::queries(window) {
        let samples = prom.query(&promql, at).await?;
        a.add(field, samples);
        // Nothing but utilisation means nothing to decide on.
        if field == Field::Util && a.is_empty() {
            break;
        }
    }
    Ok(a.finish(at, window))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_urls_are_taken() {
        assert!(
            Prometheus::new("http://prometheus.monitoring:9090", Duration::from_secs(1)).is_ok()
        );
        assert!(Prometheus::new("http://127.0.0.1:9090/prom/", Duration::from_secs(1)).is_ok());
        for bad in [
            "https://p:9090",
            "p:9090",
            "ftp://x",
            "http://p:9090/?x=1",
            "",
        ] {
            let e = Prometheus::new(bad, Duration::from_secs(1)).unwrap_err();
            assert!(matches!(e, Error::Url { .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(
            percent_encode("avg by (a,b) (x[60s])"),
            "avg%20by%20%28a%2Cb%29%20%28x%5B60s%5D%29"
        );
    }

    #[test]
    fn answers_become_samples_and_failures_say_what_went_wrong() {
        let ok = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"Hostname":"n1","gpu":"0"},"value":[1700000000.5,"12.5"]},
            {"metric":{"Hostname":"n1","gpu":"1"},"value":[1700000000.5,"NaN"]}]}}"#;
        let s = parse_answer("u", 200, ok).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].value, 12.5);
        assert_eq!(s[0].labels["Hostname"], "n1");
        assert!(s[1].value.is_nan());
        let refused =
            br#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#;
        assert!(matches!(
            parse_answer("u", 400, refused),
            Err(Error::Api { kind, .. }) if kind == "bad_data"
        ));
        assert!(matches!(
            parse_answer("u", 502, b"<html>bad gateway</html>"),
            Err(Error::Status { status: 502, .. })
        ));
        assert!(matches!(
            parse_answer("u", 200, b"{\"status\":\"success\""),
            Err(Error::Answer { .. })
        ));
        let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
        assert!(matches!(
            parse_answer("u", 200, matrix),
            Err(Error::Answer { reason, .. }) if reason.contains("matrix")
        ));
    }

    #[tokio::test]
    async fn an_unreachable_or_silent_server_is_an_error_within_the_timeout() {
        // A port nothing listens on.
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = free.local_addr().unwrap().port();
        drop(free);
        let p =
            Prometheus::new(&format!("http://127.0.0.1:{port}"), Duration::from_secs(2)).unwrap();
        let e = p.query("up", chrono::Utc::now()).await.unwrap_err();
        assert!(matches!(e, Error::Unreachable { .. }), "{e}");
        // A server that accepts and never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = silent.local_addr().unwrap();
        let hold = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((c, _)) = silent.accept().await {
                held.push(c);
            }
        });
        let p = Prometheus::new(&format!("http://{addr}"), Duration::from_millis(300)).unwrap();
        let started = std::time::Instant::now();
        let e = p.query("up", chrono::Utc::now()).await.unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(5));
        hold.abort();
    }
}
