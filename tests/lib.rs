//! end-to-end tests of the wired suite
