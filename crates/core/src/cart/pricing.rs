//! A cart's price: the choices it covers, whether an operator's itemised
//! price covers them, and how two prices compare (docs/prices.md).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::cache::Source;
use crate::price::{PartKind, PricePart};

/// The choices a price covers: the accommodation and the extras it was
/// asked for. A price for other choices is a new price, not a change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choices {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accommodation: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extras: Vec<String>,
}

/// Why an operator's price does not cover the choices it was asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotCovered {
    #[error("the price of chosen accommodation or extras is not itemised")]
    NotItemised,
    #[error("the price's accommodation is {found:?}, not {wanted:?}")]
    Accommodation { wanted: String, found: Vec<String> },
    #[error("the price's extras are {found:?}, not the chosen {wanted:?}")]
    Extras {
        wanted: Vec<String>,
        found: Vec<String>,
    },
}

impl Choices {
    /// Whether these are the choices a cart has before the customer chooses,
    /// or the ones made for it while off sale: the default accommodation (or
    /// none yet) and no extras. Their price is the sailing's base fare.
    pub fn are_default(&self) -> bool {
        *self == Choices::default()
    }

    /// Whether an operator's itemised price (`parts`) covers these choices
    /// and no others, so that a cabin is never paid at the base fare by an
    /// operator that ignored the question:
    /// - chosen accommodation and extras must be itemised, each by its code;
    /// - the base fare (default choices) may be itemised or not; if it names
    ///   an accommodation, it is the operator's default
    ///   (`default_accommodation`) or one without a supplement, since the
    ///   default accommodation is sold at the base fare.
    pub fn covered_by(
        &self,
        parts: &[PricePart],
        default_accommodation: &str,
    ) -> Result<(), NotCovered> {
        if parts.is_empty() {
            return if self.are_default() {
                Ok(())
            } else {
                Err(NotCovered::NotItemised)
            };
        }
        let of_kind = |kind: PartKind| parts.iter().filter(move |p| p.kind == kind);
        let accommodations: Vec<&PricePart> = of_kind(PartKind::Accommodation).collect();
        let accommodation_fits = match (&self.accommodation, accommodations.as_slice()) {
            (_, []) => self.accommodation.is_none(),
            (Some(wanted), [one]) => one.code.as_deref() == Some(wanted),
            (None, [one]) => {
                one.code.as_deref() == Some(default_accommodation) || one.amount_cents == 0
            }
            _ => false,
        };
        if !accommodation_fits {
            return Err(NotCovered::Accommodation {
                wanted: self
                    .accommodation
                    .clone()
                    .unwrap_or_else(|| default_accommodation.to_owned()),
                found: accommodations.iter().map(|p| code_of(p)).collect(),
            });
        }
        let mut extras: Vec<String> = of_kind(PartKind::Extra).map(code_of).collect();
        extras.sort();
        // An operator may itemise one extra in several parts (per passenger).
        extras.dedup();
        if extras != self.extras {
            return Err(NotCovered::Extras {
                wanted: self.extras.clone(),
                found: extras,
            });
        }
        Ok(())
    }
}

fn code_of(part: &PricePart) -> String {
    part.code.clone().unwrap_or_default()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CartPrice {
    pub amount_cents: i64,
    pub currency: String,
    pub source: Source,
    /// When the operator gave this price.
    pub as_of: DateTime<Utc>,
    /// The price's parts, as the operator itemised them (none when it did
    /// not, or when the price is a search's fare).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PricePart>,
    /// The choices this price covers (none on carts stored before prices
    /// covered choices).
    #[serde(default)]
    pub covers: Choices,
    /// A rise over the price the customer was shown that the marketplace
    /// absorbs (`absorb_rise_percent`): `amount_cents` is what the customer
    /// pays, the operator's price is that plus this.
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub absorbed_cents: i64,
}

/// What a price change compares.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeScope {
    /// The whole price, for the same choices.
    #[default]
    SameChoices,
    /// The choices changed, and so did the parts both prices share (the
    /// fare, and any accommodation or extra kept): `old_cents` and
    /// `new_cents` are those parts' sums.
    SharedParts,
}

/// A price that changed, shown to the customer at the step it was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriceChange {
    pub old_cents: i64,
    pub new_cents: i64,
    pub difference_cents: i64,
    pub currency: String,
    pub at: DateTime<Utc>,
    #[serde(default)]
    pub scope: ChangeScope,
}

impl PriceChange {
    fn new(
        old_cents: i64,
        new_cents: i64,
        currency: &str,
        scope: ChangeScope,
        at: DateTime<Utc>,
    ) -> Self {
        Self {
            old_cents,
            new_cents,
            // Amounts are within 0..=MAX_PRICE_CENTS (parts at most 32 of
            // them): saturating only so that nothing can ever wrap or panic.
            difference_cents: new_cents.saturating_sub(old_cents),
            currency: currency.to_owned(),
            at,
            scope,
        }
    }
}

/// The change from `old` to `new` for the same choices, if the amount or the
/// currency differs.
pub(super) fn change_between(
    old: &CartPrice,
    new: &CartPrice,
    now: DateTime<Utc>,
) -> Option<PriceChange> {
    (old.amount_cents != new.amount_cents || old.currency != new.currency)
        .then(|| difference(old, new, now))
}

/// The difference from `old` to `new` for the same choices, as a change
/// (zero when they are the same).
pub(super) fn difference(old: &CartPrice, new: &CartPrice, now: DateTime<Utc>) -> PriceChange {
    PriceChange::new(
        old.amount_cents,
        new.amount_cents,
        &new.currency,
        ChangeScope::SameChoices,
        now,
    )
}

/// The change from the price the customer was shown (`old`) to `new`,
/// whatever choices they cover: the whole price for the same choices; for
/// other choices, the parts both share (a customer who chose a cabin after
/// seeing the base fare is told when the fare itself moved). `None` when
/// nothing shared changed, or nothing is shared (a price that is not
/// itemised).
pub(super) fn change_of(
    old: &CartPrice,
    new: &CartPrice,
    now: DateTime<Utc>,
) -> Option<PriceChange> {
    if old.covers == new.covers {
        return change_between(old, new, now);
    }
    let same = |a: &PricePart, b: &PricePart| a.kind == b.kind && a.code == b.code;
    let shared = |of: &CartPrice, with: &CartPrice| {
        of.parts
            .iter()
            .filter(|p| with.parts.iter().any(|q| same(p, q)))
            .fold(None, |sum: Option<i64>, p| {
                Some(sum.unwrap_or(0).saturating_add(p.amount_cents))
            })
    };
    let (mut was, is) = (shared(old, new)?, shared(new, old)?);
    if old
        .parts
        .iter()
        .all(|p| new.parts.iter().any(|q| same(p, q)))
    {
        // Only choices added: every part shown before is shared, so what the
        // customer was shown of them is net of what was absorbed.
        was = was.saturating_sub(old.absorbed_cents);
    }
    (was != is || old.currency != new.currency)
        .then(|| PriceChange::new(was, is, &new.currency, ChangeScope::SharedParts, now))
}

/// `new`, held at the price the customer was shown when `change` (from
/// that price, in the same currency) is a rise within `percent`: the
/// marketplace absorbs it wherever it is found, so the customer is not told
/// of a rise they will never pay. `None` when it is not.
pub(super) fn held(
    old: &CartPrice,
    new: &CartPrice,
    change: &PriceChange,
    percent: u32,
) -> Option<CartPrice> {
    let rise = change.difference_cents;
    let shown = new.amount_cents.saturating_sub(rise);
    (old.currency == new.currency && absorbs(shown, rise, percent)).then(|| CartPrice {
        amount_cents: shown,
        absorbed_cents: rise,
        ..new.clone()
    })
}

/// Whether a rise of `rise` cents on `shown` cents is within `percent`
/// (in 128-bit arithmetic, which no two prices can overflow).
pub(super) fn absorbs(shown: i64, rise: i64, percent: u32) -> bool {
    rise > 0 && i128::from(rise) * 100 <= i128::from(shown) * i128::from(percent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(kind: PartKind, code: Option<&str>, amount_cents: i64) -> PricePart {
        PricePart {
            kind,
            code: code.map(str::to_owned),
            amount_cents,
        }
    }

    fn choices(accommodation: Option<&str>, extras: &[&str]) -> Choices {
        Choices {
            accommodation: accommodation.map(str::to_owned),
            extras: extras.iter().map(|e| (*e).to_owned()).collect(),
        }
    }

    fn priced(covers: Choices, parts: Vec<PricePart>) -> CartPrice {
        CartPrice {
            amount_cents: parts.iter().map(|p| p.amount_cents).sum(),
            currency: "EUR".into(),
            source: Source::Live,
            as_of: DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default(),
            parts,
            covers,
            absorbed_cents: 0,
        }
    }

    #[test]
    fn a_price_that_ignored_the_choices_does_not_cover_them() {
        let fare = part(PartKind::Fare, None, 10_000);
        let cabin = choices(Some("cabin"), &["breakfast"]);
        // The operator answered the base fare to a question about a cabin.
        assert_eq!(
            cabin.covered_by(std::slice::from_ref(&fare), "seat"),
            Err(NotCovered::Accommodation {
                wanted: "cabin".into(),
                found: vec![]
            })
        );
        assert_eq!(cabin.covered_by(&[], "seat"), Err(NotCovered::NotItemised));
        let without_breakfast = [
            fare.clone(),
            part(PartKind::Accommodation, Some("cabin"), 4_500),
        ];
        assert!(matches!(
            cabin.covered_by(&without_breakfast, "seat"),
            Err(NotCovered::Extras { .. })
        ));
        let whole = [
            fare.clone(),
            part(PartKind::Accommodation, Some("cabin"), 4_500),
            part(PartKind::Extra, Some("breakfast"), 900),
            part(PartKind::Extra, Some("breakfast"), 900),
        ];
        assert_eq!(cabin.covered_by(&whole, "seat"), Ok(()));
    }

    #[test]
    fn the_base_fare_names_the_default_accommodation_or_none_with_a_supplement() {
        let base = Choices::default();
        let fare = part(PartKind::Fare, None, 10_000);
        assert_eq!(base.covered_by(&[], "deck"), Ok(()));
        assert_eq!(base.covered_by(std::slice::from_ref(&fare), "deck"), Ok(()));
        let seat_free = [fare.clone(), part(PartKind::Accommodation, Some("seat"), 0)];
        assert_eq!(base.covered_by(&seat_free, "deck"), Ok(()));
        let recliner = [
            fare.clone(),
            part(PartKind::Accommodation, Some("recliner"), 900),
        ];
        assert!(base.covered_by(&recliner, "deck").is_err());
        assert_eq!(base.covered_by(&recliner, "recliner"), Ok(()));
        let with_extra = [fare, part(PartKind::Extra, Some("wifi"), 500)];
        assert!(base.covered_by(&with_extra, "deck").is_err());
    }

    #[test]
    fn a_rise_within_the_tolerance_is_held_at_the_price_shown() {
        let now = DateTime::from_timestamp(1_800_000_060, 0).unwrap_or_default();
        let old = priced(Choices::default(), vec![part(PartKind::Fare, None, 10_000)]);
        let new = priced(Choices::default(), vec![part(PartKind::Fare, None, 10_150)]);
        let Some(change) = change_between(&old, &new, now) else {
            panic!("a rise is a change")
        };
        let kept = held(&old, &new, &change, 2).map(|p| (p.amount_cents, p.absorbed_cents));
        assert_eq!(kept, Some((10_000, 150)));
        assert_eq!(held(&old, &new, &change, 1), None, "1.5 % is over 1 %");
        let drop = difference(&new, &old, now);
        assert_eq!(held(&new, &old, &drop, 20), None, "a drop is never held");
    }

    #[test]
    fn a_change_of_choices_shows_a_change_of_the_parts_kept() {
        let now = DateTime::from_timestamp(1_800_000_060, 0).unwrap_or_default();
        let base = priced(Choices::default(), vec![part(PartKind::Fare, None, 10_000)]);
        let cabin = |fare| {
            priced(
                choices(Some("cabin"), &[]),
                vec![
                    part(PartKind::Fare, None, fare),
                    part(PartKind::Accommodation, Some("cabin"), 4_500),
                ],
            )
        };
        // The cabin adds its supplement: not a change.
        assert_eq!(change_of(&base, &cabin(10_000), now), None);
        let change = change_of(&base, &cabin(10_100), now);
        assert_eq!(
            change.map(|c| (c.old_cents, c.new_cents, c.difference_cents, c.scope)),
            Some((10_000, 10_100, 100, ChangeScope::SharedParts))
        );
        // A rise absorbed on the base fare is part of what was shown.
        let held_base = CartPrice {
            amount_cents: 10_000,
            absorbed_cents: 100,
            parts: vec![part(PartKind::Fare, None, 10_100)],
            ..base.clone()
        };
        let change = change_of(&held_base, &cabin(10_150), now);
        assert_eq!(
            change.map(|c| (c.old_cents, c.new_cents)),
            Some((10_000, 10_150))
        );
        // Nothing itemised: nothing shared to compare.
        let bare = priced(Choices::default(), vec![]);
        assert_eq!(change_of(&bare, &cabin(10_100), now), None);
    }
}
