//! The moto harness itself: the server answers the real SDK on loopback.

use crate::support;

use support::moto::Moto;

#[tokio::test]
async fn moto_answers_the_ec2_sdk_on_loopback() {
    let moto = Moto::start();
    assert!(moto.endpoint().starts_with("http://127.0.0.1:"));
    let ec2 = aws_sdk_ec2::Client::new(&moto.sdk_config());
    let zones = ec2.describe_availability_zones().send().await.unwrap();
    let names: Vec<&str> = zones
        .availability_zones()
        .iter()
        .filter_map(|z| z.zone_name())
        .collect();
    assert!(names.contains(&"us-east-1a"), "{names:?}");
}
