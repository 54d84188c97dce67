//! Live prices: on-demand from the Pricing API (`GetProducts`), spot per
//! zone from `DescribeSpotPriceHistory`; [`refresh_catalog`] applies them to
//! a catalog, [`Refresher`] does so every few hours, with the account's
//! zone names (`DescribeAvailabilityZones`, the names nodes are labelled
//! with), and publishes the result on a `watch` channel, falling back to
//! the previous (at first the embedded) prices and names when an API
//! fails, with a warning and the `pricing_fallback{source}` gauge at 1. See
//! `docs/aws-prices-and-notices.md`.
//! The rules for applying prices are in [`apply`]; parsing the price list in
//! [`price_list`].

pub mod apply;
pub mod price_list;

pub use apply::{apply_prices, LivePrices, OnDemandPrices, RefreshReport, Source, SpotPrices};

use crate::catalog::Catalog;
use crate::core::Time;
use crate::metrics::{Metrics, PricingLabels};
use aws_config::{Region, SdkConfig};
use aws_sdk_pricing::types::{Filter, FilterType};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// What can go wrong while fetching prices. Every variant is retryable:
/// the next refresh tries again.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `GetProducts` failed.
    #[error("GetProducts for {region} failed: {message}")]
    GetProducts {
        /// The region whose prices were asked for.
        region: String,
        /// The SDK's error with its context.
        message: String,
    },
    /// `GetProducts` answered without a single usable price (the filters
    /// matched nothing, or every document was unreadable).
    #[error(
        "GetProducts for {region} returned no usable price ({unreadable} unreadable documents)"
    )]
    NoOnDemandPrices {
        /// The region.
        region: String,
        /// Documents that did not parse.
        unreadable: usize,
    },
    /// `DescribeSpotPriceHistory` or `DescribeAvailabilityZones` failed.
    #[error("{operation} in {region} failed: {message}")]
    Ec2 {
        /// The EC2 operation.
        operation: &'static str,
        /// The region.
        region: String,
        /// The SDK's error with its context.
        message: String,
    },
}

/// The module's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The product description of Linux spot prices.
pub const LINUX_SPOT: &str = "Linux/UNIX";

/// The Pricing API endpoint region for prices of `region`: the API is
/// served from us-east-1, eu-central-1 and ap-south-1 (and cn-northwest-1
/// for China); the nearest one is used.
pub fn pricing_api_region(region: &str) -> &'static str {
    if region.starts_with("ap-") {
        "ap-south-1"
    } else if region.starts_with("eu-") || region.starts_with("me-") || region.starts_with("af-") {
        "eu-central-1"
    } else if region.starts_with("cn-") {
        "cn-northwest-1"
    } else {
        "us-east-1"
    }
}

/// Fetches the live prices of one region.
#[derive(Debug, Clone)]
pub struct PriceClient {
    pricing: aws_sdk_pricing::Client,
    ec2: aws_sdk_ec2::Client,
    region: String,
}

impl PriceClient {
    /// Clients for `region` from `config`: EC2 in `region`, the Pricing
    /// API in [`pricing_api_region`] (an endpoint URL set in `config`, as in
    /// tests, is kept for both).
    pub fn new(config: &SdkConfig, region: &str) -> PriceClient {
        let pricing = aws_sdk_pricing::config::Builder::from(config)
            .region(Region::new(pricing_api_region(region)))
            .build();
        let ec2 = aws_sdk_ec2::config::Builder::from(config)
            .region(Region::new(region.to_string()))
            .build();
        PriceClient {
            pricing: aws_sdk_pricing::Client::from_conf(pricing),
            ec2: aws_sdk_ec2::Client::from_conf(ec2),
            region: region.to_string(),
        }
    }

    /// The region whose prices this client fetches.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// On-demand USD per hour of `types` in the region: `GetProducts` for
    /// AmazonEC2 with the filters regionCode, operatingSystem Linux, tenancy
    /// Shared, preInstalledSw NA, capacitystatus Used, licenseModel No
    /// License required and marketoption OnDemand, the instance types as an
    /// `ANY_OF` filter, every page. Unreadable documents are skipped (with a
    /// warning); when a type is listed twice the lower price is kept.
    ///
    /// # Errors
    /// [`Error::GetProducts`] when a request fails;
    /// [`Error::NoOnDemandPrices`] when nothing usable came back.
    pub async fn on_demand_prices(&self, types: &[&str]) -> Result<OnDemandPrices> {
        let term = |field: &str, value: &str| {
            Filter::builder()
                .r#type(FilterType::TermMatch)
                .field(field)
                .value(value)
                .build()
                .expect("field, type and value are set")
        };
        let mut request = self
            .pricing
            .get_products()
            .service_code("AmazonEC2")
            .format_version("aws_v1")
            .filters(term("regionCode", &self.region))
            .filters(term("operatingSystem", "Linux"))
            .filters(term("tenancy", "Shared"))
            .filters(term("preInstalledSw", "NA"))
            .filters(term("capacitystatus", "Used"))
            .filters(term("licenseModel", "No License required"))
            .filters(term("marketoption", "OnDemand"));
        if !types.is_empty() {
            let any_of = Filter::builder()
                .r#type(FilterType::AnyOf)
                .field("instanceType")
                .value(types.join(","))
                .build()
                .expect("field, type and value are set");
            request = request.filters(any_of);
        }
        let mut pages = request.into_paginator().items().send();
        let mut prices = OnDemandPrices::new();
        let mut unreadable = 0;
        while let Some(document) = pages.next().await {
            let document = document.map_err(|e| Error::GetProducts {
                region: self.region.clone(),
                message: aws_sdk_pricing::error::DisplayErrorContext(&e).to_string(),
            })?;
            match price_list::parse_document(&document) {
                Ok(p) if p.region == self.region => {
                    let entry = prices.entry(p.instance_type).or_insert(p.usd_per_hour);
                    *entry = entry.min(p.usd_per_hour);
                }
                Ok(p) => {
                    tracing::warn!(region = %p.region, instance_type = %p.instance_type, "price list document of another region; skipped");
                }
                Err(e) => {
                    unreadable += 1;
                    tracing::warn!(error = %e, "unreadable price list document; skipped");
                }
            }
        }
        if prices.is_empty() {
            return Err(Error::NoOnDemandPrices {
                region: self.region.clone(),
                unreadable,
            });
        }
        Ok(prices)
    }

    /// The latest Linux/UNIX spot price of `types` per zone ID, as of `now`:
    /// `DescribeSpotPriceHistory` from `now` (which returns the price in
    /// effect then), every page, keeping the newest record per type and
    /// zone. Records without a zone ID are mapped from their zone name with
    /// `DescribeAvailabilityZones`; unparseable prices are skipped.
    ///
    /// # Errors
    /// [`Error::Ec2`] when a request fails.
    pub async fn spot_prices(&self, types: &[&str], now: Time) -> Result<SpotPrices> {
        let ec2_error = |operation, message: String| Error::Ec2 {
            operation,
            region: self.region.clone(),
            message,
        };
        let mut pages = self
            .ec2
            .describe_spot_price_history()
            .product_descriptions(LINUX_SPOT)
            .set_instance_types((!types.is_empty()).then(|| {
                types
                    .iter()
                    .map(|t| aws_sdk_ec2::types::InstanceType::from(*t))
                    .collect()
            }))
            .start_time(aws_smithy_types::DateTime::from_secs(now.timestamp()))
            .into_paginator()
            .items()
            .send();
        let mut latest: BTreeMap<(String, String), (i64, f64)> = BTreeMap::new();
        let mut zone_ids: Option<HashMap<String, String>> = None;
        while let Some(record) = pages.next().await {
            let record = record.map_err(|e| {
                ec2_error(
                    "DescribeSpotPriceHistory",
                    aws_sdk_ec2::error::DisplayErrorContext(&e).to_string(),
                )
            })?;
            let (Some(name), Some(price)) = (record.instance_type(), record.spot_price()) else {
                continue;
            };
            let Some(usd) = price
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|p| p.is_finite() && *p > 0.0)
            else {
                tracing::warn!(instance_type = %name, price, "unreadable spot price; skipped");
                continue;
            };
            let zone = match (record.availability_zone_id(), record.availability_zone()) {
                (Some(id), _) => id.to_string(),
                (None, Some(zone_name)) => {
                    if zone_ids.is_none() {
                        zone_ids = Some(self.zone_ids().await?);
                    }
                    match zone_ids.as_ref().and_then(|m| m.get(zone_name)) {
                        Some(id) => id.clone(),
                        None => {
                            tracing::warn!(zone = %zone_name, "spot price for an unknown zone; skipped");
                            continue;
                        }
                    }
                }
                (None, None) => continue,
            };
            let at = record.timestamp().map_or(i64::MIN, |t| t.secs());
            let key = (name.as_str().to_string(), zone);
            match latest.get(&key) {
                Some(&(seen, _)) if seen >= at => {}
                _ => {
                    latest.insert(key, (at, usd));
                }
            }
        }
        Ok(latest.into_iter().map(|(k, (_, usd))| (k, usd)).collect())
    }

    /// Zone name -> zone ID in the region (`DescribeAvailabilityZones`).
    async fn zone_ids(&self) -> Result<HashMap<String, String>> {
        Ok(self.zone_names().await?.into_iter().collect())
    }

    /// The account's (zone name, zone ID) pairs in the region, as
    /// `DescribeAvailabilityZones` lists them (zones not opted in
    /// included: a zone's name does not depend on it).
    ///
    /// # Errors
    /// [`Error::Ec2`] when the request fails.
    pub async fn zone_names(&self) -> Result<Vec<(String, String)>> {
        let out = self
            .ec2
            .describe_availability_zones()
            .all_availability_zones(true)
            .send()
            .await
            .map_err(|e| Error::Ec2 {
                operation: "DescribeAvailabilityZones",
                region: self.region.clone(),
                message: aws_sdk_ec2::error::DisplayErrorContext(&e).to_string(),
            })?;
        Ok(out
            .availability_zones()
            .iter()
            .filter(|z| z.region_name().is_none_or(|r| r == self.region))
            .filter_map(|z| Some((z.zone_name()?.to_string(), z.zone_id()?.to_string())))
            .collect())
    }

    /// Both sources for the types of `base`, each `None` on failure (with
    /// the failure in the returned list).
    pub async fn fetch(&self, base: &Catalog, now: Time) -> (LivePrices, Vec<(Source, String)>) {
        let names: Vec<&str> = base.instance_types().map(|t| t.name.as_str()).collect();
        let mut failed = Vec::new();
        let on_demand = self
            .on_demand_prices(&names)
            .await
            .map_err(|e| failed.push((Source::OnDemand, e.to_string())))
            .ok();
        let spot = self
            .spot_prices(&names, now)
            .await
            .map_err(|e| failed.push((Source::Spot, e.to_string())))
            .ok();
        (LivePrices { on_demand, spot }, failed)
    }
}

/// `base` with the live prices of the client's region applied (see
/// [`apply`]), and a report of what changed and which sources failed (their
/// base prices are kept).
pub async fn refresh_catalog(
    client: &PriceClient,
    base: &Catalog,
    now: Time,
) -> (Catalog, RefreshReport) {
    let (live, failed) = client.fetch(base, now).await;
    let (catalog, mut report) = apply_prices(base, client.region(), &live);
    report.failed = failed;
    (catalog, report)
}

/// Sets `pricing_fallback{source}`: 1 while `source` is not live.
fn set_fallback(metrics: &Metrics, source: Source, fallback: bool) {
    metrics
        .pricing_fallback
        .get_or_create(&PricingLabels {
            source: source.as_str().to_string(),
        })
        .set(i64::from(fallback));
}

/// Refreshes prices and the account's zone names on an interval,
/// remembering the last good answer of each source so that a failed source
/// falls back to it (or, before any success, to the base catalog's: the
/// embedded prices, and zone names by the default rule).
#[derive(Debug)]
pub struct Refresher {
    client: PriceClient,
    base: Arc<Catalog>,
    last: LivePrices,
    last_zone_names: Option<Vec<(String, String)>>,
}

impl Refresher {
    /// A refresher of `client`'s region over `base` (usually the embedded
    /// catalog).
    pub fn new(client: PriceClient, base: Arc<Catalog>) -> Refresher {
        Refresher {
            client,
            base,
            last: LivePrices::default(),
            last_zone_names: None,
        }
    }

    /// One refresh: fetches both price sources and the zone names, keeps
    /// the last good answer of a failed one (logging a warning and setting
    /// its fallback gauge to 1; a source that succeeds gets 0), and returns
    /// the refreshed catalog.
    pub async fn refresh(&mut self, metrics: &Metrics, now: Time) -> (Arc<Catalog>, RefreshReport) {
        let (live, mut failed) = self.client.fetch(&self.base, now).await;
        let zone_names = self
            .client
            .zone_names()
            .await
            .map_err(|e| failed.push((Source::ZoneNames, e.to_string())))
            .ok();
        for (source, fresh) in [
            (Source::OnDemand, live.on_demand.is_some()),
            (Source::Spot, live.spot.is_some()),
            (Source::ZoneNames, zone_names.is_some()),
        ] {
            set_fallback(metrics, source, !fresh);
        }
        if let Some(p) = live.on_demand {
            self.last.on_demand = Some(p);
        }
        if let Some(p) = live.spot {
            self.last.spot = Some(p);
        }
        if let Some(z) = zone_names {
            self.last_zone_names = Some(z);
        }
        for (source, reason) in &failed {
            let (kept, what, fallback) = match source {
                Source::OnDemand => (self.last.on_demand.is_some(), "prices", "embedded"),
                Source::Spot => (self.last.spot.is_some(), "prices", "embedded"),
                Source::ZoneNames => (self.last_zone_names.is_some(), "names", "default-rule"),
            };
            tracing::warn!(
                region = %self.client.region(),
                %source,
                error = %reason,
                "{source} unavailable; keeping the {} {what}",
                if kept { "last fetched" } else { fallback }
            );
        }
        let region = self.client.region();
        let (mut catalog, mut report) = apply_prices(&self.base, region, &self.last);
        if let Some(pairs) = &self.last_zone_names {
            let names = catalog
                .zone_names()
                .clone()
                .with_region(region, pairs.iter().cloned());
            catalog = catalog.with_zone_names(names);
        }
        report.failed = failed;
        tracing::info!(%report, "prices refreshed");
        (Arc::new(catalog), report)
    }

    /// Refreshes at once and then every `interval`, publishing each result
    /// on `catalog`, until `cancel` fires.
    pub async fn run(
        mut self,
        catalog: watch::Sender<Arc<Catalog>>,
        metrics: &Metrics,
        interval: Duration,
        cancel: CancellationToken,
    ) {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let refreshed = tokio::select! {
                () = cancel.cancelled() => return,
                r = self.refresh(metrics, chrono::Utc::now()) => r,
            };
            catalog.send_replace(refreshed.0);
        }
    }
}

/// The default refresh interval: prices move slowly, and the Pricing API
/// is rate-limited.
pub const DEFAULT_REFRESH_INTERVAL: Duration = Duration::from_secs(6 * 3600);

/// What [`refresh_pricing_files`] wrote for the region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilesRefresh {
    /// `on-demand.csv` rows of the region.
    pub on_demand_rows: usize,
    /// `spot-prices.csv` rows of the region.
    pub spot_rows: usize,
}

/// Errors of [`refresh_pricing_files`].
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// An API failed: nothing is rewritten from partial data.
    #[error(transparent)]
    Fetch(#[from] Error),
    /// The files given, or the rewritten ones, do not load.
    #[error(transparent)]
    Catalog(#[from] crate::catalog::Error),
}

/// The `pricing-data/` files with the client's region rewritten from both
/// APIs (see [`apply::rewrite_region`]) and how many rows the region now has;
/// what `quartermaster catalog refresh` writes.
///
/// # Errors
/// [`FilesError::Fetch`] when either API fails (the command must not write
/// half-refreshed data); [`FilesError::Catalog`] when `files` do not load or
/// the result would not.
pub async fn refresh_pricing_files<S: AsRef<str>>(
    client: &PriceClient,
    files: &crate::catalog::PricingFiles<S>,
    now: Time,
) -> Result<(crate::catalog::PricingFiles<String>, FilesRefresh), FilesError> {
    let base = Catalog::from_pricing_files(files)?;
    let names: Vec<&str> = base.instance_types().map(|t| t.name.as_str()).collect();
    let on_demand = client.on_demand_prices(&names).await?;
    let spot = client.spot_prices(&names, now).await?;
    let known = |name: &str| base.instance_type(name).is_some();
    let counts = FilesRefresh {
        on_demand_rows: on_demand.keys().filter(|n| known(n)).count(),
        spot_rows: spot.keys().filter(|(n, _)| known(n)).count(),
    };
    let out = apply::rewrite_region(files, client.region(), &on_demand, &spot)?;
    Ok((out, counts))
}
