//! The listener's settings, read once from the environment at start-up (the
//! variables are listed in docs/offsale.md).

use std::time::Duration;

use lifeboat_aws::Env;
use lifeboat_core::retry::RetrySchedule;
use lifeboat_core::sale::{DEFAULT_OFF_SALE_HOLD, DEFAULT_ON_SALE_HOLD, OnSaleAt, WritePolicy};

use crate::http::{HttpSwitchConfig, HttpSwitchError};

/// `table` (default) or `http`.
pub const SALE_SWITCH: &str = "SALE_SWITCH";
/// The legacy switch's URL template, `{operator}` replaced by the operator id.
pub const SALE_SWITCH_URL: &str = "SALE_SWITCH_URL";
/// `PUT` (default) or `POST`.
pub const SALE_SWITCH_METHOD: &str = "SALE_SWITCH_METHOD";
/// The name of an authentication header sent with every write.
pub const SALE_SWITCH_AUTH_HEADER: &str = "SALE_SWITCH_AUTH_HEADER";
/// Its value.
pub const SALE_SWITCH_AUTH_VALUE: &str = "SALE_SWITCH_AUTH_VALUE";
/// Instead of the value itself: the name of the SSM SecureString parameter
/// that holds it, read (decrypted) once at start.
pub const SALE_SWITCH_AUTH_PARAMETER: &str = "SALE_SWITCH_AUTH_PARAMETER";
/// Milliseconds one write may take (default 5000).
pub const SALE_SWITCH_TIMEOUT_MS: &str = "SALE_SWITCH_TIMEOUT_MS";
/// Attempts per version before the fault is raised (default 8).
pub const SALE_RETRY_MAX_ATTEMPTS: &str = "SALE_RETRY_MAX_ATTEMPTS";
/// Where sale records live: `dynamodb` (default) or `memory` (local runs).
pub const SALE_STATUS_STORE: &str = "SALE_STATUS_STORE";
/// When an operator goes back on sale: `closed` (default, once per incident)
/// or `half_open` (at every half-open round).
pub const SALE_ON_SALE_AT: &str = "SALE_ON_SALE_AT";
/// Seconds a breaker must stay closed before its operator goes back on sale
/// (default 60; 0 writes at once).
pub const SALE_ON_SALE_HOLD_S: &str = "SALE_ON_SALE_HOLD_S";
/// Seconds an off-sale write waits before its first attempt (default 10).
pub const SALE_OFF_SALE_HOLD_S: &str = "SALE_OFF_SALE_HOLD_S";
/// The operators lifeboat serves (comma-separated): changes of any other
/// operator are dropped.
pub use lifeboat_core::settings::OPERATORS;
/// The share of served operators open at once from which an off-sale write
/// is held as lifeboat's own fault (default 0.5; above 1 turns it off).
pub const SELF_FAULT_SHARE: &str = "SELF_FAULT_SHARE";

/// With `dynamodb`: the SaleStatus table's name (required) and the queue's URL.
pub use lifeboat_aws::clients::{OFFSALE_QUEUE_URL, SALE_STATUS_TABLE};

/// The template's `SaleSwitchTimeoutMs` default (a test holds them
/// together).
const DEFAULT_TIMEOUT_MS: u64 = 2_000;
/// The longest on-sale hold: an hour.
const MAX_ON_SALE_HOLD_S: u64 = 3_600;
const MAX_OFF_SALE_HOLD_S: u64 = 300;

/// A setting that cannot be used. Names the variable; never echoes the auth
/// value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Env(#[from] lifeboat_aws::ConfigError),
    #[error("{name}={value:?}: expected {expected}")]
    Invalid {
        name: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("{SALE_SWITCH}=http needs {SALE_SWITCH_URL}")]
    NoUrl,
    #[error(
        "set {SALE_SWITCH_AUTH_HEADER} with one of {SALE_SWITCH_AUTH_VALUE} or {SALE_SWITCH_AUTH_PARAMETER}, or none of them"
    )]
    HalfAuth,
    #[error(transparent)]
    Http(#[from] HttpSwitchError),
}

/// Where the sale status is written.
#[derive(Debug, Clone)]
pub enum SwitchTarget {
    /// Our own status table is the switch: the cart reads it.
    Table,
    /// The legacy booking system's switch over HTTP.
    Http(HttpSwitchConfig),
}

/// Where sale records are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreChoice {
    /// The SaleStatus table (`SALE_STATUS_TABLE`), the default. Messages to
    /// retry come back on the schedule through `ChangeMessageVisibility` on
    /// the queue at `OFFSALE_QUEUE_URL`; without it, at the queue's
    /// visibility timeout.
    Dynamodb {
        table: String,
        queue_url: Option<String>,
    },
    /// In the process: lost with it. For local runs only; messages come back
    /// at the queue's visibility timeout.
    Memory,
}

/// An auth header whose value is an SSM SecureString parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSecret {
    pub header: String,
    /// The parameter's name (not its value).
    pub parameter: String,
}

/// Everything the environment says.
#[derive(Debug, Clone)]
pub struct ListenerConfig {
    pub switch: SwitchTarget,
    pub policy: WritePolicy,
    pub store: StoreChoice,
    pub on_sale_at: OnSaleAt,
    /// The sale switch's auth header whose value is in SSM, still to read.
    pub auth_secret: Option<AuthSecret>,
    /// `SELF_FAULT_SHARE`.
    pub self_fault: crate::selffault::SelfFaultRule,
    /// `OPERATORS`: the operators whose changes are applied (`None`: any).
    pub operators: Option<std::collections::BTreeSet<lifeboat_core::OperatorId>>,
}

/// A variable that may be unset or empty.
fn optional<'a>(env: &'a Env, name: &'static str) -> Result<Option<&'a str>, ConfigError> {
    Ok(env.optional(name)?)
}

fn number(env: &Env, name: &'static str, default: u64) -> Result<u64, ConfigError> {
    match optional(env, name)? {
        None => Ok(default),
        Some(v) => match v.parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(ConfigError::Invalid {
                name,
                value: v.to_owned(),
                expected: "a whole number above 0",
            }),
        },
    }
}

impl ListenerConfig {
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let mut auth_secret = None;
        let timeout =
            Duration::from_millis(number(env, SALE_SWITCH_TIMEOUT_MS, DEFAULT_TIMEOUT_MS)?);
        let max_attempts = number(
            env,
            SALE_RETRY_MAX_ATTEMPTS,
            u64::from(RetrySchedule::default().max_attempts),
        )?;
        let max_attempts = u32::try_from(max_attempts).map_err(|_| ConfigError::Invalid {
            name: SALE_RETRY_MAX_ATTEMPTS,
            value: max_attempts.to_string(),
            expected: "at most 4294967295",
        })?;
        let switch = match optional(env, SALE_SWITCH)?
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("table") => SwitchTarget::Table,
            Some("http") => {
                let url = optional(env, SALE_SWITCH_URL)?.ok_or(ConfigError::NoUrl)?;
                let method = optional(env, SALE_SWITCH_METHOD)?.unwrap_or("PUT");
                let auth = match (
                    optional(env, SALE_SWITCH_AUTH_HEADER)?,
                    optional(env, SALE_SWITCH_AUTH_VALUE)?,
                    optional(env, SALE_SWITCH_AUTH_PARAMETER)?,
                ) {
                    (Some(name), Some(value), None) => Some((name, value)),
                    (Some(name), None, Some(parameter)) => {
                        auth_secret = Some(AuthSecret {
                            header: name.to_owned(),
                            parameter: parameter.to_owned(),
                        });
                        None
                    }
                    (None, None, None) => None,
                    _ => return Err(ConfigError::HalfAuth),
                };
                let http = HttpSwitchConfig::new(url, method, auth, timeout)?;
                if let Some(secret) = &auth_secret {
                    // The header name is checked now; its value comes later.
                    HttpSwitchConfig::new(url, method, Some((&secret.header, "x")), timeout)?;
                }
                SwitchTarget::Http(http)
            }
            Some(other) => {
                return Err(ConfigError::Invalid {
                    name: SALE_SWITCH,
                    value: other.to_owned(),
                    expected: "table or http",
                });
            }
        };
        let store = match optional(env, SALE_STATUS_STORE)?
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("dynamodb") => StoreChoice::Dynamodb {
                table: env.sale_status_table()?.trim().to_owned(),
                queue_url: optional(env, OFFSALE_QUEUE_URL)?.map(str::to_owned),
            },
            Some("memory") => StoreChoice::Memory,
            Some(other) => {
                return Err(ConfigError::Invalid {
                    name: SALE_STATUS_STORE,
                    value: other.to_owned(),
                    expected: "dynamodb or memory",
                });
            }
        };
        let on_sale_at = match optional(env, SALE_ON_SALE_AT)? {
            None => OnSaleAt::default(),
            Some(v) => OnSaleAt::parse(v).ok_or_else(|| ConfigError::Invalid {
                name: SALE_ON_SALE_AT,
                value: v.to_owned(),
                expected: "closed or half_open",
            })?,
        };
        let on_sale_hold = match optional(env, SALE_ON_SALE_HOLD_S)? {
            None => DEFAULT_ON_SALE_HOLD,
            Some(v) => v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|s| *s <= MAX_ON_SALE_HOLD_S)
                .map(Duration::from_secs)
                .ok_or_else(|| ConfigError::Invalid {
                    name: SALE_ON_SALE_HOLD_S,
                    value: v.to_owned(),
                    expected: "whole seconds from 0 to 3600",
                })?,
        };
        let off_sale_hold = match optional(env, SALE_OFF_SALE_HOLD_S)? {
            None => DEFAULT_OFF_SALE_HOLD,
            Some(v) => v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|s| *s <= MAX_OFF_SALE_HOLD_S)
                .map(Duration::from_secs)
                .ok_or_else(|| ConfigError::Invalid {
                    name: SALE_OFF_SALE_HOLD_S,
                    value: v.to_owned(),
                    expected: "whole seconds from 0 to 300",
                })?,
        };
        let operators = match optional(env, OPERATORS)? {
            None => None,
            Some(list) => Some(
                list.split(',')
                    .map(str::trim)
                    .filter(|o| !o.is_empty())
                    .map(|o| {
                        lifeboat_core::OperatorId::new(o).map_err(|_| ConfigError::Invalid {
                            name: OPERATORS,
                            value: o.to_owned(),
                            expected: "operator ids of lowercase letters, digits and '-'",
                        })
                    })
                    .collect::<Result<_, _>>()?,
            ),
        };
        let self_fault = match optional(env, SELF_FAULT_SHARE)? {
            None => crate::selffault::SelfFaultRule::default(),
            Some(v) => crate::selffault::SelfFaultRule {
                share: v
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0)
                    .ok_or_else(|| ConfigError::Invalid {
                        name: SELF_FAULT_SHARE,
                        value: v.to_owned(),
                        expected: "a share above 0 (above 1 turns the rule off)",
                    })?,
            },
        };
        Ok(Self {
            switch,
            auth_secret,
            self_fault,
            operators,
            on_sale_at,
            policy: WritePolicy::new(
                RetrySchedule {
                    max_attempts,
                    ..RetrySchedule::default()
                },
                timeout,
            )
            .with_on_sale_hold(on_sale_hold)
            .with_off_sale_hold(off_sale_hold),
            store,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        Env::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn the_default_write_timeout_is_the_templates() {
        let template = include_str!("../../../template.yaml");
        let block = template.split("\n  SaleSwitchTimeoutMs:\n").nth(1).unwrap();
        let default = block
            .lines()
            .find_map(|l| l.trim().strip_prefix("Default: "))
            .unwrap();
        assert_eq!(default.parse::<u64>().unwrap(), DEFAULT_TIMEOUT_MS);
    }

    #[test]
    fn defaults_are_the_status_table_and_eight_attempts() {
        let config = ListenerConfig::from_env(&env(&[(SALE_STATUS_STORE, "memory")])).unwrap();
        assert!(matches!(config.switch, SwitchTarget::Table));
        assert_eq!(config.policy.schedule, RetrySchedule::default());
        assert_eq!(config.policy.schedule.max_attempts, 8);
        assert_eq!(config.policy.attempt_timeout, Duration::from_secs(2));
        assert_eq!(config.policy.lease, Duration::from_secs(12));
        assert_eq!(config.store, StoreChoice::Memory);
        assert_eq!(config.on_sale_at, OnSaleAt::Closed);
        assert_eq!(config.policy.on_sale_hold, Duration::from_secs(60));
        assert_eq!(config.policy.off_sale_hold, Duration::from_secs(10));
    }

    #[test]
    fn the_on_sale_hold_is_whole_seconds_up_to_an_hour() {
        let hold = |v: &str| {
            ListenerConfig::from_env(&env(&[
                (SALE_STATUS_STORE, "memory"),
                (SALE_ON_SALE_HOLD_S, v),
            ]))
            .map(|c| c.policy.on_sale_hold)
        };
        assert_eq!(hold("0").unwrap(), Duration::ZERO);
        assert_eq!(hold("3600").unwrap(), Duration::from_secs(3600));
        for bad in ["-1", "3601", "1.5", "soon"] {
            let err = hold(bad).unwrap_err().to_string();
            assert!(err.contains(SALE_ON_SALE_HOLD_S), "{err}");
        }
    }

    #[test]
    fn the_off_sale_hold_is_whole_seconds_up_to_five_minutes() {
        let hold = |v: &str| {
            ListenerConfig::from_env(&env(&[
                (SALE_STATUS_STORE, "memory"),
                (SALE_OFF_SALE_HOLD_S, v),
            ]))
            .map(|c| c.policy.off_sale_hold)
        };
        assert_eq!(hold("0").unwrap(), Duration::ZERO);
        assert_eq!(hold("300").unwrap(), Duration::from_secs(300));
        for bad in ["-1", "301", "1.5", "soon"] {
            let err = hold(bad).unwrap_err().to_string();
            assert!(err.contains(SALE_OFF_SALE_HOLD_S), "{err}");
        }
    }

    #[test]
    fn on_sale_at_half_open_is_the_seed_behaviour_on_request() {
        let config = ListenerConfig::from_env(&env(&[
            (SALE_STATUS_STORE, "memory"),
            (SALE_ON_SALE_AT, "half_open"),
        ]))
        .unwrap();
        assert_eq!(config.on_sale_at, OnSaleAt::HalfOpen);
        let err = ListenerConfig::from_env(&env(&[
            (SALE_STATUS_STORE, "memory"),
            (SALE_ON_SALE_AT, "halfopen"),
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("closed or half_open"), "{err}");
    }

    #[test]
    fn the_auth_value_or_its_ssm_parameter_but_not_both() {
        let with = |pairs: &[(&str, &str)]| {
            let mut all = vec![
                (SALE_STATUS_STORE, "memory"),
                (SALE_SWITCH, "http"),
                (SALE_SWITCH_URL, "https://legacy.example/{operator}"),
            ];
            all.extend_from_slice(pairs);
            ListenerConfig::from_env(&env(&all))
        };
        let from_ssm = with(&[
            (SALE_SWITCH_AUTH_HEADER, "x-api-key"),
            (SALE_SWITCH_AUTH_PARAMETER, "/lifeboat/auth"),
        ])
        .unwrap();
        assert_eq!(
            from_ssm.auth_secret,
            Some(AuthSecret {
                header: "x-api-key".into(),
                parameter: "/lifeboat/auth".into()
            })
        );
        for bad in [
            vec![
                (SALE_SWITCH_AUTH_HEADER, "x-api-key"),
                (SALE_SWITCH_AUTH_VALUE, "v"),
                (SALE_SWITCH_AUTH_PARAMETER, "/lifeboat/auth"),
            ],
            vec![(SALE_SWITCH_AUTH_PARAMETER, "/lifeboat/auth")],
            vec![(SALE_SWITCH_AUTH_HEADER, "x-api-key")],
        ] {
            assert!(matches!(with(&bad), Err(ConfigError::HalfAuth)), "{bad:?}");
        }
        let bad_name = with(&[
            (SALE_SWITCH_AUTH_HEADER, "bad name"),
            (SALE_SWITCH_AUTH_PARAMETER, "/lifeboat/auth"),
        ]);
        assert!(bad_name.is_err());
    }

    #[test]
    fn the_http_switch_is_read_whole() {
        let config = ListenerConfig::from_env(&env(&[
            (SALE_STATUS_STORE, "memory"),
            (SALE_SWITCH, "http"),
            (
                SALE_SWITCH_URL,
                "https://legacy.example/operators/{operator}/sale-status",
            ),
            (SALE_SWITCH_METHOD, "POST"),
            (SALE_SWITCH_AUTH_HEADER, "Authorization"),
            (SALE_SWITCH_AUTH_VALUE, "Bearer t0ken"),
            (SALE_SWITCH_TIMEOUT_MS, "2500"),
            (SALE_RETRY_MAX_ATTEMPTS, "3"),
        ]))
        .unwrap();
        let SwitchTarget::Http(http) = &config.switch else {
            panic!("expected the http switch");
        };
        assert_eq!(http.method(), reqwest::Method::POST);
        assert_eq!(http.auth_header().unwrap().as_str(), "authorization");
        assert_eq!(http.timeout(), Duration::from_millis(2500));
        assert_eq!(config.policy.schedule.max_attempts, 3);
        assert!(!format!("{config:?}").contains("t0ken"));
    }

    #[test]
    fn bad_settings_name_the_variable() {
        let store = (SALE_STATUS_STORE, "memory");
        let err = |pairs: &[(&str, &str)]| {
            ListenerConfig::from_env(&env(pairs))
                .unwrap_err()
                .to_string()
        };
        assert!(err(&[store, (SALE_SWITCH, "ftp")]).contains("SALE_SWITCH=\"ftp\""));
        assert!(err(&[store, (SALE_SWITCH, "http")]).contains(SALE_SWITCH_URL));
        assert!(
            err(&[
                store,
                (SALE_SWITCH, "http"),
                (SALE_SWITCH_URL, "https://legacy.example"),
                (SALE_SWITCH_AUTH_HEADER, "x-key"),
            ])
            .contains(SALE_SWITCH_AUTH_VALUE)
        );
        assert!(err(&[store, (SALE_RETRY_MAX_ATTEMPTS, "0")]).contains(SALE_RETRY_MAX_ATTEMPTS));
        assert!(err(&[store, (SALE_RETRY_MAX_ATTEMPTS, "many")]).contains("whole number"));
        assert!(err(&[store, (SALE_SWITCH_TIMEOUT_MS, "-1")]).contains(SALE_SWITCH_TIMEOUT_MS));
        assert!(err(&[(SALE_STATUS_STORE, "file")]).contains("dynamodb or memory"));
    }

    #[test]
    fn the_sale_status_table_is_the_default_store() {
        let config = ListenerConfig::from_env(&env(&[
            (SALE_STATUS_TABLE, "SaleStatus"),
            (
                OFFSALE_QUEUE_URL,
                "http://127.0.0.1:5000/123456789012/offsale",
            ),
        ]))
        .unwrap();
        assert_eq!(
            config.store,
            StoreChoice::Dynamodb {
                table: "SaleStatus".into(),
                queue_url: Some("http://127.0.0.1:5000/123456789012/offsale".into()),
            }
        );
        let config = ListenerConfig::from_env(&env(&[
            (SALE_STATUS_STORE, "DynamoDB"),
            (SALE_STATUS_TABLE, "SaleStatus"),
            (OFFSALE_QUEUE_URL, " "),
        ]))
        .unwrap();
        assert_eq!(
            config.store,
            StoreChoice::Dynamodb {
                table: "SaleStatus".into(),
                queue_url: None,
            }
        );
    }

    #[test]
    fn the_sale_status_table_must_be_named() {
        let err = |pairs: &[(&str, &str)]| {
            ListenerConfig::from_env(&env(pairs))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(&[]),
            "environment variable SALE_STATUS_TABLE is not set"
        );
        assert_eq!(
            err(&[(SALE_STATUS_STORE, "dynamodb"), (SALE_STATUS_TABLE, "")]),
            "environment variable SALE_STATUS_TABLE is empty"
        );
        // The memory store needs neither the table nor the queue.
        let config = ListenerConfig::from_env(&env(&[(SALE_STATUS_STORE, "Memory")])).unwrap();
        assert_eq!(config.store, StoreChoice::Memory);
    }
}
