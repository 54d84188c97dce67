//! The two file sets the catalog reads, as text: the reference data
//! ([`ReferenceFiles`], the input of [`import`](super::import)) and our own
//! `pricing-data/` ([`PricingFiles`], the input of the embedded catalog);
//! their file names, the row shapes of `pricing-data/` and parsing with
//! file-and-line errors. Reading and writing files is the caller's job.

use super::{Error, Result};
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// The reference data files (`/work/shared/reference-data/` in development;
/// its README documents every field and source), one text per file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferenceFiles<S> {
    /// `instance-types.json`: DescribeInstanceTypes facts.
    pub instance_types: S,
    /// `on-demand-prices.json`: `{region: {type: usd_per_hour}}`.
    pub on_demand_prices: S,
    /// `spot-advisor.json`: the Spot Instance Advisor feed (subset).
    pub spot_advisor: S,
    /// `spot-prices-az-snapshot.csv`: per-zone spot prices, one point in time.
    pub spot_prices_snapshot: S,
    /// `instance-type-offerings-az-id.json`: `{region: {type: [zone_id]}}`.
    pub offerings: S,
}

impl ReferenceFiles<()> {
    /// File name of [`ReferenceFiles::instance_types`].
    pub const INSTANCE_TYPES: &'static str = "instance-types.json";
    /// File name of [`ReferenceFiles::on_demand_prices`].
    pub const ON_DEMAND_PRICES: &'static str = "on-demand-prices.json";
    /// File name of [`ReferenceFiles::spot_advisor`].
    pub const SPOT_ADVISOR: &'static str = "spot-advisor.json";
    /// File name of [`ReferenceFiles::spot_prices_snapshot`].
    pub const SPOT_PRICES_SNAPSHOT: &'static str = "spot-prices-az-snapshot.csv";
    /// File name of [`ReferenceFiles::offerings`].
    pub const OFFERINGS: &'static str = "instance-type-offerings-az-id.json";
}

impl<S> ReferenceFiles<S> {
    /// Builds the set by calling `read` with each file name, in field order.
    ///
    /// # Errors
    /// The first error `read` returns.
    pub fn try_from_fn<E>(mut read: impl FnMut(&'static str) -> Result<S, E>) -> Result<Self, E> {
        type N = ReferenceFiles<()>;
        Ok(ReferenceFiles {
            instance_types: read(N::INSTANCE_TYPES)?,
            on_demand_prices: read(N::ON_DEMAND_PRICES)?,
            spot_advisor: read(N::SPOT_ADVISOR)?,
            spot_prices_snapshot: read(N::SPOT_PRICES_SNAPSHOT)?,
            offerings: read(N::OFFERINGS)?,
        })
    }
}

/// The `pricing-data/` files, one text per file. `S` is `String` for the
/// output of [`import`](super::import::import) and `&'static str` for the
/// embedded copy ([`EMBEDDED`](super::EMBEDDED)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PricingFiles<S> {
    /// `instance-types.json`: a JSON array, one [`InstanceType`](super::InstanceType) per line.
    pub instance_types: S,
    /// `on-demand.csv`: `region,instance_type,usd_per_hour`.
    pub on_demand: S,
    /// `spot-advisor.csv`: `region,instance_type,savings_pct,interruption_bucket`.
    pub spot_advisor: S,
    /// `spot-prices.csv`:
    /// `region,zone_id,instance_type,usd_per_hour,on_demand_usd_at_snapshot`.
    pub spot_prices: S,
    /// `zones.csv`: `region,instance_type,zone_id`.
    pub zones: S,
}

impl PricingFiles<()> {
    /// File name of [`PricingFiles::instance_types`].
    pub const INSTANCE_TYPES: &'static str = "instance-types.json";
    /// File name of [`PricingFiles::on_demand`].
    pub const ON_DEMAND: &'static str = "on-demand.csv";
    /// File name of [`PricingFiles::spot_advisor`].
    pub const SPOT_ADVISOR: &'static str = "spot-advisor.csv";
    /// File name of [`PricingFiles::spot_prices`].
    pub const SPOT_PRICES: &'static str = "spot-prices.csv";
    /// File name of [`PricingFiles::zones`].
    pub const ZONES: &'static str = "zones.csv";
}

impl<S> PricingFiles<S> {
    /// Builds the set by calling `read` with each file name, in field order.
    ///
    /// # Errors
    /// The first error `read` returns.
    pub fn try_from_fn<E>(mut read: impl FnMut(&'static str) -> Result<S, E>) -> Result<Self, E> {
        type N = PricingFiles<()>;
        Ok(PricingFiles {
            instance_types: read(N::INSTANCE_TYPES)?,
            on_demand: read(N::ON_DEMAND)?,
            spot_advisor: read(N::SPOT_ADVISOR)?,
            spot_prices: read(N::SPOT_PRICES)?,
            zones: read(N::ZONES)?,
        })
    }
}

impl<S: AsRef<str>> PricingFiles<S> {
    /// `(file name, text)` for every file, in field order.
    pub fn files(&self) -> [(&'static str, &str); 5] {
        type N = PricingFiles<()>;
        [
            (N::INSTANCE_TYPES, self.instance_types.as_ref()),
            (N::ON_DEMAND, self.on_demand.as_ref()),
            (N::SPOT_ADVISOR, self.spot_advisor.as_ref()),
            (N::SPOT_PRICES, self.spot_prices.as_ref()),
            (N::ZONES, self.zones.as_ref()),
        ]
    }
}

/// A row of `on-demand.csv`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct OnDemandRow {
    pub region: String,
    pub instance_type: String,
    pub usd_per_hour: f64,
}

/// A row of `spot-advisor.csv` (Linux).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct SpotAdvisorRow {
    pub region: String,
    pub instance_type: String,
    pub savings_pct: i16,
    pub interruption_bucket: u8,
}

/// A row of `spot-prices.csv`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct SpotPriceRow {
    pub region: String,
    pub zone_id: String,
    pub instance_type: String,
    pub usd_per_hour: f64,
    pub on_demand_usd_at_snapshot: Option<f64>,
}

/// A row of `zones.csv`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct ZoneRow {
    pub region: String,
    pub instance_type: String,
    pub zone_id: String,
}

/// Header lines of the `pricing-data/` CSV files.
pub(crate) const ON_DEMAND_HEADER: &[&str] = &["region", "instance_type", "usd_per_hour"];
pub(crate) const SPOT_ADVISOR_HEADER: &[&str] = &[
    "region",
    "instance_type",
    "savings_pct",
    "interruption_bucket",
];
pub(crate) const SPOT_PRICES_HEADER: &[&str] = &[
    "region",
    "zone_id",
    "instance_type",
    "usd_per_hour",
    "on_demand_usd_at_snapshot",
];
pub(crate) const ZONES_HEADER: &[&str] = &["region", "instance_type", "zone_id"];

/// Parses a CSV text whose header must be exactly `header`, into rows with
/// their 1-based line numbers.
pub(crate) fn parse_csv<T: DeserializeOwned>(
    file: &'static str,
    text: &str,
    header: &[&str],
) -> Result<Vec<(u64, T)>> {
    let mut reader = csv::ReaderBuilder::new().from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|e| csv_error(file, &e, header))?
        .clone();
    if headers.iter().ne(header.iter().copied()) {
        return Err(Error::Parse {
            file,
            line: 1,
            message: format!(
                "expected header `{}`, found `{}`",
                header.join(","),
                headers.iter().collect::<Vec<_>>().join(",")
            ),
        });
    }
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| csv_error(file, &e, header))?;
        let row = record
            .deserialize(Some(&headers))
            .map_err(|e| csv_error(file, &e, header))?;
        let line = record.position().map_or(0, |p| p.line());
        rows.push((line, row));
    }
    Ok(rows)
}

/// A csv error as an [`Error::Parse`], naming the column where known.
fn csv_error(file: &'static str, e: &csv::Error, header: &[&str]) -> Error {
    let line = e.position().map_or(0, |p| p.line());
    let message = match e.kind() {
        csv::ErrorKind::Deserialize { err, .. } => match err.field() {
            Some(i) => format!(
                "column {}: {}",
                header.get(i as usize).copied().unwrap_or("?"),
                err.kind()
            ),
            None => err.kind().to_string(),
        },
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("expected {expected_len} columns, found {len}"),
        _ => e.to_string(),
    };
    Error::Parse {
        file,
        line,
        message,
    }
}

/// Parses a JSON text, reporting the line of a syntax or shape error.
pub(crate) fn parse_json<T: DeserializeOwned>(file: &'static str, text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| Error::Parse {
        file,
        line: e.line() as u64,
        message: e.to_string(),
    })
}

/// Writes CSV text: a header and rows of already formatted fields.
pub(crate) fn write_csv(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut writer = csv::WriterBuilder::new().from_writer(Vec::new());
    let mut write = |fields: &[&str]| {
        writer
            .write_record(fields)
            .expect("writing CSV to memory cannot fail");
    };
    write(header);
    for row in rows {
        let fields: Vec<&str> = row.iter().map(String::as_str).collect();
        write(&fields);
    }
    let bytes = writer
        .into_inner()
        .expect("flushing CSV to memory cannot fail");
    String::from_utf8(bytes).expect("CSV of UTF-8 fields is UTF-8")
}

/// A price as written to `pricing-data/`: the shortest decimal that reads
/// back as the same `f64` (no exponent, no trailing zeros).
pub(crate) fn format_price(usd: f64) -> String {
    format!("{usd}")
}

/// Checks that a price is a positive, finite number.
pub(crate) fn check_price(
    file: &'static str,
    entry: impl FnOnce() -> String,
    usd: f64,
) -> Result<()> {
    if usd.is_finite() && usd > 0.0 {
        Ok(())
    } else {
        Err(Error::Invalid {
            file,
            entry: entry(),
            message: format!("price {usd} is not a positive number"),
        })
    }
}
