//! `quartermaster controller`: the live controller. Thin wiring: logging,
//! the metrics registry and HTTP endpoints, the Kubernetes client, leader
//! election, the cloud and its channels, then
//! [`quartermaster::controller::run::run`] until a signal. The first
//! SIGTERM/SIGINT asks the loop to finish its round (bounded by
//! `--shutdown-timeout`); a second one aborts at once.

use anyhow::{bail, Context as _};
use chrono::Utc;
use prometheus_client::registry::Registry;
use quartermaster::catalog::{Catalog, DeviceData};
use quartermaster::cloud::aws::ec2::settings::SettingsFile;
use quartermaster::cloud::aws::{self, ec2, ec2::AwsCloud, eks, notices, pricing};
use quartermaster::cloud::simulated::{SimulatedCloud, SimulatedCloudConfig};
use quartermaster::cloud::{CloudProvider, InstanceNotice, NoticeAcks};
use quartermaster::controller::device_data;
use quartermaster::controller::events::Events;
use quartermaster::controller::fence::{self, Fenced};
use quartermaster::controller::health::{Endpoints, Liveness};
use quartermaster::controller::kube_api::KubeApi;
use quartermaster::controller::leader::{while_leading, Leadership, LeaseSettings};
use quartermaster::controller::logging::{self, LogFormat};
use quartermaster::controller::nodeclasses;
use quartermaster::controller::run::{self, Context, Settings};
use quartermaster::metrics::Metrics;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

/// Which cloud launches the instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CloudKind {
    /// EC2 through the AWS APIs (credentials from the standard chain: IRSA,
    /// Pod Identity, environment, profile).
    Aws,
    /// A simulated cloud: the controller creates the Node objects itself
    /// (like Karpenter's kwok provider), so it runs on any cluster without
    /// AWS. Nodes are fake; pods bound to them never start.
    Simulated,
}

/// Arguments of `controller`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The cloud that launches instances.
    #[arg(long, value_enum, default_value = "aws", env = "QM_CLOUD")]
    cloud: CloudKind,
    /// AWS region of the cluster; the catalog's offerings are per region.
    #[arg(long, env = "QM_REGION", default_value = "us-east-1")]
    region: String,
    /// Cluster name, written into ownership tags and Events.
    #[arg(long, env = "QM_CLUSTER_NAME")]
    cluster_name: String,
    /// Address of the Prometheus endpoint (`/metrics`, OpenMetrics text).
    #[arg(long, env = "QM_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Address of the probes (`/healthz`, `/readyz`); may equal
    /// `--metrics-addr`, then one listener serves all three.
    #[arg(long, env = "QM_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    health_addr: SocketAddr,
    /// Elect a leader on a Lease so that only one replica acts; without it
    /// this replica always acts (run a single replica then).
    #[arg(long, env = "QM_LEADER_ELECT")]
    leader_elect: bool,
    /// Name of the leader election Lease.
    #[arg(long, env = "QM_LEASE_NAME", default_value = "quartermaster")]
    lease_name: String,
    /// Namespace of the leader election Lease (the controller's own; the
    /// chart passes the release namespace).
    #[arg(long, env = "QM_LEASE_NAMESPACE", default_value = "kube-system")]
    lease_namespace: String,
    /// This replica's identity in the Lease (the chart passes the pod name
    /// through the downward API); defaults to the host name.
    #[arg(long, env = "POD_NAME")]
    lease_identity: Option<String>,
    /// How long the Lease stays valid after its last renewal.
    #[arg(long, value_parser = parse_duration, default_value = "15s")]
    lease_duration: Duration,
    /// How long the leader retries a failed renewal before it stops acting;
    /// it renews every third of this. Shorter than `--lease-duration`.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    lease_renew_deadline: Duration,
    /// How often a standby tries to acquire the Lease, and how often the
    /// leader retries a failed renewal.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    lease_retry_period: Duration,
    /// YAML file of the EC2 provider's cluster settings (name, Kubernetes
    /// version, endpoint, CA, service CIDR; node classes are EC2NodeClass
    /// objects), `--cloud aws`. What it leaves out, or all of it without
    /// the file, is discovered with one eks:DescribeCluster of
    /// `--cluster-name` at startup. The chart mounts it from a ConfigMap.
    #[arg(long, env = "QM_AWS_CONFIG")]
    aws_config: Option<PathBuf>,
    /// The SQS queue that EventBridge fills with spot interruption,
    /// rebalance, state-change and AWS Health events (`--cloud aws`; see
    /// deploy/aws): its URL, or its name (looked up with sqs:GetQueueUrl at
    /// startup). Without it no interruption notice is received. Only the
    /// leader consumes it.
    #[arg(long, env = "QM_INTERRUPTION_QUEUE")]
    interruption_queue: Option<String>,
    /// How often live prices are fetched from the AWS Pricing API and the
    /// spot price history (`--cloud aws`); the embedded prices are used
    /// until the first refresh and whenever the APIs fail.
    #[arg(long, value_parser = parse_duration, default_value = "6h")]
    price_refresh_interval: Duration,
    /// Device data laid over the embedded device templates (the form of
    /// `pricing-data/dra-devices.yaml`; see `catalog --devices`): GPU or
    /// Neuron models, PCIe topologies or whole templates for instance
    /// types the embedded data does not know. Kept across price
    /// refreshes, and read again every 10s while the controller runs (a
    /// mounted ConfigMap's updates apply without a restart; content that
    /// does not read is logged and refused, the last good data kept).
    #[arg(long, value_name = "FILE", env = "QM_DEVICE_DATA")]
    device_data: Option<std::path::PathBuf>,
    /// How often EC2NodeClasses are resolved against AWS (images, subnets,
    /// security groups, instance profile) and their status written
    /// (`--cloud aws`).
    #[arg(long, value_parser = parse_duration, default_value = "1m")]
    node_class_refresh_interval: Duration,
    /// Log format.
    #[arg(long, value_enum, default_value = "text", env = "QM_LOG_FORMAT")]
    log_format: LogFormat,
    /// Log filter (`info`, `debug`, or directives such as
    /// `quartermaster=debug,kube=warn`); `RUST_LOG` wins when set.
    #[arg(long, default_value = "info", env = "QM_LOG_LEVEL")]
    log_level: String,
    /// Provisioning batch: quiet time after the last new pending pod that
    /// closes a batch.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    batch_idle: Duration,
    /// Provisioning batch: longest a batch stays open.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    batch_max: Duration,
    /// Longest a Kubernetes API request may go without a byte of answer
    /// (read) or take to send (write); watches, which idle by design, get
    /// a longer read timeout than the server's watch timeout instead.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    kube_request_timeout: Duration,
    /// Longest connecting to the Kubernetes API may take.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    kube_connect_timeout: Duration,
    /// Most pending pods one plan considers, whole pod groups at a time;
    /// the rest wait for the next batch (with an Event saying so).
    #[arg(long, default_value_t = quartermaster::core::batch::DEFAULT_MAX_PODS)]
    max_batch_pods: usize,
    /// `/healthz` fails when the loop has made no progress (finished a
    /// round or woken between rounds) for this long; longer than `--tick`.
    #[arg(long, value_parser = parse_duration, default_value = "3m")]
    healthz_stall_timeout: Duration,
    /// Longest sleep between decision rounds when nothing happens.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    tick: Duration,
    /// A NodeClaim without an instance this long after creation is deleted
    /// and re-planned.
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    launch_timeout: Duration,
    /// A launched NodeClaim whose Node has not registered this long after
    /// the launch is deleted and re-planned.
    #[arg(long, value_parser = parse_duration, default_value = "15m")]
    registration_timeout: Duration,
    /// Instances with our cluster tag and no NodeClaim older than this are
    /// terminated by the garbage collector.
    #[arg(long, value_parser = parse_duration, default_value = "10m")]
    gc_grace: Duration,
    /// After the first SIGTERM/SIGINT, how long the loop may take to finish
    /// its round before the controller exits anyway.
    #[arg(long, value_parser = parse_duration, default_value = "20s")]
    shutdown_timeout: Duration,
    /// Seed of the simulated cloud's random draws (boot times,
    /// interruptions); `--cloud simulated` only.
    #[arg(long, default_value_t = 1)]
    simulated_seed: u64,
    /// A Prometheus-compatible API (`http://host:port`) with the DCGM
    /// exporter's series: GPU use per pool and workload (metrics), Events on
    /// under-used pods, XID errors for repair, idle GPU nodes for pools that
    /// consolidate them. Unset: GPU use is not read.
    #[arg(long, env = "QM_PROMETHEUS_URL")]
    prometheus_url: Option<String>,
    /// The window GPU use is judged over (a pod under the threshold for it
    /// gets an Event).
    #[arg(long, value_parser = parse_duration, default_value = "1h")]
    gpu_use_window: Duration,
    /// How often GPU use is read.
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    gpu_use_interval: Duration,
    /// Longest one Prometheus query may take.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    prometheus_timeout: Duration,
    /// A pod whose GPUs are busy less than this share on average over the
    /// window is under-used (an Event).
    #[arg(long, default_value_t = quartermaster::plan::rightsize::UNDERUSED_BELOW)]
    gpu_underused_below: f64,
    /// A GPU busy less than this share is idle (idle GPU-hours; idle nodes
    /// for `consolidateIdleGpusAfter`).
    #[arg(long, default_value_t = quartermaster::plan::rightsize::IDLE_BELOW)]
    gpu_idle_below: f64,
}

/// The read timeout of the watch client: longer than the API server's
/// longest watch (kube-runtime asks for 290 s), so a quiet watch ends
/// cleanly and is renewed, while a dead connection is still noticed.
const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(330);

/// `config` with connect, read and write timeouts: kube's defaults have no
/// read timeout, so a half-open connection would hang a request (a lease
/// renewal, a write) for ever.
fn with_timeouts(mut config: kube::Config, connect: Duration, read: Duration) -> kube::Config {
    config.connect_timeout = Some(connect);
    config.read_timeout = Some(read);
    config.write_timeout = Some(read);
    // Count the read timeout from the request, not from when a pooled
    // connection went idle.
    config.reset_reader_on_write = true;
    config
}

/// Parses a duration such as `500ms`, `30s`, `5m` or `2h` (a whole number
/// and a unit).
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit: write e.g. 30s, 5m, 500ms or 2h"))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number"))?;
    let too_long = || format!("{text:?} is too long");
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => n
            .checked_mul(60)
            .map(Duration::from_secs)
            .ok_or_else(too_long),
        "h" => n
            .checked_mul(3600)
            .map(Duration::from_secs)
            .ok_or_else(too_long),
        _ => Err(format!(
            "{text:?}: unknown unit {unit:?} (use ms, s, m or h)"
        )),
    }
}

impl Args {
    /// The leader election settings, checked.
    fn lease(&self) -> anyhow::Result<LeaseSettings> {
        let identity = self
            .lease_identity
            .clone()
            .filter(|i| !i.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
            .unwrap_or_else(|| format!("quartermaster-{}", std::process::id()));
        let settings = LeaseSettings {
            name: self.lease_name.clone(),
            namespace: self.lease_namespace.clone(),
            identity,
            lease_duration: self.lease_duration,
            renew_deadline: self.lease_renew_deadline,
            retry_period: self.lease_retry_period,
        };
        settings.validate()?;
        Ok(settings)
    }

    /// The EC2 provider's settings file, read and checked; without
    /// `--aws-config`, one naming `--cluster-name` only (the rest is
    /// discovered).
    fn aws_settings(&self) -> anyhow::Result<SettingsFile> {
        let settings = match &self.aws_config {
            Some(path) => {
                let file = SettingsFile::load(path)
                    .with_context(|| format!("in --aws-config {}", path.display()))?;
                if file.cluster_name != self.cluster_name {
                    bail!(
                        "--aws-config {} names cluster {:?} but --cluster-name is {:?}",
                        path.display(),
                        file.cluster_name,
                        self.cluster_name
                    );
                }
                file
            }
            None => SettingsFile {
                cluster_name: self.cluster_name.clone(),
                ..SettingsFile::default()
            },
        };
        if self.price_refresh_interval.is_zero() {
            bail!("--price-refresh-interval must be positive");
        }
        if self.node_class_refresh_interval.is_zero() {
            bail!("--node-class-refresh-interval must be positive");
        }
        Ok(settings)
    }

    /// The loop's settings, checked.
    fn settings(&self) -> anyhow::Result<Settings> {
        if self.cluster_name.trim().is_empty() {
            bail!("--cluster-name must not be empty");
        }
        if self.batch_idle > self.batch_max {
            bail!(
                "--batch-idle ({:?}) must not exceed --batch-max ({:?})",
                self.batch_idle,
                self.batch_max
            );
        }
        if self.tick.is_zero() {
            bail!("--tick must be positive");
        }
        if self.max_batch_pods == 0 {
            bail!("--max-batch-pods must be positive");
        }
        if self.healthz_stall_timeout <= self.tick {
            bail!(
                "--healthz-stall-timeout ({:?}) must exceed --tick ({:?}): the loop may sleep a tick",
                self.healthz_stall_timeout,
                self.tick
            );
        }
        let core = quartermaster::core::Config {
            batch_idle: self.batch_idle,
            batch_max: self.batch_max,
            max_batch_pods: self.max_batch_pods,
            ..quartermaster::core::Config::default()
        };
        let gpu_use = match &self.prometheus_url {
            None => None,
            Some(url) => {
                quartermaster::controller::prometheus::Prometheus::new(
                    url,
                    self.prometheus_timeout,
                )
                .context("--prometheus-url")?;
                if self.gpu_use_window.is_zero() || self.gpu_use_interval.is_zero() {
                    bail!("--gpu-use-window and --gpu-use-interval must be positive");
                }
                for (flag, v) in [
                    ("--gpu-underused-below", self.gpu_underused_below),
                    ("--gpu-idle-below", self.gpu_idle_below),
                ] {
                    if !(0.0..=1.0).contains(&v) {
                        bail!("{flag} must be a share between 0 and 1, not {v}");
                    }
                }
                Some(quartermaster::controller::gpu_use::GpuUseSettings {
                    url: url.clone(),
                    window: self.gpu_use_window,
                    interval: self.gpu_use_interval,
                    timeout: self.prometheus_timeout,
                    underused_below: self.gpu_underused_below,
                    idle_below: self.gpu_idle_below,
                })
            }
        };
        Ok(Settings {
            region: self.region.clone(),
            cluster_name: self.cluster_name.clone(),
            core,
            tick: self.tick,
            launch_timeout: self.launch_timeout,
            registration_timeout: self.registration_timeout,
            gc_grace: self.gc_grace,
            gpu_use,
        })
    }
}

/// Runs `controller` until a signal.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    logging::init(args.log_format, &args.log_level)?;
    // Check everything that needs no cluster before connecting to one.
    let settings = args.settings()?;
    let lease = args.lease()?;
    let catalog = Catalog::embedded().context("loading the embedded catalog")?;
    let devices = match args.device_data.as_deref() {
        Some(path) => Some(Arc::new(super::catalog::read_device_file(path)?)),
        None => None,
    };
    let catalog = device_data::overlay(&catalog, devices.as_deref());
    if !catalog.regions().contains(&args.region.as_str()) {
        bail!(
            "--region {}: the catalog has no offerings there (regions: {})",
            args.region,
            catalog.regions().join(", ")
        );
    }
    let aws_settings = match args.cloud {
        CloudKind::Aws => Some(args.aws_settings()?),
        CloudKind::Simulated => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(controller(
        args,
        settings,
        lease,
        (catalog, devices),
        aws_settings,
    ))?;
    Ok(ExitCode::SUCCESS)
}

async fn controller(
    args: Args,
    settings: Settings,
    lease: LeaseSettings,
    (catalog, devices): (Arc<Catalog>, Option<Arc<DeviceData>>),
    aws_settings: Option<SettingsFile>,
) -> anyhow::Result<()> {
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry));
    let ready = Arc::new(AtomicBool::new(false));
    let servers_stop = CancellationToken::new();
    let endpoints = Endpoints::start(
        args.metrics_addr,
        args.health_addr,
        Arc::new(registry),
        ready.clone(),
        Liveness {
            progress: metrics.progress.clone(),
            stall_after: args.healthz_stall_timeout,
        },
        servers_stop.clone(),
    )
    .await?;

    let config = kube::Config::infer()
        .await
        .context("connecting to the Kubernetes API (in-cluster config or KUBECONFIG)")?;
    let requests = with_timeouts(
        config.clone(),
        args.kube_connect_timeout,
        args.kube_request_timeout,
    );
    let leadership = if args.leader_elect {
        // The elector writes the Lease to become leader: it is not fenced.
        let client =
            kube::Client::try_from(requests.clone()).context("building the Kubernetes client")?;
        Leadership::elect(client, lease, metrics.clone())?
    } else {
        Leadership::always(metrics.clone())
    };
    // Every other write goes through the fence: none starts once this
    // replica has stopped leading.
    let client = kube::client::ClientBuilder::try_from(requests)
        .context("building the Kubernetes client")?
        .with_layer(&fence::layer(leadership.receiver(), metrics.clone()))
        .build();
    let watch_client = kube::Client::try_from(with_timeouts(
        config,
        args.kube_connect_timeout,
        WATCH_READ_TIMEOUT,
    ))
    .context("building the Kubernetes watch client")?;

    let shutdown = CancellationToken::new();
    tokio::spawn(signals(shutdown.clone()));

    let (catalog_tx, catalog_rx) = watch::channel(catalog.clone());
    // The device data file is read again while the loop runs and laid
    // over every catalog sent it (`device_data`).
    let catalog_tx = match &args.device_data {
        Some(path) => {
            let (upstream_tx, upstream_rx) = watch::channel(catalog.clone());
            tokio::spawn(device_data::keep_devices_current(
                device_data::DeviceFile::new(path.clone(), devices),
                upstream_rx,
                catalog_tx,
                metrics.clone(),
                device_data::POLL_EVERY,
                shutdown.clone(),
            ));
            upstream_tx
        }
        None => catalog_tx,
    };
    let (notice_tx, notice_rx) = mpsc::channel::<InstanceNotice>(1024);
    let notice_acks = NoticeAcks::default();
    let parts = Parts {
        api: KubeApi::new(client),
        metrics: metrics.clone(),
        catalog: catalog_rx,
        leader: leadership.receiver(),
        ready,
        notices: notice_rx,
        notice_acks: notice_acks.clone(),
        watch_client,
    };
    let result = match args.cloud {
        CloudKind::Simulated => {
            let config = SimulatedCloudConfig::new(args.simulated_seed, &args.region, Utc::now());
            let cloud = SimulatedCloud::new(catalog, config)
                .map_err(|e| anyhow::anyhow!("configuring the simulated cloud: {e}"))?;
            let cloud = Fenced::new(Mutex::new(cloud), leadership.receiver(), metrics.clone());
            let (ctx, watches) = parts.context(Arc::new(cloud), true);
            // Prices never change and notices come from the loop itself;
            // the senders live as long as the loop so its channels stay open.
            let _senders = (catalog_tx, notice_tx);
            run_until_stopped(ctx, settings, watches, shutdown, args.shutdown_timeout).await
        }
        CloudKind::Aws => {
            let file = aws_settings.context("the EC2 settings were loaded")?;
            let sdk = aws::load_sdk_config(Some(&args.region), None).await;
            let aws_settings =
                eks::complete_settings(&aws_sdk_eks::Client::new(&sdk), &file).await?;
            let cloud = AwsCloud::from_sdk_config(&sdk, aws_settings)
                .context("configuring the EC2 provider")?;
            // Node classes are resolved beside the loop and handed to the
            // provider; every replica resolves, only the leader writes.
            let reconciler = nodeclasses::Reconciler::new(
                parts.api.clone(),
                Events::new(parts.api.client().clone(), std::env::var("POD_NAME").ok()),
                aws::nodeclass::Resolver::new(&sdk, cloud.settings().kubernetes_version.clone()),
                cloud.node_classes(),
            );
            tokio::spawn(reconciler.run(
                args.node_class_refresh_interval,
                leadership.receiver(),
                shutdown.clone(),
            ));
            // Live prices for every replica (each decides on its own
            // catalog once it leads).
            let refresher = pricing::Refresher::new(
                pricing::PriceClient::new(&sdk, &args.region),
                catalog.clone(),
            );
            let (m, stop, every) = (
                metrics.clone(),
                shutdown.clone(),
                args.price_refresh_interval,
            );
            // Prices go through the reservations task, which adds the
            // reservations the node classes select to every catalog it
            // forwards. Classes change at runtime, so it always runs: it
            // sees the classes the reconciler sets (a shared handle) and
            // makes no EC2 call while no class has selector terms.
            let (prices_tx, prices_rx) = watch::channel(catalog.clone());
            let discovery = AwsCloud::from_sdk_config(&sdk, cloud.settings().clone())
                .context("configuring the EC2 provider")?
                .sharing_node_classes(cloud.node_classes());
            let lead = settings.core.interruption.reservation_lead;
            tokio::spawn(ec2::reservations::keep_catalog_reserved(
                discovery,
                prices_rx,
                catalog_tx,
                ec2::reservations::REFRESH_EVERY,
                lead,
                shutdown.clone(),
            ));
            tokio::spawn(async move { refresher.run(prices_tx, &m, every, stop).await });
            match &args.interruption_queue {
                Some(queue) => {
                    let sqs = aws_sdk_sqs::Client::new(&sdk);
                    let url = notices::queue_url(&sqs, queue).await?;
                    let consumer = NoticeFeed {
                        sqs,
                        config: notices::ConsumerConfig::new(url),
                        notices: notice_tx,
                        acks: notice_acks,
                        metrics: metrics.clone(),
                    };
                    tokio::spawn(consumer.run_while_leading(leadership.receiver(), shutdown.clone()));
                }
                None => tracing::warn!(
                    "no --interruption-queue: spot interruption and rebalance notices will not be received"
                ),
            }
            let cloud = Fenced::new(cloud, leadership.receiver(), metrics.clone());
            let (ctx, watches) = parts.context(Arc::new(cloud), false);
            run_until_stopped(ctx, settings, watches, shutdown, args.shutdown_timeout).await
        }
    };

    // Stop acting (and hand the lease over) only once the loop has stopped
    // writing, then stop serving.
    if tokio::time::timeout(Duration::from_secs(5), leadership.finish())
        .await
        .is_err()
    {
        tracing::warn!("releasing the lease timed out; it will expire");
    }
    servers_stop.cancel();
    endpoints.join().await?;
    result
}

/// What every cloud's [`Context`] shares.
struct Parts {
    api: KubeApi,
    metrics: Arc<Metrics>,
    catalog: watch::Receiver<Arc<Catalog>>,
    leader: watch::Receiver<bool>,
    ready: Arc<AtomicBool>,
    notices: mpsc::Receiver<InstanceNotice>,
    notice_acks: NoticeAcks,
    watch_client: kube::Client,
}

impl Parts {
    /// The loop's context, and the client its watches use.
    fn context<C>(self, cloud: Arc<C>, simulated_nodes: bool) -> (Context<C>, kube::Client) {
        let ctx = Context {
            api: self.api,
            cloud,
            metrics: self.metrics,
            catalog: self.catalog,
            leader: self.leader,
            ready: self.ready,
            notices: self.notices,
            notice_acks: self.notice_acks,
            simulated_nodes,
        };
        (ctx, self.watch_client)
    }
}

/// The SQS consumer, run only while this replica leads: a standby must not
/// take (and delete) notices that only the leader acts on.
struct NoticeFeed {
    sqs: aws_sdk_sqs::Client,
    config: notices::ConsumerConfig,
    notices: mpsc::Sender<InstanceNotice>,
    acks: NoticeAcks,
    metrics: Arc<Metrics>,
}

impl NoticeFeed {
    async fn run_while_leading(self, leader: watch::Receiver<bool>, shutdown: CancellationToken) {
        let NoticeFeed {
            sqs,
            config,
            notices: sender,
            acks,
            metrics,
        } = self;
        while_leading(leader, shutdown, move |stop| {
            let consumer = notices::NoticeConsumer::new(sqs.clone(), config.clone(), acks.clone());
            let (sender, metrics) = (sender.clone(), metrics.clone());
            async move {
                if let Err(e) = notices::run_consumer(consumer, sender, &metrics, stop).await {
                    tracing::error!(error = %e, "the notice consumer stopped");
                }
            }
        })
        .await;
    }
}

/// Runs the loop; after `shutdown` it gets `timeout` to finish its round.
async fn run_until_stopped<C: CloudProvider + Send + Sync + 'static>(
    ctx: Context<C>,
    settings: Settings,
    watches: kube::Client,
    shutdown: CancellationToken,
    timeout: Duration,
) -> anyhow::Result<()> {
    let mut main = std::pin::pin!(run::run_watching(ctx, settings, watches, shutdown.clone()));
    tokio::select! {
        result = &mut main => return result,
        _ = shutdown.cancelled() => {}
    }
    match tokio::time::timeout(timeout, main).await {
        Ok(result) => result,
        Err(_) => {
            bail!("the loop did not finish its round within {timeout:?} of the shutdown signal")
        }
    }
}

/// The first SIGTERM or SIGINT cancels `shutdown`; a second one exits at
/// once with status 130.
async fn signals(shutdown: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop the controller with SIGKILL");
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    tracing::info!("shutting down: finishing the round in flight (signal again to abort)");
    shutdown.cancel();
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    tracing::error!("second signal: aborting");
    std::process::exit(130);
}

#[cfg(test)]
mod tests {
    use super::{parse_duration, with_timeouts, WATCH_READ_TIMEOUT};
    use std::time::Duration;

    #[test]
    fn kube_clients_time_out_connects_reads_and_writes() {
        let config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        assert_eq!(config.read_timeout, None, "kube's default has none");
        let requests = with_timeouts(
            config.clone(),
            Duration::from_secs(10),
            Duration::from_secs(30),
        );
        assert_eq!(requests.connect_timeout, Some(Duration::from_secs(10)));
        assert_eq!(requests.read_timeout, Some(Duration::from_secs(30)));
        assert_eq!(requests.write_timeout, Some(Duration::from_secs(30)));
        assert!(requests.reset_reader_on_write);
        // Watches idle up to the server's 290 s timeout: theirs is longer.
        let watches = with_timeouts(config, Duration::from_secs(10), WATCH_READ_TIMEOUT);
        assert!(watches.read_timeout > Some(Duration::from_secs(290)));
    }

    #[test]
    fn durations_take_a_whole_number_and_a_unit() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
    }

    #[test]
    fn durations_without_a_known_unit_are_refused() {
        assert!(parse_duration("30").unwrap_err().contains("no unit"));
        assert!(parse_duration("3d").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("s").unwrap_err().contains("whole number"));
        assert!(parse_duration("1.5s").is_err());
    }
}
