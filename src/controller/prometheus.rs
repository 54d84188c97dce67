//! A client of the Prometheus HTTP API (`GET /api/v1/query`, instant
//! queries), plain HTTP, as Prometheus, Thanos, Mimir or VictoriaMetrics
//! serve it in a cluster: the controller's and `quartermaster report gpu`'s
//! one way to read DCGM's series ([`read_usage`]). Every request has a
//! timeout and a size limit; every failure is a classified [`Error`] that
//! names the URL, never a panic. What the answers mean is
//! `cluster::gpu_use`'s.

use crate::cluster::gpu_use::{self, Assembler, Field, Labels, Sample, Usage};
use crate::core::Time;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::io::Read;
use std::time::Duration;
use tokio::time::Instant;

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
            client: Client::builder(TokioExecutor::new())
                .http1_max_buf_size(READ_BUFFER_BYTES)
                .build_http(),
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
        let answer = self.send(promql, at).await?;
        self.read(answer, Vec::new(), |samples, labels, value| {
            samples.push(Sample {
                labels: labels.to_map(),
                value,
            })
        })
        .await
    }

    /// Sends an instant query and waits, at most the timeout, for the head
    /// of its answer: Prometheus evaluates the query before it answers, so
    /// queries sent together are evaluated side by side while their
    /// answers wait, unread, in their connections.
    async fn send(&self, promql: &str, at: Time) -> Result<Answer> {
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
        let response = tokio::time::timeout(self.timeout, self.client.request(request))
            .await
            .map_err(|_| self.timed_out())?
            .map_err(|e| unreachable(e.to_string()))?;
        Ok(Answer {
            status: response.status().as_u16(),
            body: response.into_body(),
        })
    }

    /// Reads an answer's body, at most the timeout from now, handing each
    /// series to `each` with `state`, which it gives back. The body is
    /// parsed as it comes, on a blocking thread fed frame by frame: a
    /// fleet's answer is never held whole, and parsing overlaps the
    /// transfer.
    async fn read<T, F>(&self, answer: Answer, state: T, each: F) -> Result<T>
    where
        T: Send + 'static,
        F: Fn(&mut T, &SeriesLabels, f64) + Send + 'static,
    {
        let deadline = Instant::now() + self.timeout;
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(FRAMES_IN_FLIGHT);
        let (url, status) = (self.base.clone(), answer.status);
        let parser = tokio::task::spawn_blocking(move || {
            let mut state = state;
            let body = std::io::BufReader::with_capacity(64 << 10, FramesIn::new(rx));
            let parsed = parse_answer_each(&url, status, body, &mut |labels, value| {
                each(&mut state, labels, value)
            });
            (state, parsed)
        });
        // The start of the body, to name an error page by.
        let mut start = Vec::new();
        let fed = tokio::time::timeout_at(deadline, async {
            let mut frames = Limited::new(answer.body, MAX_ANSWER_BYTES);
            while let Some(frame) = frames.frame().await {
                let frame = frame.map_err(|e| Error::Answer {
                    url: self.base.clone(),
                    reason: e.to_string(),
                })?;
                if let Ok(data) = frame.into_data() {
                    let room = ERROR_PAGE_START.saturating_sub(start.len());
                    start.extend_from_slice(&data[..data.len().min(room)]);
                    if tx.send(data).await.is_err() {
                        // The parser stopped: it says why.
                        break;
                    }
                }
            }
            Ok(())
        })
        .await
        .map_err(|_| self.timed_out())
        .and_then(|fed| fed);
        // The end of the body, or of what was read of it.
        drop(tx);
        let (state, parsed) = parser.await.map_err(|e| Error::Answer {
            url: self.base.clone(),
            reason: format!("the parser ended: {e}"),
        })?;
        // A transport error or a timeout says more than what the parser
        // made of a cut body.
        fed?;
        match parsed {
            Err(Error::Status { url, status, .. }) => Err(Error::Status {
                url,
                status,
                body: String::from_utf8_lossy(&start).into_owned(),
            }),
            parsed => parsed.map(|()| state),
        }
    }

    fn timed_out(&self) -> Error {
        Error::Timeout {
            url: self.base.clone(),
            timeout: self.timeout,
        }
    }
}

/// An answer whose head has come, its body not yet read.
struct Answer {
    status: u16,
    body: hyper::body::Incoming,
}

/// Frames of a body on their way from the connection to the parser: few
/// enough that a fleet's answer is never held whole (each frame holds the
/// block of the connection's buffer it was read into: see
/// [`READ_BUFFER_BYTES`]).
const FRAMES_IN_FLIGHT: usize = 2;

/// The most a connection buffers of an answer at once. Hyper's default
/// (about 400 KiB) let the frames waiting for the parser hold several MB.
const READ_BUFFER_BYTES: usize = 64 << 10;

/// How much of an error page its error quotes.
const ERROR_PAGE_START: usize = 200;

/// A body's frames as they come, read as one stream on a blocking thread.
struct FramesIn {
    rx: tokio::sync::mpsc::Receiver<Bytes>,
    front: Bytes,
}

impl FramesIn {
    fn new(rx: tokio::sync::mpsc::Receiver<Bytes>) -> FramesIn {
        FramesIn {
            rx,
            front: Bytes::new(),
        }
    }
}

impl Read for FramesIn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.front.is_empty() {
            match self.rx.blocking_recv() {
                Some(frame) => self.front = frame,
                None => return Ok(0),
            }
        }
        let n = self.front.len().min(buf.len());
        buf[..n].copy_from_slice(&self.front[..n]);
        bytes::Buf::advance(&mut self.front, n);
        Ok(n)
    }
}

/// A series' labels, as an answer is read: one buffer reused from one
/// series to the next, so that reading a fleet's answer makes no map (and
/// almost no allocation) per series.
#[derive(Debug, Default)]
pub struct SeriesLabels {
    pairs: Vec<(String, String)>,
    len: usize,
}

impl SeriesLabels {
    fn clear(&mut self) {
        self.len = 0;
    }

    /// The next (cleared) name and value to fill.
    fn next_slot(&mut self) -> &mut (String, String) {
        if self.len == self.pairs.len() {
            self.pairs.push(Default::default());
        }
        let slot = &mut self.pairs[self.len];
        self.len += 1;
        slot.0.clear();
        slot.1.clear();
        slot
    }

    /// The labels as a map.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.pairs[..self.len].iter().cloned().collect()
    }
}

impl Labels for SeriesLabels {
    fn get(&self, key: &str) -> Option<&str> {
        self.pairs[..self.len]
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    fn describe(&self) -> String {
        format!("{:?}", self.to_map())
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

/// Reads an answer, handing each series of its `data.result` to `each` as
/// it is read, so that a fleet's answer is never held as samples all at
/// once.
struct AnswerSeed<'a> {
    each: &'a mut dyn FnMut(&SeriesLabels, f64),
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
    each: &'a mut dyn FnMut(&SeriesLabels, f64),
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
    each: &'a mut dyn FnMut(&SeriesLabels, f64),
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
        let mut labels = SeriesLabels::default();
        while let Some(value) = seq.next_element_seed(SeriesSeed {
            labels: &mut labels,
        })? {
            (self.each)(&labels, value);
        }
        Ok(())
    }
}

/// One series of a vector (`{"metric": {...}, "value": [t, "v"]}`), its
/// labels into the reused buffer; its value is what it gives.
struct SeriesSeed<'a> {
    labels: &'a mut SeriesLabels,
}

/// The keys of a series.
enum SeriesKey {
    Metric,
    Value,
    Other,
}

impl<'de> Deserialize<'de> for SeriesKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = SeriesKey;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a series' key")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<SeriesKey, E> {
                Ok(match v {
                    "metric" => SeriesKey::Metric,
                    "value" => SeriesKey::Value,
                    _ => SeriesKey::Other,
                })
            }
        }
        d.deserialize_identifier(V)
    }
}

impl<'de> DeserializeSeed<'de> for SeriesSeed<'_> {
    type Value = f64;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<f64, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for SeriesSeed<'_> {
    type Value = f64;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a series")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<f64, A::Error> {
        self.labels.clear();
        let (mut metric, mut value) = (false, None);
        while let Some(key) = map.next_key::<SeriesKey>()? {
            match key {
                SeriesKey::Metric => {
                    map.next_value_seed(MetricSeed {
                        labels: &mut *self.labels,
                    })?;
                    metric = true;
                }
                SeriesKey::Value => value = Some(map.next_value::<SampleValue>()?.0),
                SeriesKey::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !metric {
            return Err(serde::de::Error::missing_field("metric"));
        }
        value.ok_or_else(|| serde::de::Error::missing_field("value"))
    }
}

/// A series' `metric`: each label into the reused buffer.
struct MetricSeed<'a> {
    labels: &'a mut SeriesLabels,
}

impl<'de> DeserializeSeed<'de> for MetricSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for MetricSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a series' labels")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        loop {
            let slot = self.labels.next_slot();
            if map.next_key_seed(Text(&mut slot.0))?.is_none() {
                self.labels.len -= 1;
                return Ok(());
            }
            map.next_value_seed(Text(&mut slot.1))?;
        }
    }
}

/// A string copied into a reused one.
struct Text<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for Text<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for Text<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<(), E> {
        self.0.push_str(v);
        Ok(())
    }
}

/// A sample's `[time, "value"]`: the value. The API writes numbers as
/// strings ("NaN", "+Inf" included); one that is not a number is absurd,
/// as NaN is.
struct SampleValue(f64);

impl<'de> Deserialize<'de> for SampleValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Number(f64);
        impl<'de> Deserialize<'de> for Number {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                d.deserialize_str(NumberText)
            }
        }
        struct NumberText;
        impl Visitor<'_> for NumberText {
            type Value = Number;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number as a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<Number, E> {
                Ok(Number(v.parse().unwrap_or(f64::NAN)))
            }
        }
        struct Pair;
        impl<'de> Visitor<'de> for Pair {
            type Value = SampleValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("[time, \"value\"]")
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<SampleValue, A::Error> {
                let missing = || serde::de::Error::invalid_length(1, &"[time, \"value\"]");
                seq.next_element::<f64>()?.ok_or_else(missing)?;
                let value = seq.next_element::<Number>()?.ok_or_else(missing)?;
                Ok(SampleValue(value.0))
            }
        }
        d.deserialize_seq(Pair)
    }
}

/// The samples of an API answer (a `vector`), or why there are none.
#[cfg(test)]
fn parse_answer(url: &str, status: u16, body: &[u8]) -> Result<Vec<Sample>> {
    let mut samples = Vec::new();
    parse_answer_each(url, status, body, &mut |labels, value| {
        samples.push(Sample {
            labels: labels.to_map(),
            value,
        })
    })?;
    Ok(samples)
}

/// Hands each sample of an API answer (a `vector`) to `each` as it is
/// read; or why there are none. On an error, `each` may have had some.
fn parse_answer_each(
    url: &str,
    status: u16,
    body: impl Read,
    each: &mut dyn FnMut(&SeriesLabels, f64),
) -> Result<()> {
    let mut de = serde_json::Deserializer::from_reader(body);
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
                // The reader knows the start ([`Prometheus::read`]).
                body: String::new(),
            });
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
/// query per field, all sent at once so that Prometheus evaluates them side
/// by side, their answers read and folded in one at a time, in field order
/// (only one answer's body is held at once; the others wait in their
/// connections). `expect_gpus` (the last reading's count, else 0) sizes
/// the reading so that a fleet's never grows by doubling.
///
/// # Errors
/// The first query's error; a field the exporter does not serve (no
/// series: profiling metrics are optional) is no error.
pub async fn read_usage(
    prom: &Prometheus,
    window: Duration,
    at: Time,
    expect_gpus: usize,
) -> Result<Usage> {
    let sent: Vec<(Field, Sent)> = gpu_use::queries(window)
        .into_iter()
        .map(|(field, promql)| {
            let p = prom.clone();
            let task = tokio::spawn(async move { p.send(&promql, at).await });
            (field, Sent(task))
        })
        .collect();
    let mut a = Assembler::with_capacity(expect_gpus);
    // Returning early drops the rest, which cancels them.
    for (field, mut sent) in sent {
        let answer = (&mut sent.0).await.map_err(|e| Error::Unreachable {
            url: prom.base.clone(),
            reason: format!("the query's task ended: {e}"),
        })??;
        a = prom
            .read(answer, a, move |a, labels, value| {
                a.add_one(field, labels, value)
            })
            .await?;
        // Nothing but utilisation means nothing to decide on.
        if field == Field::Util && a.is_empty() {
            break;
        }
    }
    Ok(a.finish(at, window))
}

/// A query sent by [`read_usage`], cancelled when dropped unread.
struct Sent(tokio::task::JoinHandle<Result<Answer>>);

impl Drop for Sent {
    fn drop(&mut self) {
        self.0.abort();
    }
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

    /// A server on loopback answering every connection with `head` and
    /// then `chunks` of a chunked body, one write each; `stall` keeps the
    /// connection open after them instead of ending the body.
    async fn serve(head: &'static str, chunks: Vec<String>, stall: bool) -> String {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = listener.accept().await {
                let chunks = chunks.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = tokio::io::AsyncReadExt::read(&mut c, &mut request).await;
                    c.write_all(head.as_bytes()).await.unwrap();
                    for chunk in chunks {
                        let framed = format!("{:x}\r\n{chunk}\r\n", chunk.len());
                        c.write_all(framed.as_bytes()).await.unwrap();
                        c.flush().await.unwrap();
                    }
                    if stall {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                    }
                    let _ = c.write_all(b"0\r\n\r\n").await;
                });
            }
        });
        format!("http://{addr}")
    }

    const CHUNKED_OK: &str =
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";

    #[tokio::test]
    async fn an_answer_is_read_as_it_comes_in_small_pieces_and_a_stalled_one_times_out() {
        // 3,000 series cut into 7-byte pieces: labels and values split
        // anywhere between frames.
        let series: Vec<String> = (0..3000)
            .map(|i| {
                format!(
                    r#"{{"metric":{{"Hostname":"n{}","gpu":"{}"}},"value":[1.5,"{i}"]}}"#,
                    i / 8,
                    i % 8
                )
            })
            .collect();
        let body = format!(
            r#"{{"status":"success","data":{{"resultType":"vector","result":[{}]}}}}"#,
            series.join(",")
        );
        let pieces: Vec<String> = body
            .as_bytes()
            .chunks(7)
            .map(|c| String::from_utf8(c.to_vec()).unwrap())
            .collect();
        let url = serve(CHUNKED_OK, pieces.clone(), false).await;
        let p = Prometheus::new(&url, Duration::from_secs(10)).unwrap();
        let got = p.query("x", chrono::Utc::now()).await.unwrap();
        assert_eq!(got.len(), 3000);
        assert_eq!(got[2999].value, 2999.0);
        assert_eq!(got[2999].labels["Hostname"], "n374");
        assert_eq!(got[2999].labels["gpu"], "7");
        assert_eq!(got[2999].labels.len(), 2, "no label of another series kept");

        // The same answer stopping half way and never ending.
        let half = pieces[..pieces.len() / 2].to_vec();
        let url = serve(CHUNKED_OK, half, true).await;
        let p = Prometheus::new(&url, Duration::from_millis(500)).unwrap();
        let e = p.query("x", chrono::Utc::now()).await.unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
    }

    #[tokio::test]
    async fn an_error_page_is_named_by_its_start() {
        let head = "HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/html\r\ntransfer-encoding: chunked\r\n\r\n";
        let page = vec!["<html>bad ".to_string(), "gateway</html>".to_string()];
        let url = serve(head, page, false).await;
        let p = Prometheus::new(&url, Duration::from_secs(10)).unwrap();
        let e = p.query("x", chrono::Utc::now()).await.unwrap_err();
        assert!(
            matches!(&e, Error::Status { status: 502, body, .. } if body == "<html>bad gateway</html>"),
            "{e}"
        );
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
