//! lifeboat-local
