//! circuit-switch
