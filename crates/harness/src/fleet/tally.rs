//! The day's searches folded as their customers are answered
//! ([`SearchTally`]): the healthy and bystander figures of the report,
//! kept as counts and a latency histogram, not as lines.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};
use lifeboat_core::ports::StoredRequest;
use lifeboat_core::request::OutcomeKind;
use lifeboat_core::settings::Settings;
use lifeboat_core::{Operation, OperatorId};

use super::day::SearchSeen;
use super::report::{Bystanders, Healthy, SearchShares, is_on, pct, secs};
use super::{FleetScript, Incident};

/// Which figure a search counts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Group {
    /// No incident on.
    Healthy,
    /// Another operator's incident on, none of its own.
    Bystander,
    /// Its own incident on (by index in the day's incidents): what the
    /// incident's customers saw.
    Own(usize),
}

/// One group's searches, counted as they are answered.
#[derive(Debug, Default)]
struct GroupTally {
    searches: usize,
    live_or_fresh: usize,
    /// Searches not answered live or fresh whose question the operator
    /// answered within its budget (known once the request is seen).
    answerable_otherwise: usize,
    /// How many answers the operator gave live took each number of
    /// milliseconds (cache hits answer in no time and would hide the
    /// stream's delay).
    live_ms: BTreeMap<u64, u64>,
}

impl GroupTally {
    fn answerable(&self) -> usize {
        self.live_or_fresh + self.answerable_otherwise
    }

    /// The group's searches and how they were answered.
    fn shares(&self) -> SearchShares {
        SearchShares {
            searches: self.searches,
            live_or_fresh: self.live_or_fresh,
            answerable: self.answerable(),
            live_or_fresh_pct: pct(self.live_or_fresh, self.searches),
            live_or_fresh_of_answerable_pct: pct(self.live_or_fresh, self.answerable()),
            p95_ms: self.live_p95_ms(),
        }
    }

    /// The 95th percentile of the live answers' latencies (the value at
    /// rank `ceil(0.95 n)`, as sorting them all would give).
    fn live_p95_ms(&self) -> Option<u64> {
        let n: u64 = self.live_ms.values().sum();
        if n == 0 {
            return None;
        }
        let rank = ((n as f64) * 0.95).ceil().max(1.0) as u64;
        let mut seen = 0;
        self.live_ms.iter().find_map(|(ms, count)| {
            seen += count;
            (seen >= rank).then_some(*ms)
        })
    }
}

/// A search not answered live or fresh, until its operator's requests for
/// the same question are seen.
#[derive(Debug)]
struct Unanswered {
    at: DateTime<Utc>,
    group: Group,
    answerable: bool,
}

/// The day's searches folded as they are answered, so that a long day at a
/// marketplace's load keeps counts, not lines: each search goes into the
/// healthy or bystander figures by the incidents on at its time; one not
/// answered live or fresh waits (by operator and question) for the requests
/// that tell whether its operator answered that question within its budget,
/// which the store shows as it lets them go or at the end of the day.
pub(crate) struct SearchTally {
    start: DateTime<Utc>,
    operators: Vec<OperatorId>,
    incidents: Vec<Incident>,
    settings: Settings,
    healthy: GroupTally,
    bystanders: GroupTally,
    /// Per incident of the day, in order.
    own: Vec<GroupTally>,
    unanswered: HashMap<(OperatorId, [String; 4]), Vec<Unanswered>>,
}

impl SearchTally {
    pub(crate) fn new(script: &FleetScript, operators: &[OperatorId]) -> Self {
        let incidents = script.incidents();
        Self {
            start: script.start,
            operators: operators.to_vec(),
            own: incidents.iter().map(|_| GroupTally::default()).collect(),
            incidents,
            settings: script.settings.clone(),
            healthy: GroupTally::default(),
            bystanders: GroupTally::default(),
            unanswered: HashMap::new(),
        }
    }

    /// Count one search as its customer saw it.
    pub(crate) fn search(&mut self, seen: SearchSeen) {
        let start = self.start;
        let at = |d: Duration| start + chrono::TimeDelta::from_std(d).unwrap_or_default();
        let mut on = self
            .incidents
            .iter()
            .enumerate()
            .filter(|(_, i)| is_on(i, seen.at, at))
            .peekable();
        let group = match on.peek() {
            None => Group::Healthy,
            Some(_) => match on.find(|(_, i)| i.rank == seen.rank) {
                Some((index, _)) => Group::Own(index),
                None => Group::Bystander,
            },
        };
        let Some(tally) = self.tally(group) else {
            return;
        };
        tally.searches += 1;
        if seen.status == 200 && seen.source.as_deref() == Some("live") {
            let ms = u64::try_from(seen.latency.as_millis()).unwrap_or(u64::MAX);
            *tally.live_ms.entry(ms).or_default() += 1;
        }
        if live_or_fresh(&seen) {
            tally.live_or_fresh += 1;
            return;
        }
        let Some(operator) = self.operators.get(seen.rank) else {
            return;
        };
        self.unanswered
            .entry((operator.clone(), seen.question))
            .or_default()
            .push(Unanswered {
                at: seen.at,
                group,
                answerable: false,
            });
    }

    /// Look at one request: if the operator answered it within its search
    /// budget, the searches of its question asked around its creation (by
    /// this search, or joined in flight: from 1 s before to 3 s after) were
    /// answerable.
    pub(crate) fn request(&mut self, stored: &StoredRequest) {
        let request = &stored.request;
        let Some(outcome) = &stored.outcome else {
            return;
        };
        if request.operation != Operation::Search
            || !matches!(outcome.kind, OutcomeKind::Answered { .. })
        {
            return;
        }
        let budget = self
            .settings
            .for_operator(&request.operator)
            .budgets
            .for_operation(Operation::Search)
            .timeout;
        if outcome
            .call_ms
            .is_none_or(|ms| u128::from(ms) > budget.as_millis())
        {
            return;
        }
        let param = |k: &str| request.params.get(k).cloned().unwrap_or_default();
        let key = (
            request.operator.clone(),
            [
                param("from"),
                param("to"),
                param("date"),
                param("passengers"),
            ],
        );
        let Some(searches) = self.unanswered.get_mut(&key) else {
            return;
        };
        let mut groups = Vec::new();
        for search in searches
            .iter_mut()
            .filter(|s| !s.answerable && (-1.0..=3.0).contains(&secs(request.created_at, s.at)))
        {
            search.answerable = true;
            groups.push(search.group);
        }
        for group in groups {
            if let Some(tally) = self.tally(group) {
                tally.answerable_otherwise += 1;
            }
        }
    }

    fn tally(&mut self, group: Group) -> Option<&mut GroupTally> {
        match group {
            Group::Healthy => Some(&mut self.healthy),
            Group::Bystander => Some(&mut self.bystanders),
            Group::Own(index) => self.own.get_mut(index),
        }
    }

    /// What the customers of the day's incident `index` saw: the
    /// operator's own searches from the incident's start to two minutes
    /// after its end.
    pub(super) fn incident(&self, index: usize) -> Option<SearchShares> {
        self.own.get(index).map(GroupTally::shares)
    }

    pub(super) fn healthy(&self) -> Healthy {
        let t = &self.healthy;
        let answerable = t.answerable();
        Healthy {
            searches: t.searches,
            live_or_fresh: t.live_or_fresh,
            answerable,
            live_or_fresh_pct: pct(t.live_or_fresh, t.searches),
            answerable_pct: pct(answerable, t.searches),
            not_live_or_fresh_pct: pct(t.searches.saturating_sub(t.live_or_fresh), t.searches),
            answerable_not_live_or_fresh_pct: pct(
                answerable.saturating_sub(t.live_or_fresh),
                answerable,
            ),
        }
    }

    /// The live answers' p95 while no incident is on.
    pub(super) fn healthy_p95_ms(&self) -> Option<u64> {
        self.healthy.live_p95_ms()
    }

    pub(super) fn bystanders(&self) -> Bystanders {
        Bystanders {
            answers: self.bystanders.shares(),
            baseline_p95_ms: self.healthy_p95_ms(),
        }
    }
}

fn live_or_fresh(search: &SearchSeen) -> bool {
    search.status == 200 && matches!(search.source.as_deref(), Some("live" | "fresh"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The folded figures count what they say: a search in its own
    /// operator's incident counts nowhere, one in another's is a
    /// bystander's; a stale answer is answerable only when the operator
    /// answered the same question within its budget around the search's
    /// time, and the live p95 is the value at rank ceil(0.95 n).
    #[test]
    fn the_tally_folds_searches_and_requests_as_the_report_counts_them() {
        use lifeboat_core::request::{Outcome, OutcomeKind, RequestRecord};
        let script = FleetScript {
            operators: 8,
            ..FleetScript::default()
        };
        let operators: Vec<OperatorId> = script
            .operator_names()
            .into_iter()
            .map(|n| OperatorId::new(n).unwrap())
            .collect();
        let mut tally = SearchTally::new(&script, &operators);
        let hang = script.incidents()[0].clone();
        let at = |s: f64| script.start + chrono::TimeDelta::milliseconds((s * 1000.0) as i64);
        let question = |date: &str| {
            [
                "OSL".to_owned(),
                "KIE".to_owned(),
                date.to_owned(),
                "2".to_owned(),
            ]
        };
        let search = |rank: usize, t: f64, source: &str, ms: u64, date: &str| SearchSeen {
            at: at(t),
            rank,
            latency: Duration::from_millis(ms),
            status: 200,
            source: Some(source.to_owned()),
            question: question(date),
        };
        // Healthy: four live answers, two stale ones.
        for ms in [100, 200, 300, 400] {
            tally.search(search(3, 10.0, "live", ms, "d1"));
        }
        tally.search(search(3, 20.0, "stale", 3000, "d1"));
        tally.search(search(3, 20.0, "stale", 3000, "d2"));
        // In the hang: the hanging operator's own search counts as its
        // incident's customers', another's as a bystander's.
        let during = hang.start.as_secs_f64() + 1.0;
        tally.search(search(hang.rank, during, "stale", 3000, "d1"));
        tally.search(search(3, during, "live", 900, "d1"));
        let answered = |date: &str, created: f64, call_ms: u64| StoredRequest {
            request: RequestRecord {
                request_id: format!("{date}-{created}"),
                operator: operators[3].clone(),
                operation: Operation::Search,
                params: [
                    ("from", "OSL"),
                    ("to", "KIE"),
                    ("date", date),
                    ("passengers", "2"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
                created_at: at(created),
                deadline: at(created + 3.0),
            },
            outcome: Some(Outcome {
                kind: OutcomeKind::Answered { body: "{}".into() },
                at: at(created + 1.0),
                by: "real-consumer".into(),
                call_ms: Some(call_ms),
            }),
        };
        // d1 answered in budget 2 s before the stale search: answerable;
        // d2 answered too late (over its budget), and d1 again long before.
        tally.request(&answered("d1", 18.0, 1500));
        tally.request(&answered("d2", 19.0, 9000));
        tally.request(&answered("d1", 5.0, 1500));
        let healthy = tally.healthy();
        assert_eq!(
            (healthy.searches, healthy.live_or_fresh, healthy.answerable),
            (6, 4, 5)
        );
        // The same request seen twice counts once.
        tally.request(&answered("d1", 18.0, 1500));
        assert_eq!(tally.healthy().answerable, 5);
        let bystanders = tally.bystanders();
        assert_eq!(
            (
                bystanders.answers.searches,
                bystanders.answers.live_or_fresh
            ),
            (1, 1)
        );
        // The hang's own customer was answered stale, and the operator did
        // not answer that question in its budget: not answerable.
        let own = tally.incident(0).unwrap();
        assert_eq!((own.searches, own.live_or_fresh, own.answerable), (1, 0, 0));
        assert_eq!(tally.healthy().searches, 6);
        assert!(tally.incident(1).is_some_and(|i| i.searches == 0));
        assert_eq!(
            (bystanders.answers.p95_ms, bystanders.baseline_p95_ms),
            (Some(900), Some(400))
        );
    }
}
