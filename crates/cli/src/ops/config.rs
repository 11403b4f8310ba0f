//! Where the operator commands find the suite's resources: a flag if given,
//! else the environment variable the functions read.

use lifeboat_aws::Env;

/// One resource name the commands need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// What it names, for messages: "breaker table".
    pub what: &'static str,
    /// The flag that overrides it, without dashes.
    pub flag: &'static str,
    /// The environment variable the functions read it from.
    pub var: &'static str,
}

pub const BREAKER_TABLE: Setting = Setting {
    what: "breaker table",
    flag: "breaker-table",
    var: lifeboat_aws::clients::BREAKER_TABLE,
};
pub const CARTS_TABLE: Setting = Setting {
    what: "carts table",
    flag: "carts-table",
    var: lifeboat_aws::clients::CARTS_TABLE,
};
pub const SALE_STATUS_TABLE: Setting = Setting {
    what: "sale status table",
    flag: "sale-status-table",
    var: lifeboat_aws::clients::SALE_STATUS_TABLE,
};
pub const REQUESTS_MAPPING_UUID: Setting = Setting {
    what: "requests stream mapping",
    flag: "requests-mapping-uuid",
    var: lifeboat_aws::clients::REQUESTS_MAPPING_UUID,
};
pub const REQUESTS_TABLE_PREFIX: Setting = Setting {
    what: "requests table prefix",
    flag: "requests-table-prefix",
    var: lifeboat_aws::clients::REQUESTS_TABLE_PREFIX,
};
pub const REAL_CONSUMER_FUNCTION: Setting = Setting {
    what: "real consumer function",
    flag: "real-consumer-function",
    var: lifeboat_aws::clients::REAL_CONSUMER_FUNCTION,
};
pub const FALLBACK_CONSUMER_FUNCTION: Setting = Setting {
    what: "fallback consumer function",
    flag: "fallback-consumer-function",
    var: lifeboat_aws::clients::FALLBACK_CONSUMER_FUNCTION,
};
/// Which operator each alarm watches, `alarm=operator,…`: the circuit
/// switch's `ALARM_OPERATORS`. Optional for `lifeboat detection`.
pub const ALARM_OPERATORS: Setting = Setting {
    what: "alarm-to-operator map",
    flag: "alarm-operators",
    var: "ALARM_OPERATORS",
};
pub const CIRCUIT_SWITCH_FUNCTION: Setting = Setting {
    what: "circuit switch function",
    flag: "function",
    var: "CIRCUIT_SWITCH_FUNCTION",
};

/// A setting given neither as a flag nor in the environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no {what}: pass --{flag} or set {var} ({detail})")]
pub struct MissingSetting {
    pub what: &'static str,
    pub flag: &'static str,
    pub var: &'static str,
    /// What is wrong with the variable: unset, empty or not UTF-8.
    pub detail: String,
}

impl Setting {
    /// The flag's value if given (and not blank), else the variable's.
    pub fn resolve(&self, flag: Option<&str>, env: &Env) -> Result<String, MissingSetting> {
        if let Some(value) = flag.map(str::trim).filter(|v| !v.is_empty()) {
            return Ok(value.to_owned());
        }
        env.required(self.var)
            .map(|v| v.trim().to_owned())
            .map_err(|e| MissingSetting {
                what: self.what,
                flag: self.flag,
                var: self.var,
                detail: e.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_environment() {
        let env = Env::from_pairs([("BREAKER_TABLE", "FromEnv")]);
        assert_eq!(
            BREAKER_TABLE.resolve(Some("FromFlag"), &env).unwrap(),
            "FromFlag"
        );
        assert_eq!(BREAKER_TABLE.resolve(None, &env).unwrap(), "FromEnv");
        assert_eq!(BREAKER_TABLE.resolve(Some("  "), &env).unwrap(), "FromEnv");
    }

    #[test]
    fn a_missing_setting_names_the_flag_and_the_variable() {
        let err = SALE_STATUS_TABLE
            .resolve(None, &Env::default())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "no sale status table: pass --sale-status-table or set SALE_STATUS_TABLE \
             (environment variable SALE_STATUS_TABLE is not set)"
        );
        let env = Env::from_pairs([("CIRCUIT_SWITCH_FUNCTION", "")]);
        let err = CIRCUIT_SWITCH_FUNCTION.resolve(None, &env).unwrap_err();
        assert!(err.to_string().contains("--function"), "{err}");
        assert!(err.to_string().contains("is empty"), "{err}");
    }
}
