//! The cart function: a chosen sailing through accommodation, extras, price
//! and confirm, kept moving while its operator is off sale.
//!
//! * this file: [`CartService`], the handler: its routes, each step a
//!   customer takes on a cart, and the cart's step history;
//! * [`body`]: the JSON bodies customers send, read and checked;
//! * `pricing`: the price of a cart's choices, at each step and at payment;
//! * `hold`: the order held when a cart is confirmed while its operator
//!   cannot book (docs/orders.md);
//! * `order`: that order as a read of the cart shows it, and the
//!   customer's reply when its price rose past the tolerance;
//! * `main.rs`: the Lambda function, built once from its environment;
//! * `tests.rs`: the handler on the in-memory gateway and sale status.
//!
//! ```text
//! POST /carts                          {"operator","sailing_id","from","to","date","passengers"}
//! GET  /carts/{cart_id}
//! PUT  /carts/{cart_id}/accommodation  {"code": "cabin"}
//! PUT  /carts/{cart_id}/extras         {"codes": ["meal", "wifi"]}
//! POST /carts/{cart_id}/price
//! POST /carts/{cart_id}/confirm
//! POST /carts/{cart_id}/order          {"accept": true, "price_cents": 12400}
//! ```
//!
//! The cart asks one question of the sale status: is this operator off sale?
//! If so, every step the customer has not taken yet is decided for them and
//! written on the cart (the operator's default accommodation, extras skipped,
//! the cached price with its age), and the steps that would need the operator
//! are refused with 409 rather than half-done. A `GET` never changes a cart,
//! so a refresh, a saved link or the back button shows exactly what was
//! stored. Back on sale, the cart says `upgrade_available` and the customer
//! may choose again; nothing changes by itself.
//!
//! A price covers the chosen accommodation and extras, itemised as the
//! operator gave it; an off-sale cart keeps the base fare (its default
//! accommodation, no extras). A cart shows a cached price with its age from
//! the moment it opens, and every step on sale asks for the price of what
//! is chosen, so a changed price is shown (`price_changed` beside the cart)
//! at the step the customer is on, not first at payment. Confirm re-prices
//! once more: the same or a lower price is confirmed, a rise within the
//! operator's `absorb_rise_percent` is absorbed (the customer pays the price
//! shown), and any other rise is answered 409 with the old price, the new
//! price and the difference, for the customer to confirm again. While off
//! sale, a cart is confirmed on its cached price (with its age) when the
//! operator's cart policy allows it. See docs/carts.md.
//!
//! A cart confirmed on a cached price (off sale, or the operator not
//! answering) holds an order through the [`OrderStore`] port before the
//! cart is stored as confirmed, within the sailing's seat cap, and its
//! answer says so in `booking` (`status` `held` or `on_request`, the
//! `order_id`). If the order cannot be held (the store fails, or the
//! operator's `seats.past_the_cap` is `not_offered` and the sailing is past
//! it) the confirm is answered with a problem and the cart stays open.
//! From then on a read of the cart shows the order as it stands (`order`),
//! and when the operator's price rose past the tolerance the customer
//! answers it on `POST /carts/{cart_id}/order`, naming the price shown;
//! the move is saved on the order's revision and published as its `Order
//! …` event.
//!
//! Every step a customer takes on a stored cart (opening it included, and
//! refused or failed steps too) is added to the cart's step history with its
//! time and status, and logged as one `cart step` line at INFO;
//! `lifeboat carts --minutes` and docs/carts.md's query count them. A step
//! that changes nothing else is written on the revision read without a new
//! one, so the customer's cart reads exactly the same.
//!
//! With `ApiAuth=jwt` a cart belongs to the subject (the token's `sub`)
//! that opened it: any other caller, with another subject or none, is
//! answered the same 404 as for a cart that does not exist, so a leaked
//! cart id is no way in. A token without a subject opens and reaches no
//! cart (403). Without the JWT authorizer (`ApiAuth=iam`, local runs) no
//! request names a subject, and a cart is reached by its id, as are carts
//! stored before carts had owners.
//!
//! The sailing id is put in the operator's case (`ids` in
//! `OPERATOR_SETTINGS`) before it is stored, priced or cached, so its case
//! variants find the same price. Accommodation and extra codes are kept as
//! sent and passed to the operator's price call (`accommodation`, `extras`).

pub mod body;
mod hold;
mod order;
mod pricing;
#[cfg(test)]
mod tests;

pub use body::MAX_BODY_BYTES;

use std::collections::BTreeSet;
use std::sync::Arc;

use lifeboat_core::OperatorId;
use lifeboat_core::cart::{Cart, CartPolicy, CartRefusal, CartSettings, StepKind, StepRecord};
use lifeboat_core::events::SaleStatus;
use lifeboat_core::ports::{CartStore, EventPublisher, OrderStore, SaleStatusStore, StoreError};
use lifeboat_core::watched::watch;
use lifeboat_lookup::http::{Caller, HttpRequest, Problem, Reply};
use lifeboat_lookup::{Lookup, Mode};
use serde_json::{Value, json};

#[cfg(test)]
use pricing::{fare_of, quote_in};
use pricing::{no_price, shown_change};

/// Environment variable: per-operator cart settings (JSON).
pub const CART_SETTINGS: &str = "CART_SETTINGS";

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Lookup(#[from] lifeboat_lookup::config::StartupError),
    #[error(transparent)]
    Config(#[from] lifeboat_aws::ConfigError),
    #[error(transparent)]
    Settings(#[from] lifeboat_core::cart::CartSettingsError),
}

/// Everything the handler needs, built once per Lambda instance.
pub struct CartService {
    pub carts: Arc<dyn CartStore>,
    pub sale: Arc<dyn SaleStatusStore>,
    /// Where the orders of carts confirmed while their operator cannot
    /// book are held (`ORDERS_TABLE`).
    pub orders: Arc<dyn OrderStore>,
    /// Where a customer's reply to their order's new price is published,
    /// as its `Order …` event (`EVENT_BUS_NAME`).
    pub events: Arc<dyn EventPublisher>,
    pub lookup: Lookup,
    pub operators: BTreeSet<OperatorId>,
    pub settings: CartSettings,
}

/// The longest a step that changes nothing but the cart's history waits for
/// that history to be written (an incident is when such steps are most
/// common, and when the store may be slowest).
const HISTORY_WRITE_LIMIT: std::time::Duration = std::time::Duration::from_millis(200);

impl CartService {
    /// Build the cart on AWS from the function's environment; the
    /// operators' settings from the operator config table's item when
    /// `OPERATOR_CONFIG_TABLE` names one that has them.
    pub async fn from_env(
        env: &lifeboat_aws::Env,
        clients: &lifeboat_aws::Clients,
    ) -> Result<Self, StartupError> {
        let config = lifeboat_lookup::config::operator_config(env, clients).await?;
        Self::from_config(env, clients, &config)
    }

    /// [`Self::from_env`] with the operators' settings already read.
    pub fn from_config(
        env: &lifeboat_aws::Env,
        clients: &lifeboat_aws::Clients,
        config: &lifeboat_core::operator_config::OperatorConfig,
    ) -> Result<Self, StartupError> {
        let lookup = lifeboat_lookup::config::lookup(env, clients, config)?;
        let (metrics, clock) = (lookup.metrics.clone(), lookup.clock.clone());
        Ok(Self {
            carts: watch(Arc::new(clients.cart_store(env)?), &metrics, &clock),
            sale: watch(Arc::new(clients.sale_status_store(env)?), &metrics, &clock),
            orders: watch(Arc::new(clients.order_store(env)?), &metrics, &clock),
            events: watch(Arc::new(clients.publisher(env)?), &metrics, &clock),
            lookup,
            operators: lifeboat_lookup::config::operators(env)?,
            settings: CartSettings::from_json(env.optional(CART_SETTINGS)?.unwrap_or(""))?,
        })
    }

    /// Answer one HTTP request.
    pub async fn handle(&self, request: &HttpRequest) -> Reply {
        match self.route(request).await {
            Ok(reply) => reply,
            Err(problem) => problem.reply(),
        }
    }

    async fn route(&self, request: &HttpRequest) -> Result<Reply, Problem> {
        let method = request.method.as_str();
        match request.segments().as_slice() {
            ["carts"] => match method {
                "POST" => self.open(request).await,
                _ => Err(Problem::method_not_allowed("POST")),
            },
            ["carts", id] => match method {
                "GET" => {
                    let cart = self.load(id, &request.caller).await?;
                    // A read shows the stored cart whatever the status; only
                    // the upgrade offer needs it.
                    let on_sale = self.on_sale(&cart.operator).await.unwrap_or(false);
                    let mut view = self.view(&cart, on_sale);
                    if let Some(order) = self.order_of(&cart).await? {
                        view["order"] = order::order_view(&order, self.lookup.clock.now());
                    }
                    Ok(Reply::ok(view))
                }
                _ => Err(Problem::method_not_allowed("GET")),
            },
            ["carts", id, "order"] => match method {
                "POST" => self.reply(id, request).await,
                _ => Err(Problem::method_not_allowed("POST")),
            },
            ["carts", id, step] => {
                let expected = match *step {
                    "accommodation" | "extras" => "PUT",
                    "price" | "confirm" => "POST",
                    _ => return Err(Problem::not_found(format!("carts have no step {step:?}"))),
                };
                if method != expected {
                    return Err(Problem::method_not_allowed(expected));
                }
                self.step(id, step, request).await
            }
            _ => Err(Problem::not_found(
                "this service answers /carts, /carts/{cart_id}[/step] and /carts/{cart_id}/order",
            )),
        }
    }

    async fn open(&self, request: &HttpRequest) -> Result<Reply, Problem> {
        let owner = subject_of(&request.caller)?;
        let (operator, sailing) = body::new_cart(
            &request.body,
            &self.operators,
            &self.lookup.settings,
            self.lookup.clock.now(),
        )?;
        let on_sale = self.on_sale(&operator).await?;
        let now = self.lookup.clock.now();
        let policy = self.settings.for_operator(&operator);
        let mut cart = Cart::open(
            uuid::Uuid::new_v4().to_string(),
            operator,
            sailing,
            !on_sale,
            policy,
            now,
        );
        cart.owner = owner;
        // A cached price, with its age, from the start: while off sale it is
        // part of the degraded state; on sale it is the price the customer's
        // search showed, until a step asks the operator.
        let cached = match self.price(&cart, policy, Mode::CachedOnly).await {
            Ok(price) => price,
            Err(problem) if !on_sale => return Err(problem),
            Err(_) => None,
        };
        if let Some(price) = cached {
            let _ = cart.set_price(price, policy, now);
        }
        cart.revision = 1;
        let step = StepRecord {
            step: StepKind::Open,
            at: now,
            status: 201,
            price_change_shown: false,
        };
        cart.record_step(step.clone());
        self.save(&cart, None).await?;
        log_step(&cart, &step, on_sale);
        Ok(Reply::json(201, self.view(&cart, on_sale)))
    }

    async fn step(&self, id: &str, step: &str, request: &HttpRequest) -> Result<Reply, Problem> {
        let mut cart = self.load(id, &request.caller).await?;
        if cart.confirmation.is_some() {
            return Err(refusal(CartRefusal::AlreadyConfirmed));
        }
        let read_revision = cart.revision;
        let on_sale = self.on_sale(&cart.operator).await?;
        let now = self.lookup.clock.now();
        let policy = self.settings.for_operator(&cart.operator).clone();
        let before = cart.clone();
        if !on_sale {
            cart.degrade(&policy, now);
        }
        let outcome = self.apply(&mut cart, step, request, on_sale, &policy).await;
        let record = StepRecord {
            step: step_kind(step),
            at: now,
            status: match &outcome {
                Ok((status, ..)) => *status,
                Err(problem) => problem.status,
            },
            price_change_shown: matches!(&outcome, Ok((_, Some(("price_changed", _, _)), _))),
        };
        cart.record_step(record.clone());
        // The off-sale choices are stored even when the step itself is
        // refused, so the next read shows what the refusal said.
        if cart.differs_beyond_steps(&before) {
            cart.revision = read_revision + 1;
            self.save(&cart, Some(read_revision)).await?;
        } else {
            // Only the step history changed: it is written on the revision
            // read, without a new one, so the customer's cart reads the same.
            // Losing it (a concurrent step, a store error, a store slower
            // than HISTORY_WRITE_LIMIT) costs the history one entry, never
            // the customer their answer or more than that wait.
            let written = tokio::time::timeout(
                HISTORY_WRITE_LIMIT,
                self.carts.save(&cart, Some(read_revision)),
            )
            .await;
            let error = match written {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some(format!("no answer within {HISTORY_WRITE_LIMIT:?}")),
            };
            if let Some(error) = error {
                tracing::warn!(cart = %log_ref(&cart.cart_id), operator = %cart.operator, step, error, "step not added to the cart's history");
            }
        }
        log_step(&cart, &record, on_sale);
        let (status, extra, booking) = outcome?;
        let mut view = self.view(&cart, on_sale);
        if let Some(booking) = booking {
            view["booking"] = booking;
        }
        Ok(match extra {
            // A step that went through and found the price changed: the
            // cart, with the change beside it.
            Some((name, value, _)) if status == 200 => {
                view[name] = value;
                Reply::json(status, view)
            }
            // A price to show before confirming: a problem document (RFC
            // 9457) with the price and the cart as extension members.
            Some((name, value, detail)) => Problem::new(status, title_of(name), detail)
                .with(name, value)
                .with("cart", view)
                .reply(),
            None => Reply::json(status, view),
        })
    }

    /// One step on a loaded cart: the status to answer and, for a 409 with
    /// a price to show, the member that carries it.
    async fn apply(
        &self,
        cart: &mut Cart,
        step: &str,
        request: &HttpRequest,
        on_sale: bool,
        policy: &CartPolicy,
    ) -> Result<StepReply, Problem> {
        let now = self.lookup.clock.now();
        match step {
            "accommodation" => {
                let code = body::accommodation(&request.body)?;
                // Kept to undo a choice the operator will not price.
                let before = cart.clone();
                cart.choose_accommodation(code, on_sale, now)
                    .map_err(refusal)?;
                self.reprice_choices(cart, before, policy).await
            }
            "extras" => {
                let codes = body::extras(&request.body)?;
                let before = cart.clone();
                cart.choose_extras(codes, on_sale, now).map_err(refusal)?;
                self.reprice_choices(cart, before, policy).await
            }
            "price" => {
                // On sale the operator is asked, not a recent answer: this is
                // the last price the customer sees before paying.
                let mode = if on_sale {
                    Mode::Reprice
                } else {
                    Mode::CachedOnly
                };
                match self.price(cart, policy, mode).await? {
                    Some(price) => {
                        let change = cart.set_price(price, policy, now).map_err(refusal)?;
                        Ok((200, change.map(shown_change), None))
                    }
                    None => Err(no_price(cart)),
                }
            }
            _ => self.confirm(cart, on_sale, policy).await,
        }
    }

    /// Is the operator on sale? An operator never switched is on sale. A
    /// status that cannot be read is a 503: deciding "off sale" on a read
    /// error would store degraded choices on carts of an operator that is up.
    async fn on_sale(&self, operator: &OperatorId) -> Result<bool, Problem> {
        match self.sale.load(operator).await {
            Ok(record) => Ok(record.is_none_or(|r| r.status() == SaleStatus::OnSale)),
            Err(e) => {
                tracing::error!(operator = %operator, error = %e, "sale status not read");
                Err(Problem::unavailable(
                    "carts cannot be changed right now",
                    lifeboat_lookup::RETRY_AFTER_FAILURE,
                ))
            }
        }
    }

    /// The cart `id` if `caller` may reach it. A cart that is not there
    /// and a cart of another subject get the same 404, so the answer says
    /// nothing about carts that are not the caller's.
    async fn load(&self, id: &str, caller: &Caller) -> Result<Cart, Problem> {
        let subject = subject_of(caller)?;
        let no_cart = || Problem::not_found(format!("no cart {id:?}"));
        if uuid::Uuid::parse_str(id).is_err() {
            return Err(no_cart());
        }
        match self.carts.get(id).await {
            Ok(Some(cart)) if cart.reachable_by(subject.as_deref()) => Ok(cart),
            Ok(Some(cart)) => {
                // Neither subject is logged: the fingerprint is enough to
                // find the cart's own lines.
                tracing::warn!(cart = %log_ref(&cart.cart_id), operator = %cart.operator, "cart asked for by a caller it does not belong to; answered 404");
                Err(no_cart())
            }
            Ok(None) => Err(no_cart()),
            Err(e) => Err(store_problem(&e)),
        }
    }

    async fn save(&self, cart: &Cart, expected: Option<u64>) -> Result<(), Problem> {
        self.carts
            .save(cart, expected)
            .await
            .map_err(|e| store_problem(&e))
    }

    fn view(&self, cart: &Cart, on_sale: bool) -> Value {
        let now = self.lookup.clock.now();
        let price = cart.price.as_ref().map(|p| {
            json!({
                "amount_cents": p.amount_cents, "currency": p.currency, "source": p.source,
                "as_of": p.as_of, "age_s": lifeboat_core::cache::age_s(p.as_of, now),
                "parts": p.parts, "covers": p.covers, "absorbed_cents": p.absorbed_cents,
            })
        });
        json!({
            "cart_id": cart.cart_id,
            "revision": cart.revision,
            "operator": cart.operator,
            "sailing": cart.sailing,
            "status": if cart.confirmation.is_some() { "confirmed" } else { "open" },
            "accommodation": cart.accommodation,
            "extras": cart.extras,
            "price": price,
            "degraded": cart.degraded,
            "price_change": cart.price_change,
            "confirmation": cart.confirmation,
            "off_sale": !on_sale,
            "upgrade_available": cart.upgrade_available(on_sale),
        })
    }
}

/// The subject a cart is kept for: the token's, with the JWT authorizer;
/// none without it. A token that names no subject could only open carts
/// anyone with their id reaches, so it is refused.
fn subject_of(caller: &Caller) -> Result<Option<String>, Problem> {
    match caller {
        Caller::Unnamed => Ok(None),
        Caller::Token { subject } => match subject.as_deref() {
            Some(subject) if !subject.is_empty() => Ok(Some(subject.to_owned())),
            _ => Err(Problem::new(
                403,
                "forbidden",
                "the token names no subject (its sub claim): a cart is kept for the subject that opens it",
            )),
        },
    }
}

/// The step a `/carts/{id}/{step}` path names (the router lets only these
/// four through).
fn step_kind(step: &str) -> StepKind {
    match step {
        "accommodation" => StepKind::Accommodation,
        "extras" => StepKind::Extras,
        "price" => StepKind::Price,
        _ => StepKind::Confirm,
    }
}

/// The one INFO line per customer step (opening a cart included), which
/// docs/carts.md's Logs Insights query counts: the cart by its fingerprint
/// only, and `started`, `paid` and `price_change_shown` as 0 or 1 so the
/// query can sum them.
fn log_step(cart: &Cart, record: &StepRecord, on_sale: bool) {
    let paid = record.step == StepKind::Confirm && record.status == 200;
    tracing::info!(
        cart = %log_ref(&cart.cart_id),
        operator = %cart.operator,
        step = record.step.as_str(),
        status = record.status,
        on_sale,
        degraded = cart.degraded.is_some(),
        confirmed = cart.confirmation.is_some(),
        started = u8::from(record.step == StepKind::Open),
        paid = u8::from(paid),
        price_change_shown = u8::from(record.price_change_shown),
        "cart step"
    );
}

/// How a cart is named in logs: the cart id is what lets a caller act on the
/// cart, so logs carry a stable fingerprint of it (12 hex digits of SipHash
/// with fixed keys), enough to follow one cart through the log lines and
/// not enough to act on it.
fn log_ref(cart_id: &str) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    cart_id.hash(&mut hasher);
    format!("{:012x}", hasher.finish() >> 16)
}

fn title_of(member: &str) -> &'static str {
    match member {
        "price_changed" => "price changed",
        _ => "price to confirm",
    }
}

/// A step's answer: the status; for a 409 that shows a price, the member
/// carrying it and what to tell the customer; and for a confirm that held
/// an order, the answer's `booking` member.
type StepReply = (
    u16,
    Option<(&'static str, Value, &'static str)>,
    Option<Value>,
);

fn refusal(r: CartRefusal) -> Problem {
    let code = match r {
        CartRefusal::AlreadyConfirmed => "already_confirmed",
        CartRefusal::OffSale { .. } => "off_sale",
        CartRefusal::CachedPriceNotAllowed => "cached_price_not_allowed",
        CartRefusal::NoPrice => "no_price",
        CartRefusal::PriceTooOld { .. } => "price_too_old",
    };
    Problem::new(409, "step not possible now", r.to_string()).with("reason", json!(code))
}

fn store_problem(e: &StoreError) -> Problem {
    match e {
        StoreError::Conflict(_) => Problem::new(
            409,
            "cart changed meanwhile",
            "the cart was changed by another request: read it again",
        ),
        _ => {
            tracing::error!(error = %e, "cart store failed");
            Problem::unavailable(
                "carts cannot be reached right now",
                lifeboat_lookup::RETRY_AFTER_FAILURE,
            )
        }
    }
}
