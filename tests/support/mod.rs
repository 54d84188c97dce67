pub mod api_server;
pub mod aws_world;
pub mod fake_api;
pub mod fake_http;
pub mod faulty_aws;
pub mod moto;
pub mod prometheus;
pub mod scale;

/// A free port on 127.0.0.1 for a server a test starts.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}
