pub mod api_server;
pub mod aws_world;
pub mod fake_api;
pub mod fake_http;
pub mod faulty_aws;
pub mod moto;
pub mod scale;
