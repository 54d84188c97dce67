//! The AWS provider: EC2 launches through `CreateFleet` ([`ec2`]), live
//! prices from the Pricing API and spot price history ([`pricing`]), and
//! interruption notices from an SQS queue fed by EventBridge ([`notices`]).
//! All EC2 error-code mapping to [`crate::cloud::Error`] lives here.

pub mod ec2;
pub mod errors;
pub mod notices;
pub mod pricing;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
use aws_smithy_runtime_api::client::http::SharedHttpClient;

/// The HTTP client every AWS SDK client here uses: hyper with rustls on
/// `ring` (no C toolchain beyond what `ring` needs), HTTPS and plain HTTP
/// (plain HTTP only ever for a loopback endpoint such as moto in tests).
pub fn http_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// Loads the SDK configuration the standard way (environment, profile, web
/// identity for IRSA/Pod Identity, IMDS), with our HTTP client, `region`
/// when given, and `endpoint_url` when given (for testing against a local
/// endpoint).
pub async fn load_sdk_config(region: Option<&str>, endpoint_url: Option<&str>) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest()).http_client(http_client());
    if let Some(region) = region {
        loader = loader.region(Region::new(region.to_string()));
    }
    if let Some(url) = endpoint_url {
        loader = loader.endpoint_url(url);
    }
    loader.load().await
}
