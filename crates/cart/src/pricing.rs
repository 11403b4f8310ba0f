//! Pricing a cart: the price of its choices (the operator's price answer,
//! else the cached base fare), pricing at each step, and payment
//! (docs/prices.md).

use lifeboat_core::Operation;
use lifeboat_core::cart::{
    Cart, CartPolicy, CartPrice, CartRefusal, Choices, ConfirmStep, PriceChange,
};
use lifeboat_core::price::{self as money, PartKind, PricePart, Quote};
use lifeboat_lookup::http::Problem;
use lifeboat_lookup::params::{price_params_for, search_params};
use lifeboat_lookup::{Answer, Mode, Source, UnavailableReason};
use serde_json::{Value, json};

use crate::{CartService, StepReply, log_ref, refusal};

impl CartService {
    /// Price the choices a step just made (on sale), so the customer sees
    /// the price of what they chose, and any change of it, at this step
    /// rather than at payment. Choices the operator does not sell are
    /// refused (422) and undone; when no price can be found now the choice
    /// stands, without a price that would not cover it.
    pub(crate) async fn reprice_choices(
        &self,
        cart: &mut Cart,
        before: Cart,
        policy: &CartPolicy,
    ) -> Result<StepReply, Problem> {
        let now = self.lookup.clock.now();
        match self.price(cart, policy, Mode::AskOperator).await {
            Ok(Some(price)) => {
                let change = cart.set_price(price, policy, now).map_err(refusal)?;
                Ok((200, change.map(shown_change), None))
            }
            Err(problem) if problem.status == 422 => {
                *cart = before;
                Err(problem)
            }
            Ok(None) | Err(_) => {
                cart.drop_price_unless_covering(&cart.choices(policy));
                Ok((200, None, None))
            }
        }
    }

    /// Confirm (payment). On sale: re-price through the gateway and settle
    /// on that price (`Cart::confirm_live`: confirmed, absorbed, or shown
    /// first). When the operator cannot price it (off sale, or not
    /// answering): the cached price, as the policy allows.
    pub(crate) async fn confirm(
        &self,
        cart: &mut Cart,
        on_sale: bool,
        policy: &CartPolicy,
    ) -> Result<StepReply, Problem> {
        let now = self.lookup.clock.now();
        // On sale, one re-price: it already falls back to every cached price
        // there is. Off sale, the cache only.
        let mode = if on_sale {
            Mode::Reprice
        } else {
            Mode::CachedOnly
        };
        let mut booking = None;
        let step = match self.price(cart, policy, mode).await? {
            Some(price) if price.source == Source::Live => {
                cart.confirm_live(price, policy, now).map_err(refusal)?
            }
            cached => {
                // The cart as it was, should its order not be held.
                let unconfirmed = cart.clone();
                // Not a live price: the operator is off sale or did not
                // answer; what the cache holds is all there is.
                let step = match cart.confirm_cached(cached, policy, now) {
                    // Choices made as the operator went down and never
                    // priced: off sale they give way to the defaults, and
                    // the customer is shown the base fare to confirm.
                    Err(CartRefusal::NoPrice)
                        if !on_sale && cart.default_unpriced_choices(policy, now) =>
                    {
                        tracing::info!(cart = %log_ref(&cart.cart_id), operator = %cart.operator, "choices no price covers gave way to the off-sale defaults");
                        let base = self.price(cart, policy, Mode::CachedOnly).await?;
                        cart.confirm_cached(base, policy, now)
                    }
                    other => other,
                };
                let step = step.map_err(|r| match r {
                    CartRefusal::CachedPriceNotAllowed if !on_sale => refusal(r),
                    CartRefusal::AlreadyConfirmed | CartRefusal::OffSale { .. } => refusal(r),
                    other => cannot_price_now(cart, other),
                })?;
                if step == ConfirmStep::Confirmed {
                    tracing::info!(cart = %log_ref(&cart.cart_id), operator = %cart.operator, age_s = cart.price_age_s(now), "confirmed on a cached price");
                    // The operator cannot book it now: its order is held,
                    // or the cart is not confirmed.
                    match self.hold_order(cart, on_sale, policy).await {
                        Ok(held) => booking = Some(held),
                        Err(problem) => {
                            *cart = unconfirmed;
                            return Err(problem);
                        }
                    }
                }
                step
            }
        };
        Ok(match step {
            // A drop found at payment is confirmed, and shown with the
            // confirmation.
            ConfirmStep::Confirmed => (
                200,
                cart.price_change
                    .clone()
                    .filter(|change| change.at == now)
                    .map(shown_change),
                booking,
            ),
            ConfirmStep::PriceChanged(change) => (
                409,
                Some((
                    "price_changed",
                    json!(change),
                    "the price changed: confirm again to accept the new price",
                )),
                None,
            ),
            ConfirmStep::PriceToConfirm(price) => (
                409,
                Some((
                    "price_to_confirm",
                    json!({"amount_cents": price.amount_cents, "currency": price.currency}),
                    "this is the price: confirm again to accept it",
                )),
                None,
            ),
        })
    }

    /// The price of the cart's choices: the operator's price answer for them
    /// (as `mode` allows); for the default choices (the base fare) else the
    /// sailing's fare in the cached search answer for the same route, date
    /// and passengers (the operator's own figure, with that answer's age).
    /// `None` when nothing can be shown; 422 when the operator refuses to
    /// price choices it does not sell.
    pub(crate) async fn price(
        &self,
        cart: &Cart,
        policy: &CartPolicy,
        mode: Mode,
    ) -> Result<Option<CartPrice>, Problem> {
        let s = &cart.sailing;
        // A cart stored before its operator's `ids` said so is asked in the
        // operator's case too.
        let ids = self.lookup.settings.for_operator(&cart.operator).ids;
        let sailing_id = ids.normalise(&s.sailing_id);
        let choices = cart.choices(policy);
        let priced = self
            .lookup
            .answer(
                &cart.operator,
                Operation::Price,
                &price_params_for(&sailing_id, s.passengers, &choices),
                mode,
            )
            .await;
        match priced.result {
            Ok(answer) => match quote_in(&answer.body) {
                Ok(quote) => {
                    match choices.covered_by(&quote.parts, &policy.default_accommodation) {
                        Ok(()) => return Ok(Some(cart_price(quote, &answer, choices))),
                        // Never the base fare under a cabin: no price rather than
                        // one that was not asked for these choices.
                        Err(error) => {
                            tracing::error!(operator = %cart.operator, %error, ?choices, "the operator's price does not cover the choices");
                            return Ok(None);
                        }
                    }
                }
                Err(error) => {
                    tracing::error!(operator = %cart.operator, %error, "stored price answer is not a price");
                }
            },
            Err(u) if u.reason == UnavailableReason::StoreUnavailable => {
                return Err(Problem::unavailable(
                    "lifeboat could not look the price up",
                    u.retry_after,
                ));
            }
            // The operator refused the question with these choices (a 4xx
            // other than one refusing lifeboat's credentials): the choices
            // are not sold, and asking again will not change that.
            Err(u) if u.reason.is_refusal() && !choices.are_default() => {
                return Err(Problem::new(
                    422,
                    "choices not sold",
                    format!(
                        "{} does not price the accommodation or extras chosen: choose again",
                        cart.operator
                    ),
                ));
            }
            Err(_) => {}
        }
        if !choices.are_default() {
            // A search's fare is the base fare: it covers no other choices.
            return Ok(None);
        }
        let Some((answer, sailing)) = self.cached_sailing(cart).await else {
            return Ok(None);
        };
        Ok(fare_of(&sailing).map(|fare| cart_price(fare, &answer, choices)))
    }

    /// The cart's sailing as the operator's cached search answer for its
    /// route, date and passengers lists it (its fare, its seats left), with
    /// that answer; `None` when nothing cached names it.
    pub(crate) async fn cached_sailing(&self, cart: &Cart) -> Option<(Answer, Value)> {
        let s = &cart.sailing;
        let ids = self.lookup.settings.for_operator(&cart.operator).ids;
        let sailing_id = ids.normalise(&s.sailing_id);
        let answer = self
            .lookup
            .answer(
                &cart.operator,
                Operation::Search,
                &search_params(&s.from, &s.to, &s.date, s.passengers),
                Mode::CachedOnly,
            )
            .await
            .result
            .ok()?;
        let body: Value = serde_json::from_str(&answer.body).ok()?;
        let sailing = body
            .get("sailings")?
            .as_array()?
            .iter()
            .find(|x| {
                x.get("sailing_id")
                    .and_then(Value::as_str)
                    .is_some_and(|id| ids.same(id, &sailing_id))
            })?
            .clone();
        Some((answer, sailing))
    }
}

/// The price in a price answer's body, checked (a sane amount in a known
/// currency, parts that add up).
pub(crate) fn quote_in(body: &str) -> Result<Quote, String> {
    let value: Value = serde_json::from_str(body).map_err(|e| e.to_string())?;
    let price = value.get("price").ok_or("no price")?;
    money::quote(price).map_err(|e| e.to_string())
}

/// A search answer's fare of one sailing, if it is a price at all; its one
/// part is the fare.
pub(crate) fn fare_of(sailing: &Value) -> Option<Quote> {
    let fare =
        json!({"amount_cents": sailing.get("price_cents")?, "currency": sailing.get("currency")?});
    let quote = money::quote(&fare).ok()?;
    Some(Quote {
        parts: vec![PricePart {
            kind: PartKind::Fare,
            code: None,
            amount_cents: quote.amount_cents,
        }],
        ..quote
    })
}

fn cart_price(quote: Quote, answer: &Answer, covers: Choices) -> CartPrice {
    CartPrice {
        amount_cents: quote.amount_cents,
        currency: quote.currency,
        source: answer.source,
        as_of: answer.as_of,
        parts: quote.parts,
        covers,
        absorbed_cents: 0,
    }
}

/// A change found at a step before payment, shown with the step's answer.
pub(crate) fn shown_change(change: PriceChange) -> (&'static str, Value, &'static str) {
    (
        "price_changed",
        json!(change),
        "the price of your choices changed: this is the new price",
    )
}

/// The operator cannot price the cart now and the cached price will not do:
/// try again later.
fn cannot_price_now(cart: &Cart, r: CartRefusal) -> Problem {
    Problem::unavailable(
        format!(
            "{} cannot price this cart right now ({r}); try again shortly",
            cart.operator
        ),
        lifeboat_lookup::RETRY_AFTER_FAILURE,
    )
}

pub(crate) fn no_price(cart: &Cart) -> Problem {
    Problem::unavailable(
        format!(
            "no price for {} is known right now; try again shortly",
            cart.sailing.sailing_id
        ),
        lifeboat_lookup::RETRY_AFTER_FAILURE,
    )
}
