//! fallback-consumer
