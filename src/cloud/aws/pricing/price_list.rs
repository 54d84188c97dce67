//! Parsing of the Pricing API's price list documents: each `GetProducts`
//! result is a JSON text with the product's attributes and its terms. Pure.
//!
//! A document, shortened:
//! ```json
//! {"product": {"productFamily": "Compute Instance",
//!              "attributes": {"instanceType": "p4d.24xlarge", "regionCode": "us-east-1",
//!                             "operatingSystem": "Linux", "tenancy": "Shared", ...},
//!              "sku": "..."},
//!  "serviceCode": "AmazonEC2",
//!  "terms": {"OnDemand": {"SKU.OFFER": {"priceDimensions": {"SKU.OFFER.RATE": {
//!              "unit": "Hrs", "pricePerUnit": {"USD": "21.9576000000"}, ...}}, ...}},
//!            "Reserved": {...}}}
//! ```

use serde::Deserialize;
use std::collections::BTreeMap;

/// One on-demand price read from a price list document.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedPrice {
    /// e.g. `p4d.24xlarge`.
    pub instance_type: String,
    /// e.g. `us-east-1`.
    pub region: String,
    /// USD per instance-hour.
    pub usd_per_hour: f64,
}

/// Why a document could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Not JSON of the price list shape.
    #[error("price list document does not parse: {0}")]
    Shape(String),
    /// The product has no on-demand USD-per-hour price (or a non-positive
    /// one).
    #[error("price list document for {0} has no positive on-demand USD per hour price")]
    NoHourlyPrice(String),
}

#[derive(Deserialize)]
struct Document {
    product: Product,
    #[serde(default)]
    terms: Terms,
}

#[derive(Deserialize)]
struct Product {
    attributes: Attributes,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Attributes {
    instance_type: String,
    region_code: String,
}

#[derive(Deserialize, Default)]
struct Terms {
    #[serde(rename = "OnDemand", default)]
    on_demand: BTreeMap<String, Term>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Term {
    price_dimensions: BTreeMap<String, Dimension>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Dimension {
    unit: String,
    price_per_unit: BTreeMap<String, String>,
}

/// The on-demand hourly USD price of one price list document: the first
/// `OnDemand` term's dimension with unit `Hrs` and a positive `USD` price.
///
/// # Errors
/// [`Error::Shape`] when the document lacks the product attributes
/// (`instanceType`, `regionCode`) or is not JSON; [`Error::NoHourlyPrice`]
/// when it has no positive hourly USD on-demand price.
pub fn parse_document(text: &str) -> Result<ListedPrice, Error> {
    let doc: Document = serde_json::from_str(text).map_err(|e| Error::Shape(e.to_string()))?;
    let attributes = doc.product.attributes;
    let usd = doc
        .terms
        .on_demand
        .values()
        .flat_map(|t| t.price_dimensions.values())
        .filter(|d| d.unit == "Hrs")
        .filter_map(|d| d.price_per_unit.get("USD"))
        .filter_map(|usd| usd.trim().parse::<f64>().ok())
        .find(|usd| usd.is_finite() && *usd > 0.0)
        .ok_or_else(|| Error::NoHourlyPrice(attributes.instance_type.clone()))?;
    Ok(ListedPrice {
        instance_type: attributes.instance_type,
        region: attributes.region_code,
        usd_per_hour: usd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `GetProducts` price list entry as the API returns it (shortened
    /// attribute list, real field names and number format).
    const P4D: &str = r#"{"product":{"productFamily":"Compute Instance","attributes":{"enhancedNetworkingSupported":"Yes","intelTurboAvailable":"Yes","memory":"1152 GiB","dedicatedEbsThroughput":"19000 Mbps","vcpu":"96","classicnetworkingsupport":"false","capacitystatus":"Used","locationType":"AWS Region","storage":"8 x 1000 SSD","instanceFamily":"GPU instance","operatingSystem":"Linux","regionCode":"us-east-1","physicalProcessor":"Intel Xeon Platinum 8275L","servicename":"Amazon Elastic Compute Cloud","gpuMemory":"320 GB","instanceType":"p4d.24xlarge","tenancy":"Shared","usagetype":"BoxUsage:p4d.24xlarge","normalizationSizeFactor":"192","gpu":"8","licenseModel":"No License required","servicecode":"AmazonEC2","location":"US East (N. Virginia)","preInstalledSw":"NA","operation":"RunInstances","marketoption":"OnDemand"},"sku":"TBV6C3VKSXKFHHSC"},"serviceCode":"AmazonEC2","terms":{"OnDemand":{"TBV6C3VKSXKFHHSC.JRTCKXETXF":{"priceDimensions":{"TBV6C3VKSXKFHHSC.JRTCKXETXF.6YS6EN2CT7":{"unit":"Hrs","endRange":"Inf","description":"$21.9576 per On Demand Linux p4d.24xlarge Instance Hour","appliesTo":[],"rateCode":"TBV6C3VKSXKFHHSC.JRTCKXETXF.6YS6EN2CT7","beginRange":"0","pricePerUnit":{"USD":"21.9576000000"}}},"sku":"TBV6C3VKSXKFHHSC","effectiveDate":"2025-06-01T00:00:00Z","offerTermCode":"JRTCKXETXF","termAttributes":{}}}},"version":"20250601000000","publicationDate":"2025-06-01T00:00:00Z"}"#;

    #[test]
    fn reads_type_region_and_hourly_usd_of_the_on_demand_term() {
        assert_eq!(
            parse_document(P4D),
            Ok(ListedPrice {
                instance_type: "p4d.24xlarge".into(),
                region: "us-east-1".into(),
                usd_per_hour: 21.9576,
            })
        );
    }

    #[test]
    fn a_document_without_an_hourly_usd_price_is_an_error() {
        for (from, to) in [
            (r#""unit":"Hrs""#, r#""unit":"Quantity""#),
            ("21.9576000000", "0.0000000000"),
            (r#""OnDemand""#, r#""Reserved""#),
        ] {
            assert_eq!(
                parse_document(&P4D.replace(from, to)),
                Err(Error::NoHourlyPrice("p4d.24xlarge".into())),
                "{to}"
            );
        }
    }

    #[test]
    fn a_document_of_another_shape_is_an_error() {
        for text in ["", "{}", r#"{"product":{"attributes":{}}}"#] {
            assert!(
                matches!(parse_document(text), Err(Error::Shape(_))),
                "{text}"
            );
        }
    }
}
