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
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
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
        let mut samples = Vec::new();
        self.query_each(promql, at, &mut |s| samples.push(s))
            .await?;
        Ok(samples)
    }

    /// Runs an instant query at `at` and hands each of its vector's samples
    /// to `each` as the answer is read: a fleet's answer is held as text
    /// once, never as samples all at once.
    ///
    /// # Errors
    /// See [`Error`]; on an error, `each` may have had some samples.
    pub async fn query_each(
        &self,
        promql: &str,
        at: Time,
        each: &mut (dyn FnMut(Sample) + Send),
    ) -> Result<()> {
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
            // Into one buffer as the frames come: a fleet's answer is held
            // once, not as frames and then again in one piece.
            let mut frames = Limited::new(response.into_body(), MAX_ANSWER_BYTES);
            let mut body = Vec::new();
            while let Some(frame) = frames.frame().await {
                let frame = frame.map_err(|e| Error::Answer {
                    url: self.base.clone(),
                    reason: e.to_string(),
                })?;
                if let Ok(data) = frame.into_data() {
                    body.extend_from_slice(&data);
                }
            }
            Ok::<_, Error>((status, body))
        };
        let (status, body) = tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| Error::Timeout {
                url: self.base.clone(),
                timeout: self.timeout,
            })??;
        parse_answer_each(&self.base, status.as_u16(), &body, each)
    }
}

/// What an answer says besides its samples.
#[derive(Default)]
struct Head {
    status: String,
    error_type: Option<String>,
    error: Option<String>,
    /// Whether there was a `data`.
    data: bool,
    /// `data.resultType`.
    result_type: Option<String>,
    /// Whether `data.result` was there.
    result: bool,
}

/// One series of a vector.
#[derive(Deserialize)]
struct Series {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

/// Reads an answer, handing each series of its `data.result` to `each` as
/// it is read, so that a fleet's answer is never held as samples all at
/// once.
struct AnswerSeed<'a> {
    each: &'a mut dyn FnMut(Sample),
}

impl<'de> DeserializeSeed<'de> for AnswerSeed<'_> {
    type Value = Head;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<Head, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for AnswerSeed<'_> {
    type Value = Head;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Prometheus API answer")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Head, A::Error> {
        let each = self.each;
        let mut head = Head::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "status" => head.status = map.next_value()?,
                "errorType" => head.error_type = map.next_value()?,
                "error" => head.error = map.next_value()?,
                "data" => {
                    map.next_value_seed(DataSeed {
                        each: &mut *each,
                        head: &mut head,
                    })?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(head)
    }
}

/// `data`: its `resultType` and, when that is a vector or not said yet,
/// each series of its `result`.
struct DataSeed<'a> {
    each: &'a mut dyn FnMut(Sample),
    head: &'a mut Head,
}

impl<'de> DeserializeSeed<'de> for DataSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for DataSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("the answer's data")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        let (each, head) = (self.each, self.head);
        head.data = true;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "resultType" => head.result_type = Some(map.next_value()?),
                "result" if head.result_type.as_deref().is_none_or(|t| t == "vector") => {
                    map.next_value_seed(ResultSeed { each: &mut *each })?;
                    head.result = true;
                }
                "result" => {
                    map.next_value::<IgnoredAny>()?;
                    head.result = true;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// `data.result`, one series at a time.
struct ResultSeed<'a> {
    each: &'a mut dyn FnMut(Sample),
}

impl<'de> DeserializeSeed<'de> for ResultSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ResultSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a vector's series")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        while let Some(s) = seq.next_element::<Series>()? {
            (self.each)(Sample {
                labels: s.metric,
                // The API writes numbers as strings ("NaN", "+Inf"
                // included); one that is not a number is absurd, as NaN is.
                value: s.value.1.parse().unwrap_or(f64::NAN),
            });
        }
        Ok(())
    }
}

/// The samples of an API answer (a `vector`), or why there are none.
#[cfg(test)]
fn parse_answer(url: &str, status: u16, body: &[u8]) -> Result<Vec<Sample>> {
    let mut samples = Vec::new();
    parse_answer_each(url, status, body, &mut |s| samples.push(s))?;
    Ok(samples)
}

/// Hands each sample of an API answer (a `vector`) to `each` as it is
/// read; or why there are none. On an error, `each` may have had some.
fn parse_answer_each(
    url: &str,
    status: u16,
    body: &[u8],
    each: &mut dyn FnMut(Sample),
) -> Result<()> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let head = AnswerSeed { each }
        .deserialize(&mut de)
        .and_then(|h| de.end().map(|()| h));
    let head = match head {
        Ok(h) => h,
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
    if head.status != "success" {
        return Err(Error::Api {
            url: url.to_string(),
            kind: head.error_type.unwrap_or_default(),
            message: head.error.unwrap_or_default(),
        });
    }
    let answer = |reason: String| Error::Answer {
        url: url.to_string(),
        reason,
    };
    if !head.data {
        return Err(answer("no data".into()));
    }
    let result_type = head.result_type.unwrap_or_default();
    if result_type != "vector" {
        return Err(answer(format!(
            "a {result_type} where a vector was asked for"
        )));
    }
    if !head.result {
        return Err(answer("no result".into()));
    }
    Ok(())
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
        prom.query_each(&promql, at, &mut |s| a.add(field, [s]))
            .await?;
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
        // The result read before its type is said (keys in another order).
        let late = br#"{"data":{"result":[{"metric":{"gpu":"0"},"value":[1,"3"]}],
            "resultType":"vector"},"status":"success"}"#;
        assert_eq!(parse_answer("u", 200, late).unwrap()[0].value, 3.0);
        let late_matrix = br#"{"status":"success","data":{"result":[],"resultType":"matrix"}}"#;
        assert!(parse_answer("u", 200, late_matrix).is_err());
        for incomplete in [
            &br#"{"status":"success","data":{"resultType":"vector"}}"#[..],
            br#"{"status":"success"}"#,
            br#"{"status":"success","data":{"resultType":"vector","result":[]}} x"#,
        ] {
            assert!(
                matches!(
                    parse_answer("u", 200, incomplete),
                    Err(Error::Answer { .. })
                ),
                "{}",
                String::from_utf8_lossy(incomplete)
            );
        }
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
