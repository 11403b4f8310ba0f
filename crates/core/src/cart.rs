//! The cart: a chosen sailing taken through accommodation, extras, price and
//! confirm, and what happens to it while its operator is off sale.
//!
//! Every decision made because the operator was off sale (default
//! accommodation, extras skipped, a cached price) is written on the cart
//! itself, so reading the same cart again (a refresh, a saved link, the back
//! button) shows the same thing. Nothing changes by itself when the operator
//! comes back on sale: the cart then says an upgrade is available, and only
//! the customer's own step changes it.
//!
//! The rules here are pure; the `cart` function does the reading and writing,
//! through a [`CartStore`](crate::ports::CartStore).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::cache::age_s;
use crate::operator::OperatorId;
pub use crate::price::MAX_PRICE_CENTS;

mod pricing;
mod settings;
pub use pricing::{CartPrice, ChangeScope, Choices, NotCovered, PriceChange};
use pricing::{absorbs, change_between};
pub use settings::{CartPolicy, CartSettings, CartSettingsError, MAX_ABSORB_RISE_PERCENT};

/// The sailing a cart is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sailing {
    pub sailing_id: String,
    pub from: String,
    pub to: String,
    pub date: String,
    pub passengers: u8,
}

/// Who chose a step's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChosenBy {
    Customer,
    /// lifeboat chose the operator's default because it was off sale.
    DefaultWhileOffSale,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accommodation {
    pub code: String,
    pub chosen_by: ChosenBy,
}

/// The extras step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Extras {
    NotChosen,
    Chosen {
        codes: Vec<String>,
    },
    /// Skipped because the operator was off sale.
    SkippedWhileOffSale,
}

/// Why the cart is in its degraded state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Degraded {
    /// When the cart first found the operator off sale.
    pub since: DateTime<Utc>,
    pub reason: String,
}

/// A customer's step on a cart, as the cart function answered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    Open,
    Accommodation,
    Extras,
    Price,
    Confirm,
}

impl StepKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::Open => "open",
            StepKind::Accommodation => "accommodation",
            StepKind::Extras => "extras",
            StepKind::Price => "price",
            StepKind::Confirm => "confirm",
        }
    }
}

/// One entry of a cart's step history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    pub step: StepKind,
    pub at: DateTime<Utc>,
    /// The HTTP status the step was answered with.
    pub status: u16,
    /// The answer showed the customer a changed price (old, new, difference).
    #[serde(default, skip_serializing_if = "is_false")]
    pub price_change_shown: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The most steps a cart's history keeps; older ones are dropped first.
pub const MAX_STEP_HISTORY: usize = 64;

/// The cart reached payment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confirmation {
    pub at: DateTime<Utc>,
    pub amount_cents: i64,
    pub currency: String,
    /// Confirmed on a cached price while the operator was off sale.
    pub on_cached_price: bool,
    pub price_as_of: DateTime<Utc>,
    /// A rise at payment within the operator's tolerance, which the
    /// marketplace absorbed: the customer paid `amount_cents`, the operator
    /// asked this much more.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub absorbed_cents: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cart {
    pub cart_id: String,
    /// Bumped by every save; saves are conditional on the revision read.
    pub revision: u64,
    /// The subject (a JWT's `sub`) of the customer who opened the cart
    /// through the JWT authorizer (`ApiAuth=jwt`): only that subject
    /// reaches it. `None`: opened without a token (SigV4, a local run), or
    /// stored before carts had owners; such a cart is reached by its id
    /// alone. Set once when the cart opens, never changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    pub operator: OperatorId,
    pub sailing: Sailing,
    #[serde(default)]
    pub accommodation: Option<Accommodation>,
    pub extras: Extras,
    #[serde(default)]
    pub price: Option<CartPrice>,
    #[serde(default)]
    pub degraded: Option<Degraded>,
    #[serde(default)]
    pub price_change: Option<PriceChange>,
    #[serde(default)]
    pub confirmation: Option<Confirmation>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Every step the customer took, oldest first (at most
    /// [`MAX_STEP_HISTORY`]). Carts stored before steps were recorded have
    /// none. Not part of what the customer sees, and not a change of the
    /// cart: recording a step neither bumps `updated_at` nor needs a new
    /// revision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepRecord>,
}

/// A step the cart refused, with what to tell the customer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CartRefusal {
    #[error("the cart is already confirmed")]
    AlreadyConfirmed,
    #[error("the operator is off sale: {step} stays as chosen for you until it is back on sale")]
    OffSale { step: &'static str },
    #[error("the operator is off sale and this cart cannot be confirmed on a cached price")]
    CachedPriceNotAllowed,
    #[error("no price is known for this sailing yet")]
    NoPrice,
    #[error("the cached price is {age_s} s old, too old to confirm on")]
    PriceTooOld { age_s: u64 },
}

/// What a confirm came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfirmStep {
    Confirmed,
    /// The price changed: the customer has to confirm the new one.
    PriceChanged(PriceChange),
    /// The cart had no price the customer could have seen: this one is
    /// shown first, and confirming again accepts it.
    PriceToConfirm(CartPrice),
}

impl Cart {
    /// A new cart for `sailing`. While the operator is off sale the degraded
    /// choices are made at once and written on the cart.
    pub fn open(
        cart_id: String,
        operator: OperatorId,
        sailing: Sailing,
        off_sale: bool,
        policy: &CartPolicy,
        now: DateTime<Utc>,
    ) -> Self {
        let mut cart = Self {
            cart_id,
            revision: 0,
            owner: None,
            operator,
            sailing,
            accommodation: None,
            extras: Extras::NotChosen,
            price: None,
            degraded: None,
            price_change: None,
            confirmation: None,
            created_at: now,
            updated_at: now,
            steps: Vec::new(),
        };
        if off_sale {
            cart.degrade(policy, now);
        }
        cart
    }

    /// Make the off-sale choices for every step the customer has not made
    /// yet. Choices the customer made stay.
    pub fn degrade(&mut self, policy: &CartPolicy, now: DateTime<Utc>) {
        if self.confirmation.is_some() {
            return;
        }
        let before = (
            self.degraded.is_some(),
            self.accommodation.is_some(),
            self.extras.clone(),
        );
        if self.degraded.is_none() {
            self.degraded = Some(Degraded {
                since: now,
                reason: "operator_off_sale".into(),
            });
        }
        if self.accommodation.is_none() {
            self.accommodation = Some(Accommodation {
                code: policy.default_accommodation.clone(),
                chosen_by: ChosenBy::DefaultWhileOffSale,
            });
        }
        if matches!(self.extras, Extras::NotChosen) {
            self.extras = Extras::SkippedWhileOffSale;
        }
        // A cart already degraded stays byte for byte the same.
        if before != (true, true, self.extras.clone()) {
            self.updated_at = now;
        }
    }

    /// Whether a customer could now replace choices lifeboat made while the
    /// operator was off sale.
    /// Off sale, choices the customer made that no price on the cart covers
    /// cannot be paid until the operator is back (they were chosen as it
    /// went down, and never priced). They give way to the off-sale defaults
    /// (the default accommodation, extras skipped), written on the cart as
    /// such, so it can be paid at the cached base fare now and upgraded once
    /// the operator is back on sale. Whether anything changed.
    pub fn default_unpriced_choices(&mut self, policy: &CartPolicy, now: DateTime<Utc>) -> bool {
        let choices = self.choices(policy);
        if self.confirmation.is_some()
            || self.degraded.is_none()
            || choices.are_default()
            || self.price.as_ref().is_some_and(|p| p.covers == choices)
        {
            return false;
        }
        if choices.accommodation.is_some() {
            self.accommodation = Some(Accommodation {
                code: policy.default_accommodation.clone(),
                chosen_by: ChosenBy::DefaultWhileOffSale,
            });
        }
        if !choices.extras.is_empty() {
            self.extras = Extras::SkippedWhileOffSale;
        }
        self.price = None;
        self.price_change = None;
        self.updated_at = now;
        true
    }

    pub fn upgrade_available(&self, on_sale: bool) -> bool {
        on_sale
            && self.confirmation.is_none()
            && (matches!(
                self.accommodation,
                Some(Accommodation {
                    chosen_by: ChosenBy::DefaultWhileOffSale,
                    ..
                })
            ) || matches!(self.extras, Extras::SkippedWhileOffSale))
    }

    fn open_for_changes(&self) -> Result<(), CartRefusal> {
        if self.confirmation.is_some() {
            Err(CartRefusal::AlreadyConfirmed)
        } else {
            Ok(())
        }
    }

    /// The customer chooses an accommodation. While off sale the default
    /// stays.
    pub fn choose_accommodation(
        &mut self,
        code: String,
        on_sale: bool,
        now: DateTime<Utc>,
    ) -> Result<(), CartRefusal> {
        self.open_for_changes()?;
        if !on_sale {
            return Err(CartRefusal::OffSale {
                step: "accommodation",
            });
        }
        self.accommodation = Some(Accommodation {
            code,
            chosen_by: ChosenBy::Customer,
        });
        self.after_customer_change(now);
        Ok(())
    }

    /// The customer chooses extras (possibly none). While off sale the step
    /// stays skipped.
    pub fn choose_extras(
        &mut self,
        codes: Vec<String>,
        on_sale: bool,
        now: DateTime<Utc>,
    ) -> Result<(), CartRefusal> {
        self.open_for_changes()?;
        if !on_sale {
            return Err(CartRefusal::OffSale { step: "extras" });
        }
        self.extras = Extras::Chosen { codes };
        self.after_customer_change(now);
        Ok(())
    }

    /// The choices the cart's price must cover: the accommodation unless it
    /// is the operator's default (whose price is the base fare), and the
    /// chosen extras in code order.
    pub fn choices(&self, policy: &CartPolicy) -> Choices {
        let accommodation = self
            .accommodation
            .as_ref()
            .map(|a| a.code.clone())
            .filter(|code| *code != policy.default_accommodation);
        let mut extras = match &self.extras {
            Extras::Chosen { codes } => codes.clone(),
            Extras::NotChosen | Extras::SkippedWhileOffSale => Vec::new(),
        };
        extras.sort();
        Choices {
            accommodation,
            extras,
        }
    }

    fn after_customer_change(&mut self, now: DateTime<Utc>) {
        // Once no off-sale choice is left the cart is no longer degraded.
        let defaults_left = matches!(
            self.accommodation,
            Some(Accommodation {
                chosen_by: ChosenBy::DefaultWhileOffSale,
                ..
            })
        ) || matches!(self.extras, Extras::SkippedWhileOffSale);
        if !defaults_left {
            self.degraded = None;
        }
        self.price_change = None;
        self.updated_at = now;
    }

    /// Record a price for the cart, at whatever step it was found. When it
    /// differs from the cart's price for the same choices, or, for other
    /// choices, in the parts both share (the fare), the change is returned
    /// (and kept on the cart) for the step to show. A rise within the
    /// policy's `absorb_rise_percent` of the price shown is absorbed here
    /// as at payment: the price is held at what the customer was shown,
    /// with the rise as its `absorbed_cents`, and is no change.
    pub fn set_price(
        &mut self,
        price: CartPrice,
        policy: &CartPolicy,
        now: DateTime<Utc>,
    ) -> Result<Option<PriceChange>, CartRefusal> {
        self.open_for_changes()?;
        let change = self
            .price
            .as_ref()
            .and_then(|old| pricing::change_of(old, &price, now));
        let held = self
            .price
            .as_ref()
            .zip(change.as_ref())
            .and_then(|(old, change)| {
                pricing::held(old, &price, change, policy.absorb_rise_percent)
            });
        let (price, change) = match held {
            Some(held) => (held, None),
            None => (price, change),
        };
        self.price_change = change.clone();
        self.price = Some(price);
        self.updated_at = now;
        Ok(change)
    }

    /// Forget a price that no longer covers the cart's choices (they changed
    /// and no price for the new ones could be found).
    pub fn drop_price_unless_covering(&mut self, choices: &Choices) {
        if self.price.as_ref().is_some_and(|p| p.covers != *choices) {
            self.price = None;
        }
    }

    /// Confirm with a price just asked from the operator (on sale), as
    /// [`Cart::settle`] decides.
    pub fn confirm_live(
        &mut self,
        price: CartPrice,
        policy: &CartPolicy,
        now: DateTime<Utc>,
    ) -> Result<ConfirmStep, CartRefusal> {
        self.open_for_changes()?;
        Ok(self.settle(price, false, policy, now))
    }

    /// Confirm on a cached price while the operator cannot price the cart
    /// (off sale, or on sale but not answering), if the operator's policy
    /// allows it. `cached` is the newest cached price, if one was found: when
    /// it is newer than the cart's and differs, it is shown first, as a
    /// change; a cart without a price shows it first too.
    pub fn confirm_cached(
        &mut self,
        cached: Option<CartPrice>,
        policy: &CartPolicy,
        now: DateTime<Utc>,
    ) -> Result<ConfirmStep, CartRefusal> {
        self.open_for_changes()?;
        if !policy.confirm_on_cached_price {
            return Err(CartRefusal::CachedPriceNotAllowed);
        }
        let newer = cached.filter(|c| {
            self.price
                .as_ref()
                .is_none_or(|p| c.covers != p.covers || c.as_of > p.as_of)
        });
        // The cart's own price only if it covers the choices it has now (a
        // cart stored before prices covered choices may hold the base fare
        // under a cabin).
        let choices = self.choices(policy);
        let own = self.price.clone().filter(|p| p.covers == choices);
        let price = newer.or(own).ok_or(CartRefusal::NoPrice)?;
        let age_s = age_s(price.as_of, now);
        if age_s > policy.max_price_age_s {
            return Err(CartRefusal::PriceTooOld { age_s });
        }
        Ok(self.settle(price, true, policy, now))
    }

    /// Payment on `price`, the newest price of the cart's choices:
    /// - the customer never saw a price for these choices: it is shown first
    ///   ([`ConfirmStep::PriceToConfirm`]);
    /// - the same or a lower price: confirmed on it (a drop is kept on the
    ///   cart as its `price_change`, so the customer is told);
    /// - a rise within the policy's `absorb_rise_percent`: confirmed on the
    ///   price shown, the rise recorded as absorbed by the marketplace;
    /// - any other rise, or another currency: shown first
    ///   ([`ConfirmStep::PriceChanged`]); confirming again accepts it.
    fn settle(
        &mut self,
        price: CartPrice,
        on_cached_price: bool,
        policy: &CartPolicy,
        now: DateTime<Utc>,
    ) -> ConfirmStep {
        let Some(old) = self.price.clone().filter(|old| old.covers == price.covers) else {
            self.price_change = None;
            self.price = Some(price.clone());
            self.updated_at = now;
            return ConfirmStep::PriceToConfirm(price);
        };
        // Amounts are checked at the edge (0..=MAX_PRICE_CENTS), so the
        // difference cannot overflow; checked all the same.
        let rise = price.amount_cents.checked_sub(old.amount_cents);
        match rise {
            Some(rise) if old.currency == price.currency && rise <= 0 => {
                self.price_change = change_between(&old, &price, now);
                self.confirm_on(price, on_cached_price, 0, now);
                ConfirmStep::Confirmed
            }
            Some(rise)
                if old.currency == price.currency
                    && absorbs(old.amount_cents, rise, policy.absorb_rise_percent) =>
            {
                // Paid as shown: the price the customer saw, its time and
                // source; the rise is on the confirmation.
                self.price_change = None;
                self.confirm_on(old, on_cached_price, rise, now);
                ConfirmStep::Confirmed
            }
            _ => {
                let change = pricing::difference(&old, &price, now);
                self.price_change = Some(change.clone());
                self.price = Some(price);
                self.updated_at = now;
                ConfirmStep::PriceChanged(change)
            }
        }
    }

    fn confirm_on(
        &mut self,
        price: CartPrice,
        on_cached_price: bool,
        absorbed_cents: i64,
        now: DateTime<Utc>,
    ) {
        self.confirmation = Some(Confirmation {
            at: now,
            amount_cents: price.amount_cents,
            currency: price.currency.clone(),
            on_cached_price,
            price_as_of: price.as_of,
            absorbed_cents,
        });
        self.price = Some(price);
        self.updated_at = now;
    }

    /// Note a step the customer took, dropping the oldest entry past
    /// [`MAX_STEP_HISTORY`].
    pub fn record_step(&mut self, step: StepRecord) {
        if self.steps.len() >= MAX_STEP_HISTORY {
            let excess = self.steps.len() + 1 - MAX_STEP_HISTORY;
            self.steps.drain(..excess);
        }
        self.steps.push(step);
    }

    /// Whether `self` and `other` differ in more than their step history.
    pub fn differs_beyond_steps(&self, other: &Cart) -> bool {
        let without_steps = |c: &Cart| Cart {
            steps: Vec::new(),
            ..c.clone()
        };
        without_steps(self) != without_steps(other)
    }

    /// May a caller with `subject` (a token's `sub`; `None` without a
    /// token) reach this cart? A cart with an owner is its owner's alone;
    /// a cart without one is anyone's who has its id.
    pub fn reachable_by(&self, subject: Option<&str>) -> bool {
        match &self.owner {
            None => true,
            Some(owner) => subject == Some(owner.as_str()),
        }
    }

    /// Age of the cart's price at `now`, in whole seconds.
    pub fn price_age_s(&self, now: DateTime<Utc>) -> Option<u64> {
        self.price.as_ref().map(|p| age_s(p.as_of, now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Source;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap_or_default()
    }

    fn cart(off_sale: bool) -> Cart {
        Cart::open(
            "c1".into(),
            OperatorId::new("nordic").unwrap_or_else(|e| panic!("{e}")),
            Sailing {
                sailing_id: "s1".into(),
                from: "HEL".into(),
                to: "TLL".into(),
                date: "2026-12-24".into(),
                passengers: 2,
            },
            off_sale,
            &CartPolicy::default(),
            at(0),
        )
    }

    fn price(cents: i64, source: Source, as_of: i64) -> CartPrice {
        CartPrice {
            amount_cents: cents,
            currency: "EUR".into(),
            source,
            as_of: at(as_of),
            parts: Vec::new(),
            covers: Choices::default(),
            absorbed_cents: 0,
        }
    }

    fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_off_sale_cart_gets_the_default_choices_written_on_it() {
        let c = cart(true);
        assert_eq!(
            c.accommodation,
            Some(Accommodation {
                code: "seat".into(),
                chosen_by: ChosenBy::DefaultWhileOffSale
            })
        );
        assert_eq!(c.extras, Extras::SkippedWhileOffSale);
        assert!(c.degraded.is_some());
        assert!(!c.upgrade_available(false));
        assert!(c.upgrade_available(true));
    }

    #[test]
    fn off_sale_steps_are_refused_and_change_nothing() {
        let mut c = cart(true);
        let before = c.clone();
        assert!(matches!(
            c.choose_accommodation("cabin".into(), false, at(5)),
            Err(CartRefusal::OffSale { .. })
        ));
        assert!(c.choose_extras(vec!["meal".into()], false, at(5)).is_err());
        assert_eq!(c, before);
    }

    #[test]
    fn upgrading_when_back_on_sale_clears_the_degraded_state() {
        let mut c = cart(true);
        c.choose_accommodation("cabin".into(), true, at(10))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(c.degraded.is_some(), "extras are still skipped");
        c.choose_extras(vec![], true, at(11))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(c.degraded.is_none());
        assert!(!c.upgrade_available(true));
    }

    #[test]
    fn a_cart_without_a_price_shows_one_before_confirming() {
        let mut c = cart(false);
        let step = c
            .confirm_live(
                price(10_000, Source::Live, 0),
                &CartPolicy::default(),
                at(0),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(step, ConfirmStep::PriceToConfirm(_)));
        assert!(c.confirmation.is_none());
        assert_eq!(
            c.confirm_live(
                price(10_000, Source::Live, 5),
                &CartPolicy::default(),
                at(5)
            ),
            Ok(ConfirmStep::Confirmed)
        );
    }

    #[test]
    fn a_changed_price_is_shown_before_it_is_confirmed() {
        let mut c = cart(false);
        ok(c.set_price(
            price(10_000, Source::Live, 0),
            &CartPolicy::default(),
            at(0),
        ));
        let step = c
            .confirm_live(
                price(10_500, Source::Live, 60),
                &CartPolicy::default(),
                at(60),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let ConfirmStep::PriceChanged(change) = step else {
            panic!("expected a price change, got {step:?}")
        };
        assert_eq!(
            (change.old_cents, change.new_cents, change.difference_cents),
            (10_000, 10_500, 500)
        );
        assert!(c.confirmation.is_none());
        let again = c
            .confirm_live(
                price(10_500, Source::Fresh, 60),
                &CartPolicy::default(),
                at(70),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again, ConfirmStep::Confirmed);
        assert_eq!(
            c.confirmation.as_ref().map(|x| x.amount_cents),
            Some(10_500)
        );
        assert_eq!(
            c.confirm_live(price(1, Source::Live, 80), &CartPolicy::default(), at(80)),
            Err(CartRefusal::AlreadyConfirmed)
        );
    }

    #[test]
    fn a_change_is_shown_at_the_step_it_is_found_and_new_choices_are_no_change() {
        let mut c = cart(false);
        let policy = CartPolicy::default();
        assert_eq!(
            ok(c.set_price(
                price(10_000, Source::Fresh, 0),
                &CartPolicy::default(),
                at(0)
            )),
            None
        );
        let change = ok(c.set_price(
            price(10_100, Source::Live, 30),
            &CartPolicy::default(),
            at(30),
        ));
        assert_eq!(change.map(|c| c.difference_cents), Some(100));
        assert!(c.price_change.is_some());
        ok(c.choose_accommodation("cabin".into(), true, at(40)));
        let cabin = c.choices(&policy);
        assert_eq!(cabin.accommodation.as_deref(), Some("cabin"));
        c.drop_price_unless_covering(&cabin);
        assert_eq!(c.price, None, "the base fare does not cover a cabin");
        let priced = CartPrice {
            covers: cabin.clone(),
            ..price(14_600, Source::Live, 40)
        };
        assert_eq!(
            ok(c.set_price(priced, &CartPolicy::default(), at(40))),
            None
        );
        // The default accommodation, chosen or given, is priced as the base fare.
        ok(c.choose_accommodation("seat".into(), true, at(50)));
        ok(c.choose_extras(vec!["wifi".into(), "breakfast".into()], true, at(50)));
        assert_eq!(
            c.choices(&policy),
            Choices {
                accommodation: None,
                extras: vec!["breakfast".into(), "wifi".into()]
            }
        );
        assert!(cart(true).choices(&policy).are_default());
    }

    #[test]
    fn a_drop_at_payment_is_confirmed_and_a_small_rise_absorbed_when_allowed() {
        let mut c = cart(false);
        ok(c.set_price(
            price(10_000, Source::Live, 0),
            &CartPolicy::default(),
            at(0),
        ));
        assert_eq!(
            c.confirm_live(price(9_900, Source::Live, 9), &CartPolicy::default(), at(9)),
            Ok(ConfirmStep::Confirmed)
        );
        let paid = c.confirmation.clone().unwrap_or_else(|| panic!("paid"));
        assert_eq!((paid.amount_cents, paid.absorbed_cents), (9_900, 0));
        assert_eq!(c.price_change.map(|p| p.difference_cents), Some(-100));

        let tolerant = CartPolicy {
            absorb_rise_percent: 2,
            ..CartPolicy::default()
        };
        let mut c = cart(false);
        ok(c.set_price(
            price(10_000, Source::Live, 0),
            &CartPolicy::default(),
            at(0),
        ));
        // 2.01 % is past the tolerance: shown.
        assert!(matches!(
            c.confirm_live(price(10_201, Source::Live, 9), &tolerant, at(9)),
            Ok(ConfirmStep::PriceChanged(_))
        ));
        let mut c = cart(false);
        ok(c.set_price(
            price(10_000, Source::Live, 0),
            &CartPolicy::default(),
            at(0),
        ));
        assert_eq!(
            c.confirm_live(price(10_200, Source::Live, 9), &tolerant, at(9)),
            Ok(ConfirmStep::Confirmed)
        );
        let paid = c.confirmation.clone().unwrap_or_else(|| panic!("paid"));
        assert_eq!((paid.amount_cents, paid.absorbed_cents), (10_000, 200));
        assert_eq!(c.price.map(|p| p.amount_cents), Some(10_000));
        // Another currency is never absorbed.
        let mut c = cart(false);
        ok(c.set_price(
            price(10_000, Source::Live, 0),
            &CartPolicy::default(),
            at(0),
        ));
        let sek = CartPrice {
            currency: "SEK".into(),
            ..price(10_000, Source::Live, 9)
        };
        assert!(matches!(
            c.confirm_live(sek, &tolerant, at(9)),
            Ok(ConfirmStep::PriceChanged(_))
        ));
        assert!(!absorbs(
            MAX_PRICE_CENTS,
            MAX_PRICE_CENTS,
            MAX_ABSORB_RISE_PERCENT
        ));
    }

    #[test]
    fn a_price_that_does_not_cover_the_choices_is_never_paid() {
        // Stored before prices covered choices: a cabin under the base fare.
        let mut c = cart(false);
        ok(c.choose_accommodation("cabin".into(), true, at(1)));
        c.price = Some(price(10_000, Source::Live, 0));
        assert_eq!(
            c.confirm_cached(None, &CartPolicy::default(), at(2)),
            Err(CartRefusal::NoPrice)
        );
        assert!(c.confirmation.is_none());
    }

    #[test]
    fn confirming_on_a_cached_price_follows_the_policy() {
        let mut c = cart(true);
        assert_eq!(
            c.confirm_cached(None, &CartPolicy::default(), at(1)),
            Err(CartRefusal::NoPrice)
        );
        ok(c.set_price(
            price(9_900, Source::LastGood, -3600),
            &CartPolicy::default(),
            at(1),
        ));
        let strict = CartPolicy {
            confirm_on_cached_price: false,
            ..CartPolicy::default()
        };
        assert_eq!(
            c.confirm_cached(None, &strict, at(2)),
            Err(CartRefusal::CachedPriceNotAllowed)
        );
        let young = CartPolicy {
            max_price_age_s: 600,
            ..CartPolicy::default()
        };
        assert_eq!(
            c.confirm_cached(None, &young, at(2)),
            Err(CartRefusal::PriceTooOld { age_s: 3602 })
        );
        // A newer cached price that differs is shown before anything is confirmed.
        let newer = price(10_100, Source::LastGood, -60);
        assert!(matches!(
            c.confirm_cached(Some(newer.clone()), &CartPolicy::default(), at(2)),
            Ok(ConfirmStep::PriceChanged(PriceChange {
                difference_cents: 200,
                ..
            }))
        ));
        assert!(c.confirmation.is_none());
        // The same price again (older or equal) confirms on it.
        assert_eq!(
            c.confirm_cached(Some(newer), &CartPolicy::default(), at(2)),
            Ok(ConfirmStep::Confirmed)
        );
        let confirmation = c
            .confirmation
            .clone()
            .unwrap_or_else(|| panic!("confirmed"));
        assert!(confirmation.on_cached_price);
        assert_eq!(confirmation.amount_cents, 10_100);
        assert_eq!(c.price_age_s(at(2)), Some(62));
    }

    #[test]
    fn a_cart_with_an_owner_is_its_owners_alone() {
        let mut c = cart(false);
        // Without an owner (SigV4, local runs, carts stored before owners):
        // anyone with the id, as before.
        assert!(c.reachable_by(None));
        assert!(c.reachable_by(Some("customer-a")));
        c.owner = Some("customer-a".into());
        assert!(c.reachable_by(Some("customer-a")));
        assert!(!c.reachable_by(Some("customer-b")));
        assert!(!c.reachable_by(Some("customer-a ")));
        assert!(!c.reachable_by(Some("")));
        assert!(!c.reachable_by(None));

        // Stored with its owner; stored without one, read without one.
        let stored = serde_json::to_value(&c).unwrap_or_default();
        assert_eq!(stored["owner"], "customer-a");
        let read: Cart = serde_json::from_value(stored).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read, c);
        let unowned = cart(false);
        let stored = serde_json::to_value(&unowned).unwrap_or_default();
        assert!(stored.get("owner").is_none(), "not written when none");
        let read: Cart = serde_json::from_value(stored).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read.owner, None);
    }

    #[test]
    fn the_step_history_keeps_the_newest_steps_and_is_no_change_of_the_cart() {
        let mut c = cart(false);
        let before = c.clone();
        for s in 0..(MAX_STEP_HISTORY as i64 + 5) {
            c.record_step(StepRecord {
                step: StepKind::Price,
                at: at(s),
                status: 200,
                price_change_shown: s == 1,
            });
        }
        assert_eq!(c.steps.len(), MAX_STEP_HISTORY);
        assert_eq!(c.steps[0].at, at(5), "the oldest were dropped");
        assert!(!c.differs_beyond_steps(&before));
        c.revision += 1;
        assert!(c.differs_beyond_steps(&before));
        // Stored before steps were recorded: no history, read all the same.
        let mut old = serde_json::to_value(&before).unwrap_or_default();
        old.as_object_mut().map(|o| o.remove("steps"));
        let read: Cart = serde_json::from_value(old).unwrap_or_else(|e| panic!("{e}"));
        assert!(read.steps.is_empty());
        assert_eq!(read, before);
    }

    #[test]
    fn settings_fall_back_to_the_default_policy() {
        let settings = CartSettings::from_json(
            r#"{"operators": {"nordic": {"default_accommodation": "deck", "confirm_on_cached_price": false}}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let nordic = OperatorId::new("nordic").unwrap_or_else(|e| panic!("{e}"));
        let other = OperatorId::new("baltic").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(settings.for_operator(&nordic).default_accommodation, "deck");
        assert_eq!(settings.for_operator(&other).default_accommodation, "seat");
        assert!(CartSettings::from_json(r#"{"nope": 1}"#).is_err());
        assert!(matches!(
            CartSettings::from_json(r#"{"operators": {"nordic": {"absorb_rise_percent": 21}}}"#),
            Err(CartSettingsError::Tolerance { percent: 21, .. })
        ));
        assert!(CartSettings::from_json(r#"{"default": {"absorb_rise_percent": 20}}"#).is_ok());
        assert_eq!(
            CartSettings::from_json("").unwrap_or_else(|e| panic!("{e}")),
            CartSettings::default()
        );
    }
}
