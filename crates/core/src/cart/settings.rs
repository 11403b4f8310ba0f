//! The cart's settings per operator (`CART_SETTINGS`, docs/configuration.md).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::operator::OperatorId;
use crate::order::seats::SeatGuard;

/// Per-operator cart settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CartPolicy {
    /// The accommodation given while the operator is off sale.
    pub default_accommodation: String,
    /// Whether a cart may be confirmed on its cached price while the operator
    /// is off sale.
    pub confirm_on_cached_price: bool,
    /// The oldest cached price a cart may be confirmed on, in seconds.
    pub max_price_age_s: u64,
    /// A rise of at most this share of the price shown, in percent, is
    /// absorbed by the marketplace at whatever step it is found: the
    /// customer keeps the price shown and pays it. 0 (the default) absorbs
    /// nothing; at most [`MAX_ABSORB_RISE_PERCENT`].
    pub absorb_rise_percent: u32,
    /// The seats held orders may take on a sailing while the operator
    /// cannot book, and what happens past that cap (docs/orders.md, "No
    /// overselling"), for example `{"past_the_cap": "not_offered"}`.
    pub seats: SeatGuard,
}

/// The largest tolerance `absorb_rise_percent` may be set to.
pub const MAX_ABSORB_RISE_PERCENT: u32 = 20;

impl Default for CartPolicy {
    fn default() -> Self {
        Self {
            default_accommodation: "seat".into(),
            confirm_on_cached_price: true,
            max_price_age_s: 7 * 24 * 3600,
            absorb_rise_percent: 0,
            seats: SeatGuard::default(),
        }
    }
}

/// Cart settings of every operator (`CART_SETTINGS`), for example
/// `{"operators": {"nordic": {"default_accommodation": "deck"}}}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CartSettings {
    pub default: CartPolicy,
    pub operators: BTreeMap<OperatorId, CartPolicy>,
}

#[derive(Debug, thiserror::Error)]
pub enum CartSettingsError {
    #[error("CART_SETTINGS is not valid cart settings JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error(
        "CART_SETTINGS: absorb_rise_percent of {operator} is {percent}, more than {MAX_ABSORB_RISE_PERCENT}"
    )]
    Tolerance { operator: String, percent: u32 },
}

impl CartSettings {
    /// Parse settings JSON; an empty string means all defaults.
    pub fn from_json(json: &str) -> Result<Self, CartSettingsError> {
        if json.trim().is_empty() {
            return Ok(Self::default());
        }
        let settings: Self = serde_json::from_str(json)?;
        let policies = std::iter::once(("default".to_owned(), &settings.default)).chain(
            settings
                .operators
                .iter()
                .map(|(operator, policy)| (operator.to_string(), policy)),
        );
        for (operator, policy) in policies {
            if policy.absorb_rise_percent > MAX_ABSORB_RISE_PERCENT {
                return Err(CartSettingsError::Tolerance {
                    operator,
                    percent: policy.absorb_rise_percent,
                });
            }
        }
        Ok(settings)
    }

    pub fn for_operator(&self, operator: &OperatorId) -> &CartPolicy {
        self.operators.get(operator).unwrap_or(&self.default)
    }
}
