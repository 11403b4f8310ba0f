//! Operator commands on a deployed (or local) suite, through the AWS APIs.
//!
//! * [`status`]: every breaker, its operator's sale status and where the
//!   Requests stream points, gathered over the core ports so the same code
//!   reads DynamoDB and Lambda or the in-memory adapters;
//! * [`breaker`]: `force-open`, `force-closed` and `release`, sent to the
//!   circuit switch function with the Lambda Invoke API;
//! * [`detection`]: for each incident, the time from the first failed
//!   operator call to the errors alarm's ALARM and to the breaker opening,
//!   from the alarm's history (CloudWatch `DescribeAlarmHistory`) and the
//!   breaker's state-change history (the Breaker table);
//! * [`advise`]: `advise-timeouts`, a budget per operator and operation from
//!   recorded call durations ([`calls`] reads and writes them);
//! * [`carts_cmd`]: `carts --minutes`, carts minute by minute against the
//!   breaker, read from the Carts table and the breaker's state-change
//!   history and counted by `lifeboat_command::carts` (as the demo counts
//!   its own);
//! * [`orders_cmd`]: `orders`, held orders per operator and minute, read
//!   from the Orders table and counted by `lifeboat_command::orders`;
//! * [`config`]: resource names from flags, else the functions' environment
//!   variables, else the stack ([`stack`]: `--stack` or samconfig.toml's,
//!   read with CloudFormation);
//! * [`operator_config`]: `config put` and `config show`, the operator
//!   config table's item (every operator's endpoints and settings).

pub mod advise;
pub mod advise_cmd;
pub mod aws;
pub mod breaker;
pub mod calls;
pub mod carts_cmd;
pub mod config;
pub mod detection;
pub mod operator_config;
pub mod orders_cmd;
pub mod stack;
pub mod status;
pub mod table;

pub use breaker::{BreakerCommand, BreakerError, SwitchReport};
pub use config::{MissingSetting, Setting};
pub use detection::{DetectionError, DetectionReport};
pub use status::{StatusError, StatusReport, gather};
