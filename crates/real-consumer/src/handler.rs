//! real-consumer
