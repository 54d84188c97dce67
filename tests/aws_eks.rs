//! The cluster's settings discovered from EKS: the real SDK's
//! `DescribeCluster` against moto fills in what the `--aws-config` file
//! leaves out, and what the file sets wins.

use crate::support;

use quartermaster::cloud::aws::ec2::settings::SettingsFile;
use quartermaster::cloud::aws::eks;
use support::moto::{unique, Moto};

/// Creates an EKS cluster on moto with this version and service CIDR.
async fn cluster(client: &aws_sdk_eks::Client, version: &str, service_cidr: &str) -> String {
    use aws_sdk_eks::types::{KubernetesNetworkConfigRequest, VpcConfigRequest};
    let name = unique("qm-eks");
    client
        .create_cluster()
        .name(&name)
        .version(version)
        .role_arn("arn:aws:iam::123456789012:role/eks")
        .resources_vpc_config(
            VpcConfigRequest::builder()
                .subnet_ids("subnet-1")
                .subnet_ids("subnet-2")
                .build(),
        )
        .kubernetes_network_config(
            KubernetesNetworkConfigRequest::builder()
                .service_ipv4_cidr(service_cidr)
                .build(),
        )
        .send()
        .await
        .expect("create_cluster");
    name
}

#[tokio::test]
async fn a_file_naming_only_the_cluster_is_completed_by_describe_cluster() {
    let moto = Moto::start();
    let client = aws_sdk_eks::Client::new(&moto.sdk_config());
    let name = cluster(&client, "1.33", "10.123.0.0/16").await;
    let described = client
        .describe_cluster()
        .name(&name)
        .send()
        .await
        .unwrap()
        .cluster
        .unwrap();

    let file = SettingsFile::from_yaml(&format!("clusterName: {name}\n")).unwrap();
    let settings = eks::complete_settings(&client, &file).await.unwrap();
    assert_eq!(settings.cluster_name, name);
    assert_eq!(
        Some(settings.cluster_endpoint.as_str()),
        described.endpoint()
    );
    assert!(settings.cluster_endpoint.starts_with("https://"));
    assert_eq!(
        Some(settings.certificate_authority.as_str()),
        described.certificate_authority().and_then(|c| c.data())
    );
    assert_eq!(settings.service_cidr, "10.123.0.0/16");
    assert_eq!(settings.kubernetes_version.as_deref(), Some("1.33"));
}

#[tokio::test]
async fn what_the_file_sets_wins_and_a_complete_file_needs_no_cluster() {
    let moto = Moto::start();
    let client = aws_sdk_eks::Client::new(&moto.sdk_config());
    let name = cluster(&client, "1.32", "10.7.0.0/16").await;
    let file = SettingsFile::from_yaml(&format!(
        "clusterName: {name}\nclusterEndpoint: https://private.example\nkubernetesVersion: \"1.34\"\n"
    ))
    .unwrap();
    let settings = eks::complete_settings(&client, &file).await.unwrap();
    assert_eq!(settings.cluster_endpoint, "https://private.example");
    assert_eq!(settings.kubernetes_version.as_deref(), Some("1.34"));
    assert_eq!(settings.service_cidr, "10.7.0.0/16", "discovered");

    // Everything set: no call, so a cluster EKS does not know is fine.
    let complete = SettingsFile::from_yaml(
        "clusterName: not-in-eks\nkubernetesVersion: \"1.33\"\nclusterEndpoint: https://x.example\n\
         certificateAuthority: Q0E=\nserviceCidr: 10.100.0.0/16\n",
    )
    .unwrap();
    let settings = eks::complete_settings(&client, &complete).await.unwrap();
    assert_eq!(settings.cluster_endpoint, "https://x.example");
}

#[tokio::test]
async fn an_unknown_cluster_is_an_error_that_says_what_to_allow_or_set() {
    let moto = Moto::start();
    let client = aws_sdk_eks::Client::new(&moto.sdk_config());
    let name = unique("qm-eks-missing");
    let file = SettingsFile::from_yaml(&format!("clusterName: {name}\n")).unwrap();
    let err = eks::complete_settings(&client, &file)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&name), "{err}");
    assert!(err.contains("eks:DescribeCluster"), "{err}");
    assert!(err.contains("clusterEndpoint"), "{err}");

    // Only the version missing: nodes can still join, so the failure is
    // logged and the settings are used without it.
    let file = SettingsFile::from_yaml(&format!(
        "clusterName: {name}\nclusterEndpoint: https://x.example\ncertificateAuthority: Q0E=\n\
         serviceCidr: 10.100.0.0/16\n"
    ))
    .unwrap();
    let settings = eks::complete_settings(&client, &file).await.unwrap();
    assert_eq!(settings.kubernetes_version, None);
}
