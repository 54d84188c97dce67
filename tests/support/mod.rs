pub mod api_server;
pub mod moto;
