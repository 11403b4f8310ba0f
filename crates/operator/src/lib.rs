//! lifeboat-operator
