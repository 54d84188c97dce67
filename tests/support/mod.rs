pub mod api_server;
pub mod fake_api;
pub mod fake_http;
pub mod moto;
pub mod scale;
