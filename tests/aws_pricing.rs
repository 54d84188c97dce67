//! Live prices through the real SDK: recorded-shape HTTP responses replayed
//! with aws-smithy's `StaticReplayClient` (moto has no Pricing API), a
//! closed loopback port for an unreachable API, and moto for the spot price
//! history's zone-name mapping. The embedded catalog is the base throughout.

use crate::support;

use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::config::{Credentials, SharedCredentialsProvider};
use aws_smithy_http_client::test_util::{ReplayEvent, StaticReplayClient};
use aws_smithy_types::body::SdkBody;
use quartermaster::catalog::{CapacityType, Catalog, PriceSource};
use quartermaster::cloud::aws::pricing::{refresh_catalog, PriceClient, Refresher, Source};
use quartermaster::metrics::{Metrics, PricingLabels};
use std::sync::Arc;
use std::time::Duration;
use support::moto::Moto;

const REGION: &str = "us-east-1";
const TYPE: &str = "g4dn.12xlarge";

fn now() -> chrono::DateTime<chrono::Utc> {
    use chrono::TimeZone;
    chrono::Utc.with_ymd_and_hms(2022, 6, 1, 0, 0, 0).unwrap()
}

fn embedded() -> Catalog {
    Catalog::embedded().expect("the embedded catalog loads")
}

/// SDK configuration with a loopback endpoint, static test credentials, no
/// retries (so one 5xx is one failure) and the given HTTP client.
fn config(http: impl aws_smithy_runtime_api::client::http::HttpClient + 'static) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .endpoint_url("http://127.0.0.1:9")
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "testing", "testing", None, None, "test",
        )))
        .retry_config(RetryConfig::disabled())
        .http_client(http)
        .build()
}

/// A `GetProducts` price list entry for `TYPE` in `REGION` at `usd` per
/// hour, in the API's shape (attributes shortened).
fn price_list_entry(usd: &str) -> String {
    serde_json::json!({
        "product": {
            "productFamily": "Compute Instance",
            "attributes": {
                "instanceType": TYPE, "regionCode": REGION, "operatingSystem": "Linux",
                "tenancy": "Shared", "preInstalledSw": "NA", "capacitystatus": "Used",
                "licenseModel": "No License required", "marketoption": "OnDemand",
                "usagetype": "BoxUsage:g4dn.12xlarge", "operation": "RunInstances",
                "servicecode": "AmazonEC2", "location": "US East (N. Virginia)",
                "vcpu": "48", "memory": "192 GiB", "gpu": "4"
            },
            "sku": "5Q2CQ3VKSXSHCPDN"
        },
        "serviceCode": "AmazonEC2",
        "terms": {"OnDemand": {"5Q2CQ3VKSXSHCPDN.JRTCKXETXF": {
            "priceDimensions": {"5Q2CQ3VKSXSHCPDN.JRTCKXETXF.6YS6EN2CT7": {
                "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                "description": format!("${usd} per On Demand Linux g4dn.12xlarge Instance Hour"),
                "rateCode": "5Q2CQ3VKSXSHCPDN.JRTCKXETXF.6YS6EN2CT7",
                "pricePerUnit": {"USD": usd}
            }},
            "sku": "5Q2CQ3VKSXSHCPDN", "effectiveDate": "2022-05-01T00:00:00Z",
            "offerTermCode": "JRTCKXETXF", "termAttributes": {}
        }}},
        "version": "20220525182204",
        "publicationDate": "2022-05-25T18:22:04Z"
    })
    .to_string()
}

fn response(status: u16, content_type: &str, body: String) -> http::Response<SdkBody> {
    http::Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(SdkBody::from(body))
        .unwrap()
}

fn request(uri: &str) -> http::Request<SdkBody> {
    http::Request::builder()
        .uri(uri)
        .body(SdkBody::empty())
        .unwrap()
}

fn get_products_ok(usd: &str) -> ReplayEvent {
    let body = serde_json::json!({
        "FormatVersion": "aws_v1",
        "PriceList": [price_list_entry(usd)]
    });
    ReplayEvent::new(
        request("http://127.0.0.1:9/"),
        response(200, "application/x-amz-json-1.1", body.to_string()),
    )
}

/// Real `spot-price-history-sample-2022-05-31.tsv` records of `TYPE` in
/// `REGION` (zone ID, price, timestamp), plus an older, superseded one.
const SPOT_RECORDS: [(&str, &str, &str); 3] = [
    ("use1-az1", "1.447200", "2022-05-31T20:44:19.000Z"),
    ("use1-az4", "1.302700", "2022-05-31T23:45:55.000Z"),
    ("use1-az4", "9.999900", "2022-05-30T23:45:55.000Z"),
];

fn spot_history_ok() -> ReplayEvent {
    let items: String = SPOT_RECORDS
        .iter()
        .map(|(zone_id, price, at)| {
            let zone_name = match *zone_id {
                "use1-az1" => "us-east-1c",
                _ => "us-east-1a",
            };
            format!(
                "<item><instanceType>{TYPE}</instanceType><productDescription>Linux/UNIX</productDescription>\
                 <spotPrice>{price}</spotPrice><timestamp>{at}</timestamp>\
                 <availabilityZone>{zone_name}</availabilityZone><availabilityZoneId>{zone_id}</availabilityZoneId></item>"
            )
        })
        .collect();
    let body = format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeSpotPriceHistoryResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>59dbff89-35bd-4eac-99ed-be587EXAMPLE</requestId>
    <spotPriceHistorySet>{items}</spotPriceHistorySet>
</DescribeSpotPriceHistoryResponse>"#
    );
    ReplayEvent::new(
        request("http://127.0.0.1:9/"),
        response(200, "text/xml;charset=UTF-8", body),
    )
}

fn get_products_unavailable() -> ReplayEvent {
    let body = r#"{"__type":"ServiceUnavailableException","Message":"Service is unavailable"}"#;
    ReplayEvent::new(
        request("http://127.0.0.1:9/"),
        response(503, "application/x-amz-json-1.1", body.into()),
    )
}

/// `DescribeAvailabilityZones` naming use1-az4 `us-east-1a`.
fn zone_names_ok() -> ReplayEvent {
    let body = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeAvailabilityZonesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>6e2b1d8c-0000-4000-8000-000000000001</requestId><availabilityZoneInfo><item><zoneName>us-east-1a</zoneName><zoneId>use1-az4</zoneId><regionName>us-east-1</regionName><zoneState>available</zoneState></item></availabilityZoneInfo></DescribeAvailabilityZonesResponse>"#;
    ReplayEvent::new(
        request("http://127.0.0.1:9/"),
        response(200, "text/xml;charset=UTF-8", body.into()),
    )
}

fn spot_history_unavailable() -> ReplayEvent {
    let body = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>Unavailable</Code><Message>The server is overloaded</Message></Error></Errors><RequestID>6e2b1d8c-0000-4000-8000-000000000000</RequestID></Response>"#;
    ReplayEvent::new(
        request("http://127.0.0.1:9/"),
        response(503, "text/xml;charset=UTF-8", body.into()),
    )
}

fn on_demand(c: &Catalog) -> Option<f64> {
    c.on_demand_price(REGION, TYPE)
}

fn spot(c: &Catalog, zone: &str) -> (f64, PriceSource) {
    let o = c
        .offerings_of(REGION, TYPE)
        .find(|o| o.zone_id == zone && o.capacity_type == CapacityType::Spot)
        .unwrap_or_else(|| panic!("a spot offering of {TYPE} in {zone}"));
    (o.price_per_hour, o.price_source)
}

fn fallback(metrics: &Metrics, source: Source) -> i64 {
    metrics
        .pricing_fallback
        .get_or_create(&PricingLabels {
            source: source.as_str().into(),
        })
        .get()
}

#[tokio::test]
async fn get_products_price_and_latest_spot_price_per_zone_land_in_the_catalog() {
    let base = embedded();
    assert_ne!(
        on_demand(&base),
        Some(3.5),
        "the test needs a price that changes"
    );
    let http = StaticReplayClient::new(vec![get_products_ok("3.5000000000"), spot_history_ok()]);
    let client = PriceClient::new(&config(http.clone()), REGION);
    let (catalog, report) = refresh_catalog(&client, &base, now()).await;
    assert!(report.failed.is_empty(), "{report}");

    assert_eq!(on_demand(&catalog), Some(3.5));
    assert_eq!(
        spot(&catalog, "use1-az1"),
        (1.4472, PriceSource::SpotObserved)
    );
    // The newest of the two use1-az4 records wins.
    assert_eq!(
        spot(&catalog, "use1-az4"),
        (1.3027, PriceSource::SpotObserved)
    );
    // Every zone of the type is sold on demand at the new price.
    let zones = base
        .offerings_of(REGION, TYPE)
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
        .count();
    assert_eq!(report.on_demand_changed, zones);
    // Other regions are untouched.
    let elsewhere = |c: &Catalog| -> Vec<_> {
        c.offerings()
            .iter()
            .filter(|o| o.region != REGION)
            .cloned()
            .collect()
    };
    assert_eq!(elsewhere(&catalog), elsewhere(&base));

    // The requests asked for what the module promises.
    let bodies: Vec<String> = http
        .actual_requests()
        .map(|r| String::from_utf8_lossy(r.body().bytes().unwrap_or_default()).into_owned())
        .collect();
    assert_eq!(bodies.len(), 2);
    for needle in [
        r#""ServiceCode":"AmazonEC2""#,
        r#""Field":"regionCode","Value":"us-east-1""#,
        r#""Field":"operatingSystem","Value":"Linux""#,
        r#""Field":"tenancy","Value":"Shared""#,
        r#""Field":"preInstalledSw","Value":"NA""#,
        r#""Field":"capacitystatus","Value":"Used""#,
        r#""Field":"licenseModel","Value":"No License required""#,
    ] {
        assert!(bodies[0].contains(needle), "{needle} not in {}", bodies[0]);
    }
    assert!(
        bodies[1].contains("Action=DescribeSpotPriceHistory"),
        "{}",
        bodies[1]
    );
    assert!(
        bodies[1].contains("ProductDescription.1=Linux%2FUNIX"),
        "{}",
        bodies[1]
    );
}

#[tokio::test]
async fn failing_apis_keep_the_embedded_prices_and_raise_the_fallback_gauge() {
    let base = Arc::new(embedded());
    let http =
        StaticReplayClient::new(vec![get_products_unavailable(), spot_history_unavailable()]);
    let client = PriceClient::new(&config(http), REGION);
    let metrics = Metrics::unregistered();
    let mut refresher = Refresher::new(client, base.clone());
    let (catalog, report) = refresher.refresh(&metrics, now()).await;
    assert!(
        report.failed(Source::OnDemand) && report.failed(Source::Spot),
        "{report}"
    );
    assert_eq!(catalog.offerings(), base.offerings());
    assert_eq!(fallback(&metrics, Source::OnDemand), 1);
    assert_eq!(fallback(&metrics, Source::Spot), 1);
}

#[tokio::test]
async fn an_unreachable_endpoint_keeps_the_embedded_prices_and_raises_the_fallback_gauge() {
    // A loopback port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let config = SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .endpoint_url(format!("http://127.0.0.1:{port}"))
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            "testing", "testing", None, None, "test",
        )))
        .retry_config(RetryConfig::disabled())
        .http_client(quartermaster::cloud::aws::http_client())
        .build();
    let base = Arc::new(embedded());
    let metrics = Metrics::unregistered();
    let mut refresher = Refresher::new(PriceClient::new(&config, REGION), base.clone());
    let (catalog, report) = refresher.refresh(&metrics, now()).await;
    assert_eq!(report.failed.len(), 3, "{report}");
    assert!(report.failed(Source::ZoneNames), "{report}");
    assert_eq!(fallback(&metrics, Source::ZoneNames), 1);
    assert_eq!(
        catalog.zone_name(REGION, "use1-az4"),
        "us-east-1d",
        "the default rule until the account's names are known"
    );
    assert_eq!(catalog.offerings(), base.offerings());
    assert_eq!(fallback(&metrics, Source::OnDemand), 1);
    assert_eq!(fallback(&metrics, Source::Spot), 1);
}

#[tokio::test]
async fn after_a_success_a_failed_source_keeps_the_last_fetched_prices() {
    let http = StaticReplayClient::new(vec![
        get_products_ok("3.5000000000"),
        spot_history_ok(),
        zone_names_ok(),
        get_products_unavailable(),
        spot_history_ok(),
    ]);
    let metrics = Metrics::unregistered();
    let mut refresher = Refresher::new(
        PriceClient::new(&config(http), REGION),
        Arc::new(embedded()),
    );
    let (first, _) = refresher.refresh(&metrics, now()).await;
    assert_eq!(on_demand(&first), Some(3.5));
    assert_eq!(fallback(&metrics, Source::OnDemand), 0);
    assert_eq!(first.zone_name(REGION, "use1-az4"), "us-east-1a");
    assert_eq!(fallback(&metrics, Source::ZoneNames), 0);
    // The second round's zone names find no answer: the last ones stay.
    let (second, report) = refresher.refresh(&metrics, now()).await;
    assert!(
        report.failed(Source::OnDemand) && !report.failed(Source::Spot),
        "{report}"
    );
    assert!(report.failed(Source::ZoneNames), "{report}");
    assert_eq!(second.zone_name(REGION, "use1-az4"), "us-east-1a");
    assert_eq!(fallback(&metrics, Source::ZoneNames), 1);
    assert_eq!(
        on_demand(&second),
        Some(3.5),
        "the last fetched price is kept"
    );
    assert_eq!(fallback(&metrics, Source::OnDemand), 1);
    assert_eq!(fallback(&metrics, Source::Spot), 0);
}

#[tokio::test]
async fn the_refresher_publishes_on_the_watch_channel_and_stops_when_cancelled() {
    let http = StaticReplayClient::new(vec![get_products_ok("3.5000000000"), spot_history_ok()]);
    let base = Arc::new(embedded());
    let (tx, mut rx) = tokio::sync::watch::channel(base.clone());
    let metrics = Arc::new(Metrics::unregistered());
    let cancel = tokio_util::sync::CancellationToken::new();
    let refresher = Refresher::new(PriceClient::new(&config(http), REGION), base);
    let task = tokio::spawn({
        let (metrics, cancel) = (metrics.clone(), cancel.clone());
        async move {
            refresher
                .run(tx, &metrics, Duration::from_secs(3600), cancel)
                .await
        }
    });
    tokio::time::timeout(Duration::from_secs(10), rx.changed())
        .await
        .expect("a refreshed catalog within 10 s")
        .expect("the sender is alive");
    assert_eq!(on_demand(&rx.borrow_and_update()), Some(3.5));
    cancel.cancel();
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the refresher stops")
        .expect("no panic");
}

#[tokio::test]
async fn spot_history_from_moto_maps_zone_names_to_zone_ids() {
    // moto answers DescribeSpotPriceHistory with zone names only (and a
    // placeholder price), so the client must map them with
    // DescribeAvailabilityZones.
    let moto = Moto::start();
    let client = PriceClient::new(&moto.sdk_config(), REGION);
    let prices = client
        .spot_prices(&["g5.xlarge"], chrono::Utc::now())
        .await
        .expect("moto answers");
    let zones: Vec<&str> = prices
        .keys()
        .filter(|(t, _)| t == "g5.xlarge")
        .map(|(_, z)| z.as_str())
        .collect();
    assert!(!zones.is_empty(), "{prices:?}");
    assert!(zones.iter().all(|z| z.starts_with("use1-az")), "{zones:?}");
}

#[tokio::test]
async fn an_account_whose_zone_names_differ_from_the_default_labels_its_nodes_with_its_own_names() {
    use quartermaster::api::NodePool;
    use quartermaster::catalog::default_zone_name;
    use quartermaster::cluster::{Operator, Pod, Requirement, Resources};
    use quartermaster::core::{Action, Config, Core, World};
    use quartermaster::labels as l;
    // moto's us-east-1 names its zones as ../shared/reference-data says
    // (us-east-1a is use1-az6), not by the default rule.
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../shared/reference-data/moto-az-name-to-id.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let account: std::collections::BTreeMap<String, String> =
        serde_json::from_value(reference[REGION].clone()).unwrap();
    let moto = Moto::start();
    let metrics = Metrics::unregistered();
    let base = Arc::new(embedded());
    let mut refresher = Refresher::new(PriceClient::new(&moto.sdk_config(), REGION), base.clone());
    let (catalog, report) = refresher.refresh(&metrics, chrono::Utc::now()).await;
    assert!(!report.failed(Source::ZoneNames), "{report}");
    assert_eq!(fallback(&metrics, Source::ZoneNames), 0);
    for (name, id) in &account {
        assert_eq!(catalog.zone_name(REGION, id), *name, "{id}");
    }
    // A zone the account names otherwise than the default rule, where the
    // catalog sells the pod's type on demand.
    let (name, id) = account
        .iter()
        .find(|(name, id)| {
            default_zone_name(REGION, id).as_deref() != Some(name.as_str())
                && catalog
                    .offerings_of(REGION, "m7i.large")
                    .any(|o| &o.zone_id == *id && o.capacity_type == CapacityType::OnDemand)
        })
        .expect("moto shuffles us-east-1");
    let pool: NodePool = serde_json::from_value(serde_json::json!({
        "apiVersion": "quartermaster.dev/v1alpha1", "kind": "NodePool",
        "metadata": {"name": "general"},
        "spec": {"template": {"spec": {"requirements": [
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m7i.large"]}
        ]}}}
    }))
    .unwrap();
    // The pod selects the zone by the account's name.
    let mut pod = Pod::new("default/web", Resources::new().with("cpu", 500));
    pod.affinity.terms = vec![vec![Requirement::new(l::ZONE, Operator::In, &[name])]];
    let pools = [pool];
    let pending = [pod];
    let world = World {
        nodes_revision: 0,
        catalog: &catalog,
        region: REGION,
        pools: &pools,
        pending: &pending,
        nodes: &[],
        pdbs: &[],
    };
    // The batch window closes a second after the pod is first seen.
    let now = chrono::Utc::now();
    let mut core = Core::new(Config::default());
    core.decide(&world, now);
    let now = now + chrono::TimeDelta::seconds(2);
    let actions = core.decide(&world, now);
    let Some(Action::Launch(req)) = actions.iter().find(|a| matches!(a, Action::Launch(_))) else {
        panic!("no launch: {actions:?}")
    };
    assert_eq!(&req.offering.zone, id);
    let pods: Vec<&Pod> = pending.iter().collect();
    let claim =
        quartermaster::controller::executor::build_claim(req, &req.claim, &world, &pods, now)
            .unwrap();
    assert_eq!(claim.spec.zone, *id);
    assert_eq!(claim.spec.labels[l::ZONE], *name);
    assert_eq!(claim.spec.labels[l::ZONE_ID], *id);
}

/// A fake AWS endpoint on loopback for the `catalog refresh` binary:
/// `GetProducts` (JSON, by its `x-amz-target`) and
/// `DescribeSpotPriceHistory` (EC2 query) with the shapes above.
async fn fake_aws(headers: http::HeaderMap, body: String) -> axum::response::Response {
    use axum::response::IntoResponse;
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let reply = |event: ReplayEvent| {
        let r = event.response();
        let content_type = r
            .headers()
            .get("content-type")
            .unwrap_or_default()
            .to_string();
        let body = String::from_utf8_lossy(r.body().bytes().unwrap_or_default()).into_owned();
        ([(http::header::CONTENT_TYPE, content_type)], body).into_response()
    };
    if target == "AWSPriceListService.GetProducts" {
        reply(get_products_ok("3.5000000000"))
    } else if body.contains("Action=DescribeSpotPriceHistory") {
        reply(spot_history_ok())
    } else {
        (
            http::StatusCode::BAD_REQUEST,
            format!("unexpected request {target} {body}"),
        )
            .into_response()
    }
}

#[tokio::test]
async fn catalog_refresh_rewrites_one_regions_rows_in_the_import_layout_and_records_provenance() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(fake_aws);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let repo = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::temp_dir().join(support::moto::unique("qm-refresh"));
    std::fs::create_dir_all(&out).unwrap();
    let names = [
        "instance-types.json",
        "on-demand.csv",
        "spot-advisor.csv",
        "spot-prices.csv",
        "zones.csv",
        "README.md",
    ];
    for name in names {
        std::fs::copy(repo.join("pricing-data").join(name), out.join(name)).unwrap();
    }
    let before =
        |name: &str| std::fs::read_to_string(repo.join("pricing-data").join(name)).unwrap();
    let after = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();

    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_quartermaster"));
    command
        .args([
            "catalog",
            "refresh",
            "--region",
            REGION,
            "--endpoint-url",
            &endpoint,
            "--out",
        ])
        .arg(&out)
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env_remove("AWS_PROFILE")
        .env("AWS_CONFIG_FILE", out.join("no-aws-config"))
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            out.join("no-aws-credentials"),
        )
        .env("AWS_EC2_METADATA_DISABLED", "true");
    // On the blocking pool, so the fake endpoint keeps serving meanwhile.
    let run = tokio::task::spawn_blocking(move || command.output().expect("the binary runs"))
        .await
        .unwrap();
    assert!(
        run.status.success(),
        "{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );

    // The region's rows are exactly the live prices; every other row and
    // file is kept byte for byte, in the import's layout.
    let region_rows = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{REGION},")))
            .map(str::to_string)
            .collect()
    };
    let other_rows = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with(&format!("{REGION},")))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        region_rows(&after("on-demand.csv")),
        [format!("{REGION},{TYPE},3.5")]
    );
    assert_eq!(
        region_rows(&after("spot-prices.csv")),
        [
            format!("{REGION},use1-az1,{TYPE},1.4472,3.5"),
            format!("{REGION},use1-az4,{TYPE},1.3027,3.5"),
        ]
    );
    for name in ["on-demand.csv", "spot-prices.csv"] {
        assert_eq!(
            other_rows(&after(name)),
            other_rows(&before(name)),
            "{name}"
        );
        let text = after(name);
        let lines: Vec<&str> = text.lines().skip(1).collect();
        let mut sorted = lines.clone();
        sorted.sort();
        assert_eq!(lines, sorted, "{name} rows stay sorted");
    }
    for name in ["instance-types.json", "spot-advisor.csv", "zones.csv"] {
        assert_eq!(after(name), before(name), "{name}");
    }
    let readme = after("README.md");
    assert!(readme.starts_with(&before("README.md").trim_end().to_string()));
    assert!(readme.contains(&format!("| {REGION} | ")), "{readme}");
    assert!(readme.contains(" | 1 | 2 |"), "{readme}");

    // The rewritten files load, with the live prices observed.
    let files = quartermaster::catalog::PricingFiles::try_from_fn(|name| {
        std::fs::read_to_string(out.join(name))
    })
    .unwrap();
    let catalog = Catalog::from_pricing_files(&files).expect("the refreshed files load");
    assert_eq!(on_demand(&catalog), Some(3.5));
    assert_eq!(
        spot(&catalog, "use1-az1"),
        (1.4472, PriceSource::SpotObserved)
    );
    let _ = std::fs::remove_dir_all(&out);
}
