//! moto_server on a free loopback port
