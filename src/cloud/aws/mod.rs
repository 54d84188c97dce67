//! The AWS provider: EC2 launches through `CreateFleet` ([`ec2`]), live
//! prices from the Pricing API and spot price history ([`pricing`]), and
//! interruption notices from an SQS queue fed by EventBridge ([`notices`]),
//! EC2NodeClass resolution through EC2, SSM and IAM ([`nodeclass`]), and
//! the cluster's endpoint, CA and service CIDR from EKS ([`eks`]).
//! All EC2 error-code mapping to [`crate::cloud::Error`] lives here.

pub mod ec2;
pub mod eks;
pub mod errors;
pub mod nodeclass;
pub mod notices;
pub mod pricing;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
use aws_smithy_runtime_api::client::http::SharedHttpClient;
use std::time::Duration;

/// The HTTP client every AWS SDK client here uses: hyper with rustls on
/// `ring` (no C toolchain beyond what `ring` needs), HTTPS and plain HTTP
/// (plain HTTP only ever for a loopback endpoint such as moto in tests).
pub fn http_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// How long an AWS call may take: connecting (3 s), between bytes of a
/// response (30 s: longer than SQS's 20 s long poll), one attempt (40 s)
/// and the whole operation with its retries (90 s). The SDK sets no read
/// or operation timeout by default, so a half-open connection would hang a
/// launch (and the loop with it) for ever.
pub fn timeouts() -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(3))
        .read_timeout(Duration::from_secs(30))
        .operation_attempt_timeout(Duration::from_secs(40))
        .operation_timeout(Duration::from_secs(90))
        .build()
}

/// How the SDK retries one AWS call: the standard mode (throttling and
/// transient errors, with the standard retry quota), three attempts, a
/// jittered backoff from 1 s doubling to at most 20 s. Made explicit (these
/// are the SDK's defaults today) because the controller's own per-claim
/// backoff starts where this one ends (`controller::backoff`): a call that
/// still fails after these attempts makes its claim wait 5 s or more before
/// the next launch, not retry at once.
pub fn retry_config() -> RetryConfig {
    RetryConfig::standard()
        .with_max_attempts(3)
        .with_initial_backoff(Duration::from_secs(1))
        .with_max_backoff(Duration::from_secs(20))
}

/// Loads the SDK configuration the standard way (environment, profile, web
/// identity for IRSA/Pod Identity, IMDS), with our HTTP client,
/// [`timeouts`] and [`retry_config`], `region` when given, and `endpoint_url` when given (for
/// testing against a local endpoint).
pub async fn load_sdk_config(region: Option<&str>, endpoint_url: Option<&str>) -> SdkConfig {
    let mut loader = aws_config::defaults(BehaviorVersion::latest())
        .http_client(http_client())
        .timeout_config(timeouts())
        .retry_config(retry_config());
    if let Some(region) = region {
        loader = loader.region(Region::new(region.to_string()));
    }
    if let Some(url) = endpoint_url {
        loader = loader.endpoint_url(url);
    }
    loader.load().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sdk_clients_time_out_reads_attempts_and_operations() {
        let sdk = load_sdk_config(Some("us-east-1"), Some("http://127.0.0.1:9")).await;
        let t = sdk.timeout_config().expect("a timeout config");
        assert_eq!(t.connect_timeout(), Some(Duration::from_secs(3)));
        let read = t.read_timeout().expect("a read timeout");
        assert!(
            read > Duration::from_secs(20),
            "{read:?} must outlast the SQS long poll"
        );
        let attempt = t.operation_attempt_timeout().expect("an attempt timeout");
        let operation = t.operation_timeout().expect("an operation timeout");
        assert!(read < attempt && attempt < operation, "{t:?}");
    }

    #[tokio::test]
    async fn sdk_clients_retry_three_times_in_the_standard_mode() {
        let sdk = load_sdk_config(Some("us-east-1"), Some("http://127.0.0.1:9")).await;
        let r = sdk.retry_config().expect("a retry config");
        assert_eq!(r.mode(), aws_config::retry::RetryMode::Standard);
        assert_eq!(r.max_attempts(), 3);
        assert_eq!(r.initial_backoff(), Duration::from_secs(1));
        assert_eq!(r.max_backoff(), Duration::from_secs(20));
    }
}
