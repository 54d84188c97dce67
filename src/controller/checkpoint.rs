//! The checkpoint signal behind [`Action::RequestCheckpoint`]: the pod
//! annotation `quartermaster.dev/checkpoint-requested=<RFC 3339 deadline>`,
//! the optional HTTP hook, and reading the workload's acknowledgement
//! (a 2xx from the hook, or the pod annotation
//! `quartermaster.dev/checkpoint-completed`). The protocol for workload
//! authors is in `docs/checkpointing.md`.
//!
//! Deciding *when* to ask and when to stop waiting is the core's job; this
//! module only carries the request out and reads the answer.
//!
//! [`Action::RequestCheckpoint`]: crate::core::Action::RequestCheckpoint

use super::kube_api::KubeApi;
use crate::api::labels::{
    CHECKPOINT_COMPLETED, CHECKPOINT_ENABLED, CHECKPOINT_HOOK, CHECKPOINT_REQUESTED,
};
use crate::api::{CheckpointHook, InterruptionPolicy};
use crate::core::Time;
use crate::metrics::Metrics;
use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, SubsecRound};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::time::Duration;

/// Errors of checkpoint signalling.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pod's `quartermaster.dev/checkpoint-hook` annotation is not
    /// `PORT` or `PORT/PATH` (not retryable: the workload must fix it; the
    /// annotation alone still signals the pod).
    #[error("pod {pod}: checkpoint hook {value:?} is not PORT or PORT/PATH: {reason}")]
    BadHook {
        /// `namespace/name`.
        pod: String,
        /// The annotation's value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The pool's `checkpointHook.timeout` is not a duration (not
    /// retryable: fix the NodePool).
    #[error("pod {pod}: checkpoint hook timeout {value:?} is not a duration")]
    BadTimeout {
        /// `namespace/name`.
        pod: String,
        /// The timeout as written.
        value: String,
    },
    /// The pod names a hook but has no (valid) IP yet: nothing to POST to
    /// (retryable once the pod has one).
    #[error("pod {pod}: has a checkpoint hook but no pod IP")]
    NoPodIp {
        /// `namespace/name`.
        pod: String,
    },
    /// The hook may not be called (not retryable while the pod and its
    /// pool stay as they are): the pool did not opt in, the pod uses the
    /// host network, its IP is loopback, link-local or unspecified, or the
    /// port is not one its containers declare. The annotation alone still
    /// signals the pod.
    #[error("pod {pod}: checkpoint hook not called: {reason}")]
    Refused {
        /// `namespace/name`.
        pod: String,
        /// Why, for the pod's Event.
        reason: String,
    },
    /// Writing the request annotation failed (retryable).
    #[error("failed to annotate pod {pod} with the checkpoint request: {source}")]
    Annotate {
        /// `namespace/name`.
        pod: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// `Result` of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Timeout of one hook POST when no pool policy sets one.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(5);

/// Path of a hook given as a bare `PORT`.
pub const DEFAULT_HOOK_PATH: &str = "/checkpoint";

/// Where and how long to POST a pod's checkpoint hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookTarget {
    /// `http://<pod IP>:<port><path>`.
    pub url: String,
    /// Timeout of the POST.
    pub timeout: Duration,
}

/// What of a pod's spec decides whether its hook may be called: whether it
/// shares the node's network, and the ports its containers declare.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct HookEndpoint {
    /// `spec.hostNetwork`: the pod IP is the node's, so a hook call would
    /// reach whatever listens on the node.
    pub host_network: bool,
    /// Every `containerPort` of its containers and init containers.
    pub ports: BTreeSet<u16>,
}

impl HookEndpoint {
    /// The endpoint facts of a Kubernetes Pod.
    pub fn of(pod: &k8s_openapi::api::core::v1::Pod) -> HookEndpoint {
        let Some(spec) = pod.spec.as_ref() else {
            return HookEndpoint::default();
        };
        let ports = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| u16::try_from(p.container_port).ok())
            .collect();
        HookEndpoint {
            host_network: spec.host_network == Some(true),
            ports,
        }
    }
}

/// Why the controller must not POST to `ip`, if it must not: addresses
/// that reach the controller's own host or the node rather than a pod
/// (loopback, link-local such as the 169.254.169.254 metadata service,
/// unspecified).
pub fn forbidden_address(ip: IpAddr) -> Option<&'static str> {
    let ip = ip.to_canonical();
    let kind = match ip {
        IpAddr::V4(v4) if v4.is_loopback() => "loopback",
        IpAddr::V4(v4) if v4.is_link_local() => "link-local",
        IpAddr::V4(v4) if v4.is_unspecified() || v4.is_broadcast() => "unspecified",
        IpAddr::V6(v6) if v6.is_loopback() => "loopback",
        IpAddr::V6(v6) if v6.is_unicast_link_local() => "link-local",
        IpAddr::V6(v6) if v6.is_unspecified() => "unspecified",
        _ => return None,
    };
    Some(kind)
}

/// The hook of a pod, if it has one and may be called. Hooks are called
/// only for pods of a pool that opts in by setting
/// `interruption.checkpointHook`; the pod's own annotation
/// `quartermaster.dev/checkpoint-hook: PORT[/PATH]` then picks the port and
/// path, else the pool's hook applies when the pod opted in
/// (`quartermaster.dev/checkpoint: "true"`). The timeout is the pool hook's.
///
/// # Errors
/// [`Error::BadHook`] for a malformed annotation, [`Error::BadTimeout`] for
/// a malformed pool timeout, [`Error::NoPodIp`] when there is a hook but no
/// valid pod IP, [`Error::Refused`] when the pool did not opt in, the pod
/// uses the host network, its IP is loopback, link-local or unspecified,
/// or the port is not declared by its containers.
pub fn hook_target(
    pod: &str,
    annotations: &BTreeMap<String, String>,
    pod_ip: Option<&str>,
    endpoint: &HookEndpoint,
    policy: Option<&InterruptionPolicy>,
) -> Result<Option<HookTarget>> {
    let refuse = |reason: String| Error::Refused {
        pod: pod.to_string(),
        reason,
    };
    let pool_hook = policy.and_then(|p| p.checkpoint_hook.as_ref());
    let (port, path) = match annotations.get(CHECKPOINT_HOOK) {
        Some(_) if pool_hook.is_none() => {
            return Err(refuse(
                "its NodePool does not opt in to checkpoint hooks (interruption.checkpointHook is not set)".into(),
            ))
        }
        Some(value) => parse_hook(pod, value)?,
        None => match pool_hook {
            Some(hook)
                if annotations.get(CHECKPOINT_ENABLED).map(String::as_str) == Some("true") =>
            {
                (hook.port, hook.path.clone())
            }
            _ => return Ok(None),
        },
    };
    let timeout = match pool_hook {
        Some(hook) => hook_timeout(pod, hook)?,
        None => DEFAULT_HOOK_TIMEOUT,
    };
    if endpoint.host_network {
        return Err(refuse(
            "the pod uses the host network (its IP is the node's)".into(),
        ));
    }
    let ip: IpAddr = pod_ip
        .and_then(|ip| ip.parse().ok())
        .ok_or_else(|| Error::NoPodIp {
            pod: pod.to_string(),
        })?;
    if let Some(kind) = forbidden_address(ip) {
        return Err(refuse(format!("the pod IP {ip} is a {kind} address")));
    }
    if !endpoint.ports.contains(&port) {
        return Err(refuse(format!(
            "port {port} is not a containerPort of the pod"
        )));
    }
    let host = match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    Ok(Some(HookTarget {
        url: format!("http://{host}:{port}{path}"),
        timeout,
    }))
}

/// [`hook_target`] of a Kubernetes Pod (its annotations and `status.podIP`).
///
/// # Errors
/// As [`hook_target`].
pub fn pod_hook_target(
    pod: &k8s_openapi::api::core::v1::Pod,
    policy: Option<&InterruptionPolicy>,
) -> Result<Option<HookTarget>> {
    let key = format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    );
    let empty = BTreeMap::new();
    let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
    let ip = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref());
    hook_target(&key, annotations, ip, &HookEndpoint::of(pod), policy)
}

fn hook_timeout(pod: &str, hook: &CheckpointHook) -> Result<Duration> {
    hook.timeout_duration().map_err(|_| Error::BadTimeout {
        pod: pod.to_string(),
        value: hook.timeout.clone(),
    })
}

/// `PORT` or `PORT/PATH` -> (port, `/PATH`).
fn parse_hook(pod: &str, value: &str) -> Result<(u16, String)> {
    let bad = |reason: &str| Error::BadHook {
        pod: pod.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let (port, path) = match value.trim().split_once('/') {
        Some((port, path)) => (port, format!("/{path}")),
        None => (value.trim(), DEFAULT_HOOK_PATH.to_string()),
    };
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| bad("the port must be a number from 1 to 65535"))?;
    if path
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '#' || c == '?')
    {
        return Err(bad("the path may not contain spaces, '?' or '#'"));
    }
    Ok((port, path))
}

/// The JSON body POSTed to a hook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HookBody {
    /// Pod name.
    pub pod: String,
    /// Pod namespace.
    pub namespace: String,
    /// The node the pod runs on.
    pub node: String,
    /// RFC 3339 time by which the checkpoint must be complete.
    pub deadline: String,
    /// Why (`spot-interruption`, `rebalance-recommendation`,
    /// `consolidation`, ...).
    pub reason: String,
}

/// What a hook POST came to. Only [`HookOutcome::Acknowledged`] counts as
/// the checkpoint being done; otherwise the pod may still acknowledge
/// through the annotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookOutcome {
    /// A 2xx answer: the checkpoint is complete.
    Acknowledged {
        /// HTTP status.
        status: u16,
    },
    /// Any other answer.
    Refused {
        /// HTTP status.
        status: u16,
    },
    /// No answer within the timeout.
    TimedOut,
    /// The request could not be made (connection refused, bad URL, ...).
    Unreachable {
        /// What went wrong.
        error: String,
    },
}

impl HookOutcome {
    /// Whether the hook acknowledged the checkpoint.
    pub fn is_acknowledged(&self) -> bool {
        matches!(self, HookOutcome::Acknowledged { .. })
    }
}

/// A plain-HTTP client for checkpoint hooks (in-cluster pod IPs; no TLS).
#[derive(Clone)]
pub struct HookClient {
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Default for HookClient {
    fn default() -> Self {
        HookClient::new()
    }
}

impl HookClient {
    /// A client with its own connection pool.
    pub fn new() -> HookClient {
        HookClient {
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// POSTs `body` as JSON to the hook and waits for the answer's status,
    /// at most the target's timeout. Never fails: every result is a
    /// [`HookOutcome`].
    pub async fn post(&self, target: &HookTarget, body: &HookBody) -> HookOutcome {
        let json = match serde_json::to_vec(body) {
            Ok(json) => json,
            Err(e) => {
                return HookOutcome::Unreachable {
                    error: e.to_string(),
                }
            }
        };
        let request = http::Request::post(target.url.as_str())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(json)));
        let request = match request {
            Ok(r) => r,
            Err(e) => {
                return HookOutcome::Unreachable {
                    error: e.to_string(),
                }
            }
        };
        match tokio::time::timeout(target.timeout, self.client.request(request)).await {
            Err(_) => HookOutcome::TimedOut,
            Ok(Err(e)) => HookOutcome::Unreachable {
                error: e.to_string(),
            },
            Ok(Ok(response)) if response.status().is_success() => HookOutcome::Acknowledged {
                status: response.status().as_u16(),
            },
            Ok(Ok(response)) => HookOutcome::Refused {
                status: response.status().as_u16(),
            },
        }
    }
}

/// One checkpoint request to carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointRequest {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// The pod's node.
    pub node: String,
    /// When the checkpoint must be complete.
    pub deadline: Time,
    /// Why (see [`HookBody::reason`]).
    pub reason: String,
}

impl CheckpointRequest {
    /// `namespace/name`.
    pub fn pod(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The hook body for this request.
    pub fn hook_body(&self) -> HookBody {
        HookBody {
            pod: self.name.clone(),
            namespace: self.namespace.clone(),
            node: self.node.clone(),
            deadline: rfc3339(self.deadline),
            reason: self.reason.clone(),
        }
    }
}

/// A time as the annotations carry it: RFC 3339, UTC, whole seconds
/// (`2026-11-22T01:02:03Z`).
pub fn rfc3339(time: Time) -> String {
    time.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// The annotation changes of a request: `checkpoint-requested` set to the
/// deadline and any old `checkpoint-completed` removed, in one patch, so
/// that a completion seen with this request was written after it.
pub fn request_annotations(deadline: Time) -> BTreeMap<String, Option<String>> {
    BTreeMap::from([
        (CHECKPOINT_REQUESTED.to_string(), Some(rfc3339(deadline))),
        (CHECKPOINT_COMPLETED.to_string(), None),
    ])
}

/// Signals a checkpoint: annotates the pod (see [`request_annotations`])
/// and, when `hook` is given, POSTs the hook (this waits up to the hook's
/// timeout; spawn it when that matters). Counts the request, and the
/// acknowledgement when the hook gives one. Returns the hook's outcome.
///
/// # Errors
/// [`Error::Annotate`] when the annotation cannot be written; the hook is
/// then not called.
pub async fn request_checkpoint(
    api: &KubeApi,
    hooks: &HookClient,
    request: &CheckpointRequest,
    hook: Option<&HookTarget>,
    metrics: &Metrics,
) -> Result<Option<HookOutcome>> {
    api.patch_pod_annotations(
        &request.namespace,
        &request.name,
        &request_annotations(request.deadline),
    )
    .await
    .map_err(|source| Error::Annotate {
        pod: request.pod(),
        source,
    })?;
    metrics.checkpoints_requested.inc();
    let Some(hook) = hook else {
        return Ok(None);
    };
    let outcome = hooks.post(hook, &request.hook_body()).await;
    if outcome.is_acknowledged() {
        metrics.checkpoints_acknowledged.inc();
    }
    tracing::info!(pod = %request.pod(), url = %hook.url, ?outcome, "checkpoint hook called");
    Ok(Some(outcome))
}

/// Checkpoint acknowledgements that came from a pod's HTTP hook (a 2xx),
/// by pod, with when; the loop folds them into the world as the pods'
/// `checkpoint_completed`.
pub type HookAcks = std::sync::Arc<std::sync::Mutex<HashMap<String, Time>>>;

/// Signals `request` to its pod: the annotation first, then the pod's hook
/// when the pod or its pool names one that may be called (`info`: the pod
/// as the snapshot has it; `policy`: its pool's), POSTed in a spawned task
/// so that a slow hook holds nobody; a 2xx lands in `acks`. Returns why the
/// hook was not called when it was refused (the annotation alone still
/// signals the pod).
///
/// # Errors
/// [`Error::Annotate`] when the annotation cannot be written (the hook is
/// then not called).
pub async fn signal(
    api: &KubeApi,
    hooks: &HookClient,
    acks: &HookAcks,
    metrics: &Metrics,
    request: &CheckpointRequest,
    info: Option<&crate::controller::snapshot::PodInfo>,
    policy: Option<&InterruptionPolicy>,
) -> Result<Option<Error>> {
    let pod = request.pod();
    let (hook, refused) = match info {
        Some(i) => match hook_target(
            &pod,
            &i.checkpoint_annotations,
            i.pod_ip.as_deref(),
            &i.shape.hook_endpoint,
            policy,
        ) {
            Ok(hook) => (hook, None),
            Err(e) => (None, Some(e)),
        },
        None => (None, None),
    };
    request_checkpoint(api, hooks, request, None, metrics).await?;
    if let Some(target) = hook {
        let (hooks, acks) = (hooks.clone(), acks.clone());
        let acknowledged = metrics.checkpoints_acknowledged.clone();
        let body = request.hook_body();
        tokio::spawn(async move {
            let outcome = hooks.post(&target, &body).await;
            tracing::info!(%pod, url = %target.url, ?outcome, "checkpoint hook called");
            if outcome.is_acknowledged() {
                acknowledged.inc();
                if let Ok(mut a) = acks.lock() {
                    a.insert(pod, chrono::Utc::now());
                }
            }
        });
    }
    Ok(refused)
}

/// Whether a pod acknowledged a checkpoint request, read from its annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acknowledgement {
    /// Not (yet): no completion, or one older than the request.
    Pending,
    /// The pod marked the checkpoint complete, at `at` when the value is an
    /// RFC 3339 time (it may be after the deadline: a late answer).
    Acknowledged {
        /// The completion time the pod wrote, if it wrote one.
        at: Option<Time>,
    },
}

/// Reads whether the pod acknowledged the request made at `requested_at`
/// for `deadline`. The annotation `quartermaster.dev/checkpoint-completed`:
/// - an RFC 3339 time counts when it is not before `requested_at` (an older
///   one is a previous checkpoint's);
/// - any other value counts when the pod's `checkpoint-requested` is this
///   request's deadline: the request removed old completions in the same
///   patch, so this one came after it.
pub fn acknowledgement(
    annotations: &BTreeMap<String, String>,
    requested_at: Time,
    deadline: Time,
) -> Acknowledgement {
    let Some(completed) = annotations.get(CHECKPOINT_COMPLETED) else {
        return Acknowledgement::Pending;
    };
    if let Some(at) = parse_time(completed) {
        return if at >= requested_at {
            Acknowledgement::Acknowledged { at: Some(at) }
        } else {
            Acknowledgement::Pending
        };
    }
    let ours = annotations
        .get(CHECKPOINT_REQUESTED)
        .and_then(|v| parse_time(v))
        .is_some_and(|d| d == deadline || d == deadline.trunc_subsecs(0));
    if ours {
        Acknowledgement::Acknowledged { at: None }
    } else {
        Acknowledgement::Pending
    }
}

pub(crate) fn parse_time(value: &str) -> Option<Time> {
    DateTime::parse_from_rfc3339(value.trim())
        .ok()
        .map(|t| t.to_utc())
}

/// How an outstanding request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// Acknowledged by the deadline (by the hook or the annotation).
    Acknowledged,
    /// The deadline passed first.
    TimedOut,
}

impl Resolution {
    /// Counts the resolution in the checkpoint metrics.
    pub fn count(self, metrics: &Metrics) {
        match self {
            Resolution::Acknowledged => metrics.checkpoints_acknowledged.inc(),
            Resolution::TimedOut => metrics.checkpoints_timed_out.inc(),
        };
    }
}

/// The checkpoint requests still waiting for an answer, by pod
/// (`namespace/name`): the driver's memory of what it asked, so that each
/// request is counted acknowledged or timed out exactly once.
#[derive(Debug, Clone, Default)]
pub struct Outstanding {
    requests: HashMap<String, (Time, Time)>,
}

impl Outstanding {
    /// Remembers a request made at `requested_at` for `deadline` (replacing
    /// an older one for the pod).
    pub fn requested(&mut self, pod: &str, requested_at: Time, deadline: Time) {
        self.requests
            .insert(pod.to_string(), (requested_at, deadline));
    }

    /// Whether a request for the pod is waiting.
    pub fn is_waiting(&self, pod: &str) -> bool {
        self.requests.contains_key(pod)
    }

    /// Requests waiting.
    pub fn len(&self) -> usize {
        self.requests.len()
    }

    /// Whether no request is waiting.
    pub fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// The hook acknowledged the pod's request (already counted by
    /// [`request_checkpoint`]): forget it.
    pub fn hook_acknowledged(&mut self, pod: &str) {
        self.requests.remove(pod);
    }

    /// The pod is gone: forget its request without counting it.
    pub fn forget(&mut self, pod: &str) {
        self.requests.remove(pod);
    }

    /// Reads the pod's annotations at `now`: resolves its request when it
    /// was acknowledged by the deadline, or when the deadline passed.
    pub fn observe(
        &mut self,
        pod: &str,
        annotations: &BTreeMap<String, String>,
        now: Time,
    ) -> Option<Resolution> {
        let (requested_at, deadline) = *self.requests.get(pod)?;
        let resolution = match acknowledgement(annotations, requested_at, deadline) {
            Acknowledgement::Acknowledged { at: Some(at) } if at <= deadline => {
                Some(Resolution::Acknowledged)
            }
            Acknowledgement::Acknowledged { at: None } if now <= deadline => {
                Some(Resolution::Acknowledged)
            }
            _ if now > deadline => Some(Resolution::TimedOut),
            _ => None,
        };
        if resolution.is_some() {
            self.requests.remove(pod);
        }
        resolution
    }

    /// Resolves as timed out every request whose deadline passed before
    /// `now` (for pods the driver no longer sees); returns their pods.
    pub fn expire(&mut self, now: Time) -> Vec<String> {
        let mut gone: Vec<String> = self
            .requests
            .iter()
            .filter(|(_, (_, deadline))| now > *deadline)
            .map(|(pod, _)| pod.clone())
            .collect();
        gone.sort();
        for pod in &gone {
            self.requests.remove(pod);
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::extract::State;
    use axum::http::StatusCode;
    use axum::routing::post;
    use axum::{Json, Router};
    use chrono::TimeZone;
    use std::sync::{Arc, Mutex};

    fn at(h: u32, m: u32, s: u32) -> Time {
        chrono::Utc
            .with_ymd_and_hms(2026, 11, 22, h, m, s)
            .single()
            .unwrap()
    }

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn pool_hook(port: u16, path: &str, timeout: &str) -> InterruptionPolicy {
        InterruptionPolicy {
            checkpoint_hook: Some(CheckpointHook {
                port,
                path: path.into(),
                timeout: timeout.into(),
            }),
            ..InterruptionPolicy::default()
        }
    }

    /// A pod network pod whose containers declare `ports`.
    fn declaring(ports: &[u16]) -> HookEndpoint {
        HookEndpoint {
            host_network: false,
            ports: ports.iter().copied().collect(),
        }
    }

    #[test]
    fn the_pods_own_hook_annotation_names_port_and_path() {
        let policy = pool_hook(7000, "/save", "3s");
        let ports = declaring(&[8080, 9000]);
        let a = annotations(&[(CHECKPOINT_HOOK, "8080/hooks/ckpt")]);
        let target = hook_target("ml/p", &a, Some("10.0.0.5"), &ports, Some(&policy)).unwrap();
        assert_eq!(
            target,
            Some(HookTarget {
                url: "http://10.0.0.5:8080/hooks/ckpt".into(),
                timeout: Duration::from_secs(3),
            })
        );
        let bare = annotations(&[(CHECKPOINT_HOOK, "9000")]);
        let target = hook_target("ml/p", &bare, Some("fd00::5"), &ports, Some(&policy)).unwrap();
        assert_eq!(target.unwrap().url, "http://[fd00::5]:9000/checkpoint");
    }

    #[test]
    fn the_pools_hook_applies_only_to_pods_that_opted_in_and_sets_the_timeout() {
        let policy = pool_hook(7000, "/save", "3s");
        let ports = declaring(&[7000, 8080]);
        let opted_in = annotations(&[(CHECKPOINT_ENABLED, "true")]);
        let target = hook_target("ml/p", &opted_in, Some("10.0.0.5"), &ports, Some(&policy))
            .unwrap()
            .unwrap();
        assert_eq!(target.url, "http://10.0.0.5:7000/save");
        assert_eq!(target.timeout, Duration::from_secs(3));
        let silent = annotations(&[]);
        assert_eq!(
            hook_target("ml/p", &silent, Some("10.0.0.5"), &ports, Some(&policy)).unwrap(),
            None
        );
        let own = annotations(&[(CHECKPOINT_ENABLED, "true"), (CHECKPOINT_HOOK, "8080/mine")]);
        let target = hook_target("ml/p", &own, Some("10.0.0.5"), &ports, Some(&policy))
            .unwrap()
            .unwrap();
        assert_eq!(target.url, "http://10.0.0.5:8080/mine");
        assert_eq!(target.timeout, Duration::from_secs(3));
    }

    /// The refusal `hook_target` gives, or a panic naming what it gave.
    fn refusal(
        a: &BTreeMap<String, String>,
        ip: &str,
        endpoint: &HookEndpoint,
        policy: Option<&InterruptionPolicy>,
    ) -> String {
        match hook_target("ml/p", a, Some(ip), endpoint, policy) {
            Err(Error::Refused { pod, reason }) => {
                assert_eq!(pod, "ml/p");
                reason
            }
            other => panic!("{ip}: expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_pods_own_hook_is_refused_unless_its_pool_opts_in() {
        let a = annotations(&[(CHECKPOINT_HOOK, "8080/ckpt")]);
        let reason = refusal(&a, "10.0.0.5", &declaring(&[8080]), None);
        assert!(reason.contains("does not opt in"), "{reason}");
        let no_hook = InterruptionPolicy::default();
        let reason = refusal(&a, "10.0.0.5", &declaring(&[8080]), Some(&no_hook));
        assert!(reason.contains("interruption.checkpointHook"), "{reason}");
    }

    #[test]
    fn a_host_network_pod_is_refused() {
        let policy = pool_hook(8080, "/ckpt", "3s");
        let a = annotations(&[(CHECKPOINT_ENABLED, "true")]);
        let host = HookEndpoint {
            host_network: true,
            ..declaring(&[8080])
        };
        let reason = refusal(&a, "10.0.0.5", &host, Some(&policy));
        assert!(reason.contains("host network"), "{reason}");
    }

    #[test]
    fn loopback_link_local_and_unspecified_pod_ips_are_refused() {
        let policy = pool_hook(8080, "/ckpt", "3s");
        let a = annotations(&[(CHECKPOINT_HOOK, "8080")]);
        let ports = declaring(&[8080]);
        for (ip, kind) in [
            ("127.0.0.1", "loopback"),
            ("127.1.2.3", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("169.254.169.254", "link-local"),
            ("169.254.0.1", "link-local"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("::ffff:169.254.169.254", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("::", "unspecified"),
        ] {
            let reason = refusal(&a, ip, &ports, Some(&policy));
            assert!(reason.contains(kind), "{ip}: {reason}");
        }
        for ok in ["10.0.0.5", "fd00::5", "100.64.0.1"] {
            assert!(hook_target("ml/p", &a, Some(ok), &ports, Some(&policy)).is_ok());
        }
    }

    #[test]
    fn only_declared_container_ports_are_called() {
        let policy = pool_hook(7000, "/save", "3s");
        let own = annotations(&[(CHECKPOINT_HOOK, "22")]);
        let reason = refusal(&own, "10.0.0.5", &declaring(&[8080]), Some(&policy));
        assert!(reason.contains("port 22"), "{reason}");
        let opted_in = annotations(&[(CHECKPOINT_ENABLED, "true")]);
        let reason = refusal(&opted_in, "10.0.0.5", &declaring(&[]), Some(&policy));
        assert!(reason.contains("port 7000"), "{reason}");
    }

    #[test]
    fn the_endpoint_of_a_pod_reads_host_network_and_every_declared_port() {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ml"},
            "spec": {
                "hostNetwork": true,
                "containers": [
                    {"name": "a", "ports": [{"containerPort": 8080}, {"containerPort": 9090}]},
                    {"name": "b"},
                ],
                "initContainers": [{"name": "sidecar", "ports": [{"containerPort": 7000}]}],
            }
        }))
        .unwrap();
        let endpoint = HookEndpoint::of(&pod);
        assert!(endpoint.host_network);
        assert_eq!(endpoint.ports, BTreeSet::from([7000, 8080, 9090]));
    }

    #[test]
    fn a_malformed_hook_or_a_missing_pod_ip_is_a_clear_error() {
        let policy = pool_hook(7000, "/save", "3s");
        let ports = declaring(&[8080]);
        for bad in ["", "http://x/y", "0/ckpt", "70000", "80/a b", "80/x?y=1"] {
            let a = annotations(&[(CHECKPOINT_HOOK, bad)]);
            let err = hook_target("ml/p", &a, Some("10.0.0.5"), &ports, Some(&policy)).unwrap_err();
            assert!(matches!(err, Error::BadHook { .. }), "{bad:?}: {err}");
            assert!(err.to_string().contains("ml/p"), "{err}");
        }
        let a = annotations(&[(CHECKPOINT_HOOK, "8080")]);
        for ip in [None, Some(""), Some("not-an-ip")] {
            let err = hook_target("ml/p", &a, ip, &ports, Some(&policy)).unwrap_err();
            assert!(matches!(err, Error::NoPodIp { .. }), "{ip:?}: {err}");
        }
        let policy = pool_hook(7000, "/save", "soon");
        let err = hook_target("ml/p", &a, Some("10.0.0.5"), &ports, Some(&policy)).unwrap_err();
        assert!(matches!(err, Error::BadTimeout { .. }), "{err}");
    }

    #[test]
    fn a_request_sets_the_deadline_and_clears_an_old_completion() {
        let changes = request_annotations(at(1, 2, 3));
        assert_eq!(
            changes.get(CHECKPOINT_REQUESTED),
            Some(&Some("2026-11-22T01:02:03Z".to_string()))
        );
        assert_eq!(changes.get(CHECKPOINT_COMPLETED), Some(&None));
    }

    #[test]
    fn a_completion_time_counts_only_from_the_request_on() {
        let (requested, deadline) = (at(1, 0, 0), at(1, 1, 30));
        assert_eq!(
            acknowledgement(&annotations(&[]), requested, deadline),
            Acknowledgement::Pending
        );
        let before = annotations(&[(CHECKPOINT_COMPLETED, "2026-11-22T00:59:59Z")]);
        assert_eq!(
            acknowledgement(&before, requested, deadline),
            Acknowledgement::Pending
        );
        let after = annotations(&[(CHECKPOINT_COMPLETED, "2026-11-22T02:00:40+01:00")]);
        assert_eq!(
            acknowledgement(&after, requested, deadline),
            Acknowledgement::Acknowledged {
                at: Some(at(1, 0, 40))
            }
        );
    }

    #[test]
    fn any_other_completion_value_counts_when_the_pod_shows_this_request() {
        let (requested, deadline) = (at(1, 0, 0), at(1, 1, 30));
        let ours = annotations(&[
            (CHECKPOINT_REQUESTED, "2026-11-22T01:01:30Z"),
            (CHECKPOINT_COMPLETED, "done"),
        ]);
        assert_eq!(
            acknowledgement(&ours, requested, deadline),
            Acknowledgement::Acknowledged { at: None }
        );
        let older_request = annotations(&[
            (CHECKPOINT_REQUESTED, "2026-11-21T08:00:00Z"),
            (CHECKPOINT_COMPLETED, "done"),
        ]);
        assert_eq!(
            acknowledgement(&older_request, requested, deadline),
            Acknowledgement::Pending
        );
    }

    #[test]
    fn outstanding_requests_resolve_once_acknowledged_or_past_their_deadline() {
        let mut waiting = Outstanding::default();
        waiting.requested("ml/a", at(1, 0, 0), at(1, 1, 30));
        waiting.requested("ml/b", at(1, 0, 0), at(1, 1, 30));
        waiting.requested("ml/c", at(1, 0, 0), at(1, 1, 30));
        let none = annotations(&[]);
        assert_eq!(waiting.observe("ml/a", &none, at(1, 0, 30)), None);
        let done = annotations(&[(CHECKPOINT_COMPLETED, "2026-11-22T01:00:50Z")]);
        assert_eq!(
            waiting.observe("ml/a", &done, at(1, 0, 55)),
            Some(Resolution::Acknowledged)
        );
        assert_eq!(waiting.observe("ml/a", &done, at(1, 0, 56)), None);
        let late = annotations(&[(CHECKPOINT_COMPLETED, "2026-11-22T01:01:45Z")]);
        assert_eq!(
            waiting.observe("ml/b", &late, at(1, 1, 50)),
            Some(Resolution::TimedOut)
        );
        assert_eq!(waiting.expire(at(1, 1, 0)), Vec::<String>::new());
        assert_eq!(waiting.expire(at(1, 2, 0)), vec!["ml/c".to_string()]);
        assert!(waiting.is_empty());
    }

    /// A hook server on 127.0.0.1: `/ok` answers 200, `/fail` 503, `/hang`
    /// never in time; every body it gets is recorded.
    async fn hook_server() -> (std::net::SocketAddr, Arc<Mutex<Vec<serde_json::Value>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        async fn record(
            State(seen): State<Arc<Mutex<Vec<serde_json::Value>>>>,
            Json(body): Json<serde_json::Value>,
        ) -> StatusCode {
            seen.lock().unwrap().push(body);
            StatusCode::OK
        }
        let app = Router::new()
            .route("/ok", post(record))
            .route("/fail", post(|| async { StatusCode::SERVICE_UNAVAILABLE }))
            .route(
                "/hang",
                post(|| async {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    StatusCode::OK
                }),
            )
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (addr, seen)
    }

    fn body() -> HookBody {
        CheckpointRequest {
            namespace: "ml".into(),
            name: "trainer-0".into(),
            node: "ip-10-0-0-1".into(),
            deadline: at(1, 1, 30),
            reason: "spot-interruption".into(),
        }
        .hook_body()
    }

    fn target(addr: std::net::SocketAddr, path: &str, timeout: Duration) -> HookTarget {
        HookTarget {
            url: format!("http://{addr}{path}"),
            timeout,
        }
    }

    #[tokio::test]
    async fn a_2xx_from_the_hook_acknowledges_and_the_hook_gets_the_request() {
        let (addr, seen) = hook_server().await;
        let outcome = HookClient::new()
            .post(&target(addr, "/ok", Duration::from_secs(5)), &body())
            .await;
        assert_eq!(outcome, HookOutcome::Acknowledged { status: 200 });
        assert_eq!(
            *seen.lock().unwrap(),
            vec![serde_json::json!({
                "pod": "trainer-0",
                "namespace": "ml",
                "node": "ip-10-0-0-1",
                "deadline": "2026-11-22T01:01:30Z",
                "reason": "spot-interruption",
            })]
        );
    }

    #[tokio::test]
    async fn a_non_2xx_from_the_hook_is_refused() {
        let (addr, _) = hook_server().await;
        let outcome = HookClient::new()
            .post(&target(addr, "/fail", Duration::from_secs(5)), &body())
            .await;
        assert_eq!(outcome, HookOutcome::Refused { status: 503 });
        assert!(!outcome.is_acknowledged());
    }

    #[tokio::test]
    async fn a_hook_that_hangs_past_its_timeout_times_out() {
        let (addr, _) = hook_server().await;
        let started = std::time::Instant::now();
        let outcome = HookClient::new()
            .post(&target(addr, "/hang", Duration::from_millis(300)), &body())
            .await;
        assert_eq!(outcome, HookOutcome::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_hook_nobody_listens_on_is_unreachable() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let outcome = HookClient::new()
            .post(&target(addr, "/ok", Duration::from_secs(5)), &body())
            .await;
        assert!(
            matches!(outcome, HookOutcome::Unreachable { .. }),
            "{outcome:?}"
        );
    }
}
