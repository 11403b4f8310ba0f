//! cargo lambda watch on a free loopback port
