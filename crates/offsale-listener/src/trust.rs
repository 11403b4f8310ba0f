//! Which state changes the listener believes.
//!
//! The off-sale queue takes whatever the rule sends it, and the rule takes any
//! event on the bus with source `lifeboat`. A forged `Breaker State Changed`
//! at a huge version would otherwise keep an operator off sale for good (every
//! real change after it is older). So a change is applied only if:
//!
//! * its operator is one lifeboat serves (`OPERATORS`), and
//! * the Breaker table confirms it: the switch saves a transition before it
//!   announces it, and the table is read consistently, so a real change's
//!   version is never newer than the stored breaker's, and the stored breaker
//!   at that very version is in the announced state.
//!
//! Anything else is dropped as poison (acknowledged, with a fault event). A
//! Breaker table that cannot be read is not a verdict: the change comes back.

use std::collections::BTreeSet;
use std::sync::Arc;

use lifeboat_core::ports::{BreakerStore, StoreError};
use lifeboat_core::sale::SaleChange;
use lifeboat_core::{BreakerRecord, OperatorId};

/// What the listener trusts. Both checks are optional so a listener run by
/// hand (or in a test) can do without them; the template sets both.
#[derive(Clone, Default)]
pub struct Trust {
    /// `OPERATORS`; `None`: any operator.
    pub operators: Option<BTreeSet<OperatorId>>,
    /// The Breaker table; `None`: changes are taken as they come.
    pub breakers: Option<Arc<dyn BreakerStore>>,
}

/// The Breaker table as read for one operator in one batch.
pub enum Confirmation {
    /// Read (`None`: no breaker stored).
    Read(Option<BreakerRecord>),
    /// Not checked: no Breaker table configured.
    Unchecked,
}

impl Trust {
    /// The stored breaker of `operator`, once per batch.
    pub async fn read(&self, operator: &OperatorId) -> Result<Confirmation, StoreError> {
        match &self.breakers {
            Some(store) => Ok(Confirmation::Read(store.load(operator).await?)),
            None => Ok(Confirmation::Unchecked),
        }
    }

    /// Why `change` is not believed, if it is not.
    pub fn refuse(&self, change: &SaleChange, stored: &Confirmation) -> Option<String> {
        let operator = &change.operator;
        if self
            .operators
            .as_ref()
            .is_some_and(|served| !served.contains(operator))
        {
            return Some(format!("operator {operator} is not in OPERATORS"));
        }
        let Confirmation::Read(stored) = stored else {
            return None;
        };
        let version = change.version;
        match stored {
            None => Some(format!(
                "no breaker of {operator} is stored: version {version} is not the circuit switch's"
            )),
            Some(record) if record.version < version => Some(format!(
                "version {version} is newer than the stored breaker's ({}): not the circuit switch's",
                record.version
            )),
            Some(record) if record.version == version && record.state != change.breaker => {
                Some(format!(
                    "version {version} is {} in the Breaker table, not {}",
                    record.state, change.breaker
                ))
            }
            // Older than the stored breaker: a real change the newer one
            // settles (the sale record drops it as outdated).
            Some(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use lifeboat_core::BreakerState;
    use lifeboat_core::events::SaleStatus;

    fn nordic() -> OperatorId {
        OperatorId::new("nordic").unwrap()
    }

    fn change(operator: &str, version: u64, breaker: BreakerState) -> SaleChange {
        SaleChange {
            operator: OperatorId::new(operator).unwrap(),
            version,
            status: SaleStatus::for_breaker(breaker),
            breaker,
        }
    }

    fn stored(version: u64, state: BreakerState) -> Confirmation {
        let mut r = BreakerRecord::initial(nordic(), DateTime::from_timestamp(0, 0).unwrap());
        r.version = version;
        r.state = state;
        Confirmation::Read(Some(r))
    }

    #[test]
    fn only_changes_the_breaker_table_confirms_are_believed() {
        let trust = Trust {
            operators: Some([nordic()].into()),
            breakers: None,
        };
        let open = BreakerState::Open;
        let at = |v, s| stored(v, s);
        assert_eq!(trust.refuse(&change("nordic", 3, open), &at(3, open)), None);
        assert_eq!(trust.refuse(&change("nordic", 2, open), &at(3, open)), None);
        let forged = trust
            .refuse(&change("nordic", 1 << 62, open), &at(3, open))
            .unwrap();
        assert!(
            forged.contains("newer than the stored breaker's (3)"),
            "{forged}"
        );
        let wrong = trust
            .refuse(&change("nordic", 3, BreakerState::Closed), &at(3, open))
            .unwrap();
        assert!(wrong.contains("is open in the Breaker table"), "{wrong}");
        let none = trust
            .refuse(&change("nordic", 1, open), &Confirmation::Read(None))
            .unwrap();
        assert!(none.contains("no breaker"), "{none}");
        let stranger = trust
            .refuse(&change("zzz", 1, open), &Confirmation::Unchecked)
            .unwrap();
        assert!(stranger.contains("not in OPERATORS"), "{stranger}");
        // Without a table or a list, everything passes.
        let open_door = Trust::default();
        assert_eq!(
            open_door.refuse(&change("zzz", 1 << 62, open), &Confirmation::Unchecked),
            None
        );
    }
}
