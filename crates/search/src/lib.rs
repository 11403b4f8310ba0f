//! The search function: `GET /sailings` and `GET /price` for customers.
//!
//! * this file: [`Search`], the handler: each request's parameters checked
//!   into a [`Question`], and its answer from the lookup as the reply;
//! * `main.rs`: the Lambda function, built once from its environment;
//! * `tests.rs`: the handler on the in-memory gateway.
//!
//! ```text
//! GET /sailings?operator=nordic&from=HEL&to=TLL&date=2026-12-24&passengers=2
//! GET /price?operator=nordic&sailing_id=HEL-TLL-20261224-0615&passengers=2
//! ```
//!
//! Every parameter is required and checked; anything else (a missing, repeated,
//! unknown or malformed parameter, an operator this deployment does not sell)
//! is a 400 problem that names the parameter. A route the operator's `routes`
//! (in `OPERATOR_SETTINGS`) does not list is a 404 (`unknown_route`), asked
//! of nobody. A `sailing_id` is put in the
//! operator's case (`ids` in `OPERATOR_SETTINGS`) and echoed so: its case
//! variants are one question. An answer comes from the recent cache, the
//! operator through the gateway, or the last good answer (see
//! `lifeboat-lookup`), and always says which (`source`: `fresh`, `live`,
//! `last_good`), when the operator gave it (`as_of`) and how old it is
//! (`age_s`). With nothing to show the reply is 503 "unavailable right now"
//! with `Retry-After`, never an empty list that would read as "no sailings".

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use chrono::{DateTime, Utc};
use lifeboat_core::settings::Settings;
use lifeboat_core::{Operation, OperatorId};
use lifeboat_lookup::config::StartupError;
use lifeboat_lookup::http::{HttpRequest, Problem, Reply};
use lifeboat_lookup::params::{self, price_params, required, search_params};
use lifeboat_lookup::{Answer, Looked, Lookup, Mode, Unavailable, UnavailableReason};
use serde_json::{Value, json};

/// Everything the handler needs, built once per Lambda instance.
pub struct Search {
    pub lookup: Lookup,
    pub operators: BTreeSet<OperatorId>,
}

/// A checked question and its reply's leading fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    pub operator: OperatorId,
    pub operation: Operation,
    /// The gateway parameters: the question as the operator is asked it
    /// and as the cache keys it.
    pub params: BTreeMap<String, String>,
    /// The answer's field the reply carries (`sailings` or `price`).
    pub field: &'static str,
    /// The checked parameters, as the reply repeats them.
    pub echo: Value,
}

impl Search {
    /// Build search on AWS from the function's environment; the settings
    /// from the operator config table's item when `OPERATOR_CONFIG_TABLE`
    /// names one that has them.
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
        Ok(Self {
            lookup: lifeboat_lookup::config::lookup(env, clients, config)?,
            operators: lifeboat_lookup::config::operators(env)?,
        })
    }

    /// Answer one HTTP request.
    pub async fn handle(&self, request: &HttpRequest) -> Reply {
        let started = Instant::now();
        let now = self.lookup.clock.now();
        let question = match question(request, &self.operators, &self.lookup.settings, now) {
            Ok(q) => q,
            Err(problem) => return problem.reply(),
        };
        let looked = self
            .lookup
            .answer(
                &question.operator,
                question.operation,
                &question.params,
                Mode::AskOperator,
            )
            .await;
        log(&question, &looked, started);
        match looked.result {
            Ok(answer) => reply(&question, &answer),
            Err(unavailable) => unavailable_reply(&question.operator, unavailable),
        }
    }
}

/// The question a request asks: `GET /sailings` or `GET /price` with every
/// parameter it needs, each once and checked (an operator of `operators`,
/// a sailing id in the operator's case as its `settings` say, a date from
/// yesterday to the horizon at `now`), and no other; otherwise the problem
/// to answer with (404, 405, or 400 naming the parameter).
pub fn question(
    request: &HttpRequest,
    operators: &BTreeSet<OperatorId>,
    settings: &Settings,
    now: DateTime<Utc>,
) -> Result<Question, Problem> {
    let segments = request.segments();
    let operation = match segments.as_slice() {
        ["sailings"] => Operation::Search,
        ["price"] => Operation::Price,
        _ => {
            return Err(Problem::not_found(
                "this service answers GET /sailings and GET /price",
            ));
        }
    };
    if request.method != "GET" {
        return Err(Problem::method_not_allowed("GET"));
    }
    match operation {
        Operation::Search => {
            let q = request.query_map(&["operator", "from", "to", "date", "passengers"])?;
            let operator = params::operator("operator", required(&q, "operator")?, operators)?;
            let from = params::port("from", required(&q, "from")?)?;
            let to = params::port("to", required(&q, "to")?)?;
            if from == to {
                return Err(Problem::invalid("to", "must differ from from"));
            }
            let date = params::date("date", required(&q, "date")?, now)?.to_string();
            let passengers = params::passengers("passengers", required(&q, "passengers")?)?;
            // A route the operator is known not to sail is not asked (after
            // every parameter is checked: a bad one is the 400 naming it).
            if !settings.for_operator(&operator).sails(&from, &to) {
                return Err(Problem::not_found(format!(
                    "{operator} sails no route from {from} to {to}"
                ))
                .with("reason", json!("unknown_route")));
            }
            Ok(Question {
                echo: json!({"operator": operator, "from": from, "to": to, "date": date, "passengers": passengers}),
                params: search_params(&from, &to, &date, passengers),
                operator,
                operation,
                field: "sailings",
            })
        }
        Operation::Price => {
            let q = request.query_map(&["operator", "sailing_id", "passengers"])?;
            let operator = params::operator("operator", required(&q, "operator")?, operators)?;
            // In the operator's case: every spelling is one question.
            let ids = settings.for_operator(&operator).ids;
            let sailing_id = params::id("sailing_id", required(&q, "sailing_id")?, ids)?;
            let passengers = params::passengers("passengers", required(&q, "passengers")?)?;
            Ok(Question {
                echo: json!({"operator": operator, "sailing_id": sailing_id, "passengers": passengers}),
                params: price_params(&sailing_id, passengers),
                operator,
                operation,
                field: "price",
            })
        }
        // No customer route asks an operator for a ping, nor books: a
        // booking is a held order's, never a search's.
        Operation::Ping | Operation::Book => Err(Problem::not_found(
            "this service answers GET /sailings and GET /price",
        )),
    }
}

fn reply(question: &Question, answer: &Answer) -> Reply {
    let body: Option<Value> = serde_json::from_str::<Value>(&answer.body)
        .ok()
        .and_then(|mut v| v.get_mut(question.field).map(Value::take));
    let Some(found) = body else {
        // The consumer checks every answer's shape before it is stored, so
        // this is a stored item gone bad: say so to the logs, not the client.
        tracing::error!(operator = %question.operator, source = answer.source.as_str(), "stored answer has no {}", question.field);
        return unavailable_reply(
            &question.operator,
            Unavailable {
                reason: UnavailableReason::UpstreamError,
                retry_after: lifeboat_lookup::RETRY_AFTER_FAILURE,
            },
        );
    };
    let mut body = question.echo.clone();
    body["source"] = json!(answer.source);
    body["as_of"] = json!(answer.as_of);
    body["age_s"] = json!(answer.age_s);
    body[question.field] = found;
    Reply::ok(body)
}

fn unavailable_reply(operator: &OperatorId, unavailable: Unavailable) -> Reply {
    // The operator's own no: not a retry later, a 404 or 422 now.
    match unavailable.reason {
        UnavailableReason::NotFound => {
            return Problem::not_found(format!("{operator} has no such sailing or route"))
                .with("reason", json!(unavailable.reason))
                .reply();
        }
        UnavailableReason::Rejected => {
            return Problem::new(
                422,
                "question refused",
                format!("{operator} refused this question as it was asked"),
            )
            .with("reason", json!(unavailable.reason))
            .reply();
        }
        _ => {}
    }
    let detail = match unavailable.reason {
        UnavailableReason::BreakerOpen => {
            format!("{operator} is not answering right now and nothing recent is saved for this")
        }
        UnavailableReason::Timeout => {
            format!("{operator} did not answer in time and nothing recent is saved for this")
        }
        UnavailableReason::UpstreamError => {
            format!("{operator} could not answer and nothing recent is saved for this")
        }
        UnavailableReason::StoreUnavailable
        | UnavailableReason::NotFound
        | UnavailableReason::Rejected => "lifeboat could not look this up".to_owned(),
    };
    Problem::unavailable(detail, unavailable.retry_after)
        .with("reason", json!(unavailable.reason))
        .reply()
}

fn log(question: &Question, looked: &Looked, started: Instant) {
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let breaker = looked.breaker.map(|b| b.as_str());
    match &looked.result {
        Ok(answer) => tracing::info!(
            operator = %question.operator, operation = %question.operation, source = answer.source.as_str(),
            age_s = answer.age_s, breaker, requested = looked.requested, store_reads = looked.store_reads,
            elapsed_ms, "answered"
        ),
        Err(u) => tracing::warn!(
            operator = %question.operator, operation = %question.operation, reason = ?u.reason,
            breaker, requested = looked.requested, elapsed_ms, "unavailable"
        ),
    }
}
