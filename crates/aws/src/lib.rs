//! lifeboat-aws
