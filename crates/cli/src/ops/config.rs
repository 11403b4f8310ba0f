//! Where the operator commands find the suite's resources: a flag if given,
//! else the environment variable the functions read, else what the stack
//! says ([`super::stack`]).
//!
//! The settings below are the one place that says which of the stack's
//! resources, outputs or parameters each name comes from; a test reads
//! template.yaml and fails if one of them is not there.

use lifeboat_aws::{ConfigError, Env};

use super::stack::{FromStack, Stack};

/// One resource name the commands need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    /// What it names, for messages: "breaker table".
    pub what: &'static str,
    /// The flag that overrides it, without dashes.
    pub flag: &'static str,
    /// The environment variable the functions read it from.
    pub var: &'static str,
    /// What names it in the stack, when neither flag nor variable does;
    /// `None`: the template does not deploy it.
    pub stack: Option<FromStack>,
}

pub const BREAKER_TABLE: Setting = Setting {
    what: "breaker table",
    flag: "breaker-table",
    var: lifeboat_aws::clients::BREAKER_TABLE,
    stack: Some(FromStack::Resource("BreakerTable")),
};
pub const CARTS_TABLE: Setting = Setting {
    what: "carts table",
    flag: "carts-table",
    var: lifeboat_aws::clients::CARTS_TABLE,
    stack: Some(FromStack::Resource("CartsTable")),
};
pub const ORDERS_TABLE: Setting = Setting {
    what: "orders table",
    flag: "orders-table",
    var: lifeboat_aws::clients::ORDERS_TABLE,
    stack: Some(FromStack::Resource("OrdersTable")),
};
pub const SALE_STATUS_TABLE: Setting = Setting {
    what: "sale status table",
    flag: "sale-status-table",
    var: lifeboat_aws::clients::SALE_STATUS_TABLE,
    stack: Some(FromStack::Resource("SaleStatusTable")),
};
pub const REQUESTS_MAPPING_UUID: Setting = Setting {
    what: "requests stream mapping",
    flag: "requests-mapping-uuid",
    var: lifeboat_aws::clients::REQUESTS_MAPPING_UUID,
    // One shared mapping is not the template's layout: it deploys a lane
    // per operator.
    stack: None,
};
pub const REQUESTS_TABLE_PREFIX: Setting = Setting {
    what: "requests table prefix",
    flag: "requests-table-prefix",
    var: lifeboat_aws::clients::REQUESTS_TABLE_PREFIX,
    // The lanes' tables are stamped per operator (`RequestsTable&{Operator}`,
    // `<stack>.requests.<operator>`); their logical ids drop the operator's
    // '-', so the prefix is read from the output that states it.
    stack: Some(FromStack::Output("RequestsTablePrefix")),
};
pub const REAL_CONSUMER_FUNCTION: Setting = Setting {
    what: "real consumer function",
    flag: "real-consumer-function",
    var: lifeboat_aws::clients::REAL_CONSUMER_FUNCTION,
    // the alias `live`, which the lanes' mappings name (a deploy shifts it)
    stack: Some(FromStack::Output("RealConsumerAlias")),
};
pub const FALLBACK_CONSUMER_FUNCTION: Setting = Setting {
    what: "fallback consumer function",
    flag: "fallback-consumer-function",
    var: lifeboat_aws::clients::FALLBACK_CONSUMER_FUNCTION,
    stack: Some(FromStack::Output("FallbackConsumerAlias")),
};
/// Which operator each alarm watches, `alarm=operator,…`: the circuit
/// switch's `ALARM_OPERATORS`. Optional for `lifeboat detection`.
pub const ALARM_OPERATORS: Setting = Setting {
    what: "alarm-to-operator map",
    flag: "alarm-operators",
    var: "ALARM_OPERATORS",
    // The parameter the circuit switch's ALARM_OPERATORS is set from.
    stack: Some(FromStack::Parameter("AlarmOperators")),
};
pub const CIRCUIT_SWITCH_FUNCTION: Setting = Setting {
    what: "circuit switch function",
    flag: "function",
    var: "CIRCUIT_SWITCH_FUNCTION",
    stack: Some(FromStack::Resource("CircuitSwitchFunction")),
};
/// The errors alarm `lifeboat detection` reads the history of (the
/// template's `ErrorsAlarmName`). No function reads the variable; like
/// `CIRCUIT_SWITCH_FUNCTION`, it is for the command alone.
pub const ERRORS_ALARM: Setting = Setting {
    what: "errors alarm",
    flag: "alarm",
    var: "ERRORS_ALARM_NAME",
    stack: Some(FromStack::Resource("RealConsumerErrorsAlarm")),
};
/// The operator config table of `lifeboat config put` and `show`.
pub const OPERATOR_CONFIG_TABLE: Setting = Setting {
    what: "operator config table",
    flag: "table",
    var: lifeboat_core::operator_config::OPERATOR_CONFIG_TABLE,
    stack: Some(FromStack::Resource("OperatorConfigTable")),
};

/// Every setting the stack can name, for the test against template.yaml.
pub const FROM_STACK: [Setting; 11] = [
    BREAKER_TABLE,
    CARTS_TABLE,
    ORDERS_TABLE,
    SALE_STATUS_TABLE,
    REQUESTS_TABLE_PREFIX,
    REAL_CONSUMER_FUNCTION,
    FALLBACK_CONSUMER_FUNCTION,
    ALARM_OPERATORS,
    CIRCUIT_SWITCH_FUNCTION,
    ERRORS_ALARM,
    OPERATOR_CONFIG_TABLE,
];

/// A setting given neither as a flag nor in the environment (nor, for a
/// command that reads the stack, by the stack).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no {what}: pass --{flag} or set {var}{or_stack} ({detail})")]
pub struct MissingSetting {
    pub what: &'static str,
    pub flag: &'static str,
    pub var: &'static str,
    /// `, or name the stack with --stack` when no stack was named.
    pub or_stack: &'static str,
    /// What is wrong with the variable (unset, empty or not UTF-8), and
    /// with the stack.
    pub detail: String,
}

impl MissingSetting {
    fn and(mut self, why: &str) -> Self {
        self.detail = format!("{}; {why}", self.detail);
        self
    }
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
                or_stack: "",
                detail: e.to_string(),
            })
    }

    /// Whether the flag or the variable names it: if not, the command
    /// reads the stack.
    pub fn is_given(&self, flag: Option<&str>, env: &Env) -> bool {
        self.resolve(flag, env).is_ok()
    }

    /// The flag's value, else the variable's, else what `stack` says. A
    /// variable set to something that is not UTF-8 is an error, not passed
    /// over for the stack.
    pub fn resolve_in(
        &self,
        flag: Option<&str>,
        env: &Env,
        stack: &Stack,
    ) -> Result<String, MissingSetting> {
        let missing = match self.resolve(flag, env) {
            Ok(value) => return Ok(value),
            Err(missing) => missing,
        };
        let Some(from) = self.stack else {
            return Err(missing);
        };
        if let Err(ConfigError::NotUnicode(_)) = env.required(self.var) {
            return Err(missing);
        }
        match stack {
            Stack::Read(description) => description
                .value(from)
                .map(ToOwned::to_owned)
                .map_err(|why| missing.and(&why)),
            Stack::Unnamed { why } => Err(MissingSetting {
                or_stack: ", or name the stack with --stack",
                ..missing.and(why)
            }),
            Stack::Unread { name } => Err(missing.and(&format!("stack {name} was not read"))),
            Stack::Unreadable(e) => Err(missing.and(&e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::stack::StackDescription;

    /// The keys of a top-level section of template.yaml (`Resources`,
    /// `Outputs`, `Parameters`), each with the `Type:` line under it, if
    /// any. Not a YAML parser: the template's own layout, two spaces a level.
    fn template_keys(template: &str, section: &str) -> Vec<(String, String)> {
        let mut keys: Vec<(String, String)> = Vec::new();
        let mut inside = false;
        for line in template.lines() {
            if !line.starts_with(' ') && !line.starts_with('#') && !line.is_empty() {
                inside = line.trim_end() == format!("{section}:");
                continue;
            }
            if !inside {
                continue;
            }
            if let Some(key) = line
                .strip_prefix("  ")
                .filter(|k| !k.starts_with(' ') && !k.starts_with('#'))
                .and_then(|k| k.trim_end().strip_suffix(':'))
            {
                keys.push((key.to_owned(), String::new()));
            } else if let (Some(ty), Some(last)) =
                (line.strip_prefix("    Type: "), keys.last_mut())
            {
                last.1 = ty.trim().to_owned();
            }
        }
        keys
    }

    #[test]
    fn what_the_settings_take_from_the_stack_is_in_the_template() {
        let template = include_str!("../../../../template.yaml");
        let resources = template_keys(template, "Resources");
        let outputs = template_keys(template, "Outputs");
        let parameters = template_keys(template, "Parameters");
        assert!(resources.len() > 20 && outputs.len() > 10 && parameters.len() > 20);
        let has = |keys: &[(String, String)], key: &str| keys.iter().any(|(k, _)| k == key);
        for setting in FROM_STACK {
            match setting.stack {
                Some(FromStack::Resource(id)) => {
                    let ty = resources
                        .iter()
                        .find(|(k, _)| k == id)
                        .map(|(_, ty)| ty.as_str())
                        .unwrap_or_else(|| {
                            panic!("{}: template.yaml has no resource {id}", setting.what)
                        });
                    let expected = match setting.what.rsplit(' ').next() {
                        Some("table") => "AWS::DynamoDB::Table",
                        Some("function") => "AWS::Serverless::Function",
                        Some("alarm") => "AWS::CloudWatch::Alarm",
                        other => panic!("{}: no type known for {other:?}", setting.what),
                    };
                    assert_eq!(ty, expected, "{}: {id}", setting.what);
                }
                Some(FromStack::Output(key)) => assert!(
                    has(&outputs, key),
                    "{}: template.yaml has no output {key}",
                    setting.what
                ),
                Some(FromStack::Parameter(key)) => assert!(
                    has(&parameters, key),
                    "{}: template.yaml has no parameter {key}",
                    setting.what
                ),
                None => panic!("{} is in FROM_STACK without a stack source", setting.what),
            }
        }
        // The lanes the prefix names: tables stamped per operator, named
        // with the prefix the output states.
        assert!(template.contains("    - RequestsTable&{Operator}:"));
        assert!(template.contains(r#"TableName: !Sub "${AWS::StackName}.requests.${Operator}""#));
        let output: Vec<&str> = template
            .lines()
            .skip_while(|l| *l != "  RequestsTablePrefix:")
            .skip(1)
            .take_while(|l| l.starts_with("    "))
            .collect();
        assert!(
            output
                .iter()
                .any(|l| l.trim() == r#"Value: !Sub "${AWS::StackName}.requests.""#),
            "{output:?}"
        );
        // Every right on the lanes' tables names this stack's alone: a
        // stack name has no '.', so no other stack's table starts with
        // "<stack>.requests." (with "-requests-" a stack named
        // "<stack>-requests-x" matched too).
        let table_rights: Vec<&str> = template
            .lines()
            .filter(|l| l.contains(":table/${AWS::StackName}"))
            .collect();
        assert!(table_rights.len() >= 4, "{table_rights:?}");
        for line in table_rights {
            assert!(
                line.contains(":table/${AWS::StackName}.requests.*\"")
                    || line.contains(":table/${AWS::StackName}.requests.*/stream/*\""),
                "{line}"
            );
        }
    }

    #[test]
    fn a_flag_wins_then_the_variable_then_the_stack() {
        let stack = Stack::Read(StackDescription {
            name: "lifeboat".into(),
            status: "UPDATE_COMPLETE".into(),
            resources: [("BreakerTable".to_owned(), "FromStack".to_owned())].into(),
            ..StackDescription::default()
        });
        let env = Env::from_pairs([("BREAKER_TABLE", "FromEnv")]);
        let none = Env::default();
        assert_eq!(
            BREAKER_TABLE
                .resolve_in(Some("FromFlag"), &env, &stack)
                .unwrap(),
            "FromFlag"
        );
        assert_eq!(
            BREAKER_TABLE.resolve_in(None, &env, &stack).unwrap(),
            "FromEnv"
        );
        assert_eq!(
            BREAKER_TABLE.resolve_in(Some(" "), &none, &stack).unwrap(),
            "FromStack"
        );
        let blank = Env::from_pairs([("BREAKER_TABLE", " ")]);
        assert_eq!(
            BREAKER_TABLE.resolve_in(None, &blank, &stack).unwrap(),
            "FromStack"
        );
        assert!(BREAKER_TABLE.is_given(None, &env));
        assert!(!BREAKER_TABLE.is_given(None, &blank));

        // What the stack lacks, or could not say, is named with the stack.
        let err = CARTS_TABLE.resolve_in(None, &none, &stack).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no carts table: pass --carts-table or set CARTS_TABLE (environment variable \
             CARTS_TABLE is not set; stack lifeboat (UPDATE_COMPLETE) has no resource CartsTable)"
        );
        let unnamed = Stack::Unnamed {
            why: "no --stack given and no samconfig.toml in the current directory".into(),
        };
        let err = BREAKER_TABLE.resolve_in(None, &none, &unnamed).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no breaker table: pass --breaker-table or set BREAKER_TABLE, or name the stack \
             with --stack (environment variable BREAKER_TABLE is not set; no --stack given and \
             no samconfig.toml in the current directory)"
        );
        let unreadable = Stack::Unreadable(crate::ops::stack::StackError::NotFound {
            stack: "lifeboat".into(),
            region: "eu-west-1".into(),
            hint: " (samconfig.toml deploys it to us-east-1)".into(),
        });
        let err = BREAKER_TABLE
            .resolve_in(None, &none, &unreadable)
            .unwrap_err();
        assert!(
            err.to_string().contains(
                "; stack lifeboat does not exist in eu-west-1 (samconfig.toml deploys it to us-east-1)"
            ),
            "{err}"
        );
        // A setting the template does not deploy is the flag's or the variable's.
        let err = REQUESTS_MAPPING_UUID
            .resolve_in(None, &none, &unnamed)
            .unwrap_err();
        assert!(!err.to_string().contains("--stack"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn a_variable_that_is_not_utf8_is_not_passed_over_for_the_stack() {
        use std::os::unix::ffi::OsStringExt;
        let stack = Stack::Read(StackDescription {
            resources: [("BreakerTable".to_owned(), "FromStack".to_owned())].into(),
            ..StackDescription::default()
        });
        let env = Env::from_pairs([(
            "BREAKER_TABLE",
            std::ffi::OsString::from_vec(vec![0xff, 0xfe]),
        )]);
        let err = BREAKER_TABLE.resolve_in(None, &env, &stack).unwrap_err();
        assert!(err.to_string().contains("not valid UTF-8"), "{err}");
    }

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
