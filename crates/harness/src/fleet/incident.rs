//! One incident of the fleet's day as its report gives it: when the breaker
//! saw it, what its operator's own customers got, and whether an incident
//! the breaker is not meant to open for (a brownout) was handled without it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use lifeboat_core::{BreakerState, Operation, OperatorId};
use lifeboat_sim::Transition;
use serde::Serialize;

use super::Incident;
use super::report::{AFTERMATH, Inputs, secs};

/// An incident the breaker is not meant to open for is handled when its
/// customers fare as bystanders must (docs/fleet.md's targets): at least
/// this share of the answerable answered live or fresh...
const HANDLED_LIVE_OR_FRESH_PCT: f64 = 99.0;
/// ...and their live answers' p95 at most this many times the healthy
/// day's.
const HANDLED_P95_OVER_BASELINE: f64 = 1.1;

#[derive(Debug, Clone, Serialize)]
pub struct IncidentReport {
    pub operator: OperatorId,
    pub kind: &'static str,
    /// What the operator did while down.
    pub mode: &'static str,
    pub start_s: f64,
    pub end_s: f64,
    /// That operator's traffic before the incident.
    pub searches_per_s: f64,
    /// Its search budget.
    pub budget_ms: u64,
    /// Start → breaker open; null if it did not open.
    pub detection_s: Option<f64>,
    /// Start → the first customer's call (a consumer's, not a probe or a
    /// hang-check ping) the operator received in the incident: the first
    /// call that could see it. A busy operator's customers are answered
    /// from the recent cache for minutes without a call, so its first call
    /// can come long after the start; detection is judged from it. Null if
    /// none came before the incident's end.
    pub first_call_s: Option<f64>,
    /// End → breaker closed; null if it did not open (0 if it was closed
    /// again when the operator came back).
    pub recovery_s: Option<f64>,
    /// Customers' calls (a consumer's, not a hang-check ping) the operator
    /// received while its breaker was open.
    pub calls_while_open: u64,
    /// Hang-check pings the consumers sent it while its breaker was open
    /// (trains started before the breaker opened).
    pub pings_while_open: u64,
    pub probe_calls: u64,
    /// Writes to the off-sale switch for the operator during the incident.
    pub sale_writes: usize,
    /// What the operator's own customers saw, from the incident's start to
    /// two minutes after its end: how an incident the breaker is not meant
    /// to open for (a brownout) is judged.
    pub customers: SearchShares,
    /// For an incident the breaker is not meant to open for (a brownout):
    /// whether it was handled without it, the breaker never opening and
    /// the customers answered as bystanders must be (at least 99 % of the
    /// answerable live or fresh, live p95 within 10 % of the healthy
    /// day's). Null for the incidents the breaker is meant to open for.
    pub handled: Option<bool>,
    /// The operator's breaker from the incident's start to two minutes
    /// after its recovery (or the run's end): each move, with its reason.
    pub breaker: Vec<BreakerMove>,
    /// The switch's probes of the operator from 30 s before the incident's
    /// end to its recovery (or the run's end): what each got back.
    pub last_probes: Vec<ProbeSeen>,
}

/// One probe, seconds into the run.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeSeen {
    pub at_s: f64,
    /// The answer's class (`ok`, `timeout`, `refused`, …).
    pub class: &'static str,
    pub ms: u64,
}

/// One move of a breaker, seconds into the run.
#[derive(Debug, Clone, Serialize)]
pub struct BreakerMove {
    pub at_s: f64,
    pub from: BreakerState,
    pub to: BreakerState,
    pub reason: String,
}

/// A group of searches and how they were answered: an incident's own
/// customers ([`IncidentReport::customers`]) and the bystanders
/// ([`super::report::Bystanders`]) are counted alike.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SearchShares {
    pub searches: usize,
    pub live_or_fresh: usize,
    /// Searches answered live or fresh, or whose question the operator
    /// answered within its budget (as [`super::report::Healthy::answerable`]).
    pub answerable: usize,
    /// `live_or_fresh` as a percentage of all `searches` (the raw share).
    pub live_or_fresh_pct: f64,
    /// `live_or_fresh` as a percentage of the `answerable` (the isolation
    /// figure).
    pub live_or_fresh_of_answerable_pct: f64,
    /// p95 of the answers the operator gave live (cache hits answer in no
    /// time and would hide the stream's delay).
    pub p95_ms: Option<u64>,
}

/// One operator's breaker over the day.
pub(super) struct Timeline<'a> {
    pub(super) transitions: Vec<&'a Transition>,
}

impl Timeline<'_> {
    fn state_at(&self, t: DateTime<Utc>) -> BreakerState {
        self.transitions
            .iter()
            .take_while(|tr| tr.at <= t)
            .last()
            .map_or(BreakerState::Closed, |tr| tr.to)
    }
}

pub(super) fn incident_report(
    inputs: &Inputs<'_>,
    (index, incident): (usize, &Incident),
    operator: &OperatorId,
    timeline: &Timeline<'_>,
    at: impl Fn(Duration) -> DateTime<Utc>,
) -> IncidentReport {
    let (start, end) = (at(incident.start), at(incident.end));
    let opened = timeline
        .transitions
        .iter()
        .find(|t| t.to == BreakerState::Open && start <= t.at && t.at <= end)
        .map(|t| t.at);
    let recovered = opened.and_then(|_| {
        if timeline.state_at(end).target() == lifeboat_core::ConsumerTarget::Real
            && timeline.state_at(end) != BreakerState::HalfOpen
        {
            return Some(end);
        }
        timeline
            .transitions
            .iter()
            .find(|t| t.to == BreakerState::Closed && t.at >= end)
            .map(|t| t.at)
    });
    // Counted up to the recovery; a breaker that opened and never closed
    // again, to the end of the run; one that never opened in the incident,
    // to the incident's end (what follows is not the incident's).
    let until = recovered.unwrap_or(if opened.is_some() { inputs.ended } else { end });
    // Calls the operator received while its breaker was open: customers'
    // (a consumer's question) and hang-check pings apart.
    let while_open = |ping: bool| {
        inputs
            .calls
            .iter()
            .filter(|c| c.rank == incident.rank && !c.probe && c.ping == ping)
            .filter(|c| start <= c.at && c.at <= until)
            .filter(|c| timeline.state_at(c.at) == BreakerState::Open)
            .count() as u64
    };
    let first_call = inputs
        .calls
        .iter()
        .filter(|c| c.rank == incident.rank && !c.probe && !c.ping)
        .filter(|c| start <= c.at && c.at <= end)
        .map(|c| c.at)
        .min();
    let calls_while_open = while_open(false);
    let pings_while_open = while_open(true);
    let probe_calls = inputs
        .calls
        .iter()
        .filter(|c| c.rank == incident.rank && c.probe && start <= c.at && c.at <= until)
        .count() as u64;
    let sale_until = until + chrono::TimeDelta::from_std(AFTERMATH).unwrap_or_default();
    let sale_writes = inputs
        .sale_writes
        .iter()
        .filter(|w| &w.operator == operator && start <= w.at && w.at <= sale_until)
        .count();
    let customers = inputs.searches.incident(index).unwrap_or_default();
    let budget = inputs
        .settings
        .for_operator(operator)
        .budgets
        .for_operation(Operation::Search)
        .timeout;
    IncidentReport {
        operator: operator.clone(),
        kind: incident.kind.as_str(),
        mode: incident.kind.mode().as_str(),
        start_s: incident.start.as_secs_f64(),
        end_s: incident.end.as_secs_f64(),
        searches_per_s: inputs.script.rate_of(incident.rank),
        budget_ms: u64::try_from(budget.as_millis()).unwrap_or(u64::MAX),
        detection_s: opened.map(|o| secs(start, o)),
        first_call_s: first_call.map(|c| secs(start, c)),
        recovery_s: recovered.map(|r| secs(end, r)),
        calls_while_open,
        pings_while_open,
        probe_calls,
        sale_writes,
        handled: (!incident.kind.should_trip())
            .then(|| opened.is_none() && handled(&customers, inputs.searches.healthy_p95_ms())),
        customers,
        last_probes: inputs
            .calls
            .iter()
            .filter(|c| c.rank == incident.rank && c.probe)
            .filter(|c| end - chrono::TimeDelta::seconds(30) <= c.at && c.at <= until)
            .filter_map(|c| {
                let (class, took) = c.probed?;
                Some(ProbeSeen {
                    at_s: secs(inputs.script.start, c.at),
                    class,
                    ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
                })
            })
            .collect(),
        breaker: timeline
            .transitions
            .iter()
            .filter(|t| start <= t.at && t.at <= sale_until)
            .map(|t| BreakerMove {
                at_s: secs(inputs.script.start, t.at),
                from: t.from,
                to: t.to,
                reason: t.reason.clone(),
            })
            .collect(),
    }
}

/// Whether an incident's customers fared as bystanders must, against the
/// healthy day's live p95.
fn handled(customers: &SearchShares, baseline_p95_ms: Option<u64>) -> bool {
    let p95_holds = match (customers.p95_ms, baseline_p95_ms) {
        (Some(p95), Some(baseline)) => p95 as f64 <= baseline as f64 * HANDLED_P95_OVER_BASELINE,
        // No live answer to judge, or no day to judge it against.
        (None, _) => true,
        (Some(_), None) => false,
    };
    customers.searches > 0
        && customers.live_or_fresh_of_answerable_pct >= HANDLED_LIVE_OR_FRESH_PCT
        && p95_holds
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A brownout is handled when its customers fare as bystanders must;
    /// each condition, broken alone, makes it not handled.
    #[test]
    fn an_incident_is_handled_only_when_its_customers_fare_as_bystanders_must() {
        let fared = SearchShares {
            searches: 1000,
            live_or_fresh: 990,
            answerable: 1000,
            live_or_fresh_pct: 99.0,
            live_or_fresh_of_answerable_pct: 99.0,
            p95_ms: Some(3300),
        };
        assert!(handled(&fared, Some(3000)));
        let worse = |f: fn(&mut SearchShares)| {
            let mut c = fared.clone();
            f(&mut c);
            handled(&c, Some(3000))
        };
        assert!(!worse(|c| c.live_or_fresh_of_answerable_pct = 98.9));
        assert!(!worse(|c| c.p95_ms = Some(3301)));
        assert!(!worse(|c| c.searches = 0));
        assert!(!handled(&fared, None), "no healthy day to judge by");
    }
}
