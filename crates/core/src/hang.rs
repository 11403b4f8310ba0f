//! The hang check's rule: when a call that timed out is a hang, and when it
//! is an operator that hesitates.
//!
//! A timeout alone does not tell a hang from a slow answer, and neither does
//! one slow ping: an operator under load, or in one of its slow moments,
//! answers its ping slowly too, and a slow moment is exactly when a call
//! times out. The first rule (one ping after the timed-out call, no answer
//! within the check's timeout: a hang) tripped healthy operators that
//! hesitated (`lifeboat fleet`, docs/fleet.md).
//!
//! The rule now asks for a second strike, and more, without waiting longer:
//! the pings start while the call is still out. A [`PingTrain`] sends its
//! first ping when the call has waited its budget less the check's timeout
//! (2 s of a 3 s search: the call is late), then one every half of the
//! check's timeout while nothing has answered, and gives every ping until
//! the check's timeout after the call's budget to answer (4 s for a search,
//! as before). The call's answer ends the train: only a call that timed out
//! is judged. [`HangWatch`] decides: a hang is confirmed when at least
//! [`STRIKES`] pings went out and none of them answered by the verdict.
//! One answer, however late, says the operator is there, and so does an
//! answer to another call of the batch while the watched one is late
//! ([`HangWatch::answered_elsewhere`]): a busy operator in a slow moment,
//! whose pings queue behind its customers' calls, still answers most of
//! those calls; a hanging one answers none.
//!
//! So a hang opens as soon as before (budget plus the check's timeout after
//! the first call that hangs), while a healthy operator must leave four
//! pings, the first for 2 s, all unanswered right after a call timed out.
//! The price: a ping for every call still out at 2 s (on a healthy day,
//! about a third of the calls), against one per timed-out batch before.

use std::time::Duration;

use crate::request::CallClass;
use crate::settings::HangCheck;

/// Pings that must go out, all unanswered, before a hang is confirmed.
pub const STRIKES: usize = 2;

/// The shortest gap between two pings of a train, whatever the check's
/// timeout.
pub const MIN_GAP: Duration = Duration::from_millis(50);

/// When the pings of one check go out, counted from the start of the call
/// it watches, and when its verdict is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingTrain {
    /// Offsets from the call's start, in order: a ping is sent at each while
    /// neither the call nor an earlier ping has answered.
    pub pings: Vec<Duration>,
    /// The verdict is due at this offset: the call's budget plus the check's
    /// timeout. Every ping may answer until then.
    pub verdict_at: Duration,
}

impl PingTrain {
    /// The train watching a call of `budget`: the first ping when the call
    /// has `check.timeout` left, then one every half `check.timeout` while
    /// each still has half `check.timeout` to answer before the verdict.
    pub fn new(check: &HangCheck, budget: Duration) -> Self {
        let verdict_at = budget.saturating_add(check.timeout);
        let gap = (check.timeout / 2).max(MIN_GAP);
        let mut pings = Vec::new();
        let mut at = budget.saturating_sub(check.timeout);
        while at.saturating_add(gap) <= verdict_at {
            pings.push(at);
            at = at.saturating_add(gap);
        }
        if pings.is_empty() {
            pings.push(budget);
        }
        Self { pings, verdict_at }
    }

    /// The timeout of the ping sent at `offset`: until the verdict.
    pub fn timeout_at(&self, offset: Duration) -> Duration {
        self.verdict_at.saturating_sub(offset)
    }
}

/// Whether a ping's result is an answer: anything but no answer in time, no
/// connection or a 5xx. A 4xx (a gateway without the route, a rate limit) or
/// an unreadable body says the API is there.
pub fn answered(class: &CallClass) -> bool {
    !matches!(
        class,
        CallClass::Timeout | CallClass::Connect | CallClass::ServerError { .. }
    )
}

/// Whether a ping's answer says the check is not a call the operator's API
/// answers (401, 403, 404, 405): a gateway refusing it or without the
/// route answers at once whether the service behind it hangs or not, so
/// the check cannot tell a hang from a slow answer. The status, if so.
pub fn unusable(class: &CallClass) -> Option<u16> {
    match class {
        CallClass::ClientError { status } if matches!(status, 401 | 403 | 404 | 405) => {
            Some(*status)
        }
        _ => None,
    }
}

/// The check's verdict, from the pings of a train as they end. Time comes
/// in with each event (offsets from the watched call's start), so the rule
/// runs the same on a real, paused or made-up clock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HangWatch {
    sent: usize,
    unanswered: usize,
    /// The first answer, as an offset from the call's start.
    answered_at: Option<Duration>,
    /// The status of an answer that says the check is unusable.
    unusable: Option<u16>,
}

/// What the watch says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HangVerdict {
    /// Not yet known: pings are still out before the verdict is due.
    Pending,
    /// A ping answered: the operator is there; the window judges the call.
    Answered,
    /// Every ping went unanswered until the verdict: a hang.
    Hung { pings: usize },
    /// A ping was answered with a status that says the check is not a call
    /// the operator answers ([`unusable`]): it cannot see a hang, and the
    /// window judges the call as for an operator without a check.
    Unusable { status: u16 },
}

impl HangWatch {
    /// A ping went out.
    pub fn sent(&mut self) {
        self.sent += 1;
    }

    /// A ping ended at `at` (an offset from the call's start) as `class`.
    pub fn ended(&mut self, at: Duration, class: &CallClass) {
        if answered(class) {
            self.unusable = self.unusable.or(unusable(class));
            self.answered_at = Some(self.answered_at.map_or(at, |first| first.min(at)));
        } else {
            self.unanswered += 1;
        }
    }

    /// The operator answered another call at `at` (an offset from the
    /// watched call's start) while the watched one was late: as good as an
    /// answered ping.
    pub fn answered_elsewhere(&mut self, at: Duration) {
        self.answered_at = Some(self.answered_at.map_or(at, |first| first.min(at)));
    }

    /// Pings sent so far.
    pub fn pings(&self) -> usize {
        self.sent
    }

    /// Whether another ping of the train should go out: none has answered.
    pub fn keeps_asking(&self) -> bool {
        self.answered_at.is_none()
    }

    /// The verdict at `now` (an offset from the call's start) for a train
    /// due at `verdict_at`.
    pub fn verdict(&self, now: Duration, verdict_at: Duration) -> HangVerdict {
        if self.answered_at.is_some_and(|at| at <= verdict_at) {
            return match self.unusable {
                Some(status) => HangVerdict::Unusable { status },
                None => HangVerdict::Answered,
            };
        }
        let all_ended = self.unanswered >= self.sent;
        if now < verdict_at && !all_ended {
            return HangVerdict::Pending;
        }
        if now < verdict_at {
            // Every ping sent has failed already (refused, 5xx): no need to
            // wait for the verdict once enough of them struck.
            if self.sent >= STRIKES {
                return HangVerdict::Hung { pings: self.sent };
            }
            return HangVerdict::Pending;
        }
        if self.sent >= STRIKES {
            HangVerdict::Hung { pings: self.sent }
        } else {
            HangVerdict::Answered
        }
    }
}

/// Play a train against an operator whose pings answer as `ping` says (for
/// the ping sent at an offset: after how long and as what; `None`, never):
/// the verdict and when it was reached. The rule as a plain function, for
/// tests and for reasoning about a latency model without a clock.
pub fn judge(
    train: &PingTrain,
    mut ping: impl FnMut(Duration) -> Option<(Duration, CallClass)>,
) -> (HangVerdict, Duration) {
    let mut watch = HangWatch::default();
    // (ends at, class) of the pings out.
    let mut out: Vec<(Duration, CallClass)> = Vec::new();
    let mut due = train.pings.iter().copied().peekable();
    loop {
        out.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        let next_end = out.last().map(|(at, _)| *at);
        let next_ping = due.peek().copied().filter(|_| watch.keeps_asking());
        // An end at the instant a ping is due comes first: an answer then
        // makes the ping unnecessary.
        let now = match (next_end, next_ping) {
            (Some(end), Some(send)) if end <= send => {
                end_one(&mut watch, &mut out);
                end
            }
            (_, Some(send)) => {
                due.next();
                watch.sent();
                let timeout = train.timeout_at(send);
                out.push(match ping(send) {
                    Some((after, class)) if after < timeout => (send + after, class),
                    _ => (train.verdict_at, CallClass::Timeout),
                });
                continue;
            }
            (Some(end), None) => {
                end_one(&mut watch, &mut out);
                end
            }
            (None, None) => break,
        };
        match watch.verdict(now, train.verdict_at) {
            HangVerdict::Pending => {}
            decided => return (decided, now),
        }
    }
    (
        watch.verdict(train.verdict_at, train.verdict_at),
        train.verdict_at,
    )
}

/// Count into `watch` the ping of `out` (sorted latest first) that ends first.
fn end_one(watch: &mut HangWatch, out: &mut Vec<(Duration, CallClass)>) {
    if let Some((at, class)) = out.pop() {
        watch.ended(at, &class);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The default check (a ping, 1 s) watching a 3 s search.
    fn search_train() -> PingTrain {
        PingTrain::new(&HangCheck::default(), ms(3_000))
    }

    #[test]
    fn a_check_the_operator_refuses_or_has_no_route_for_is_unusable() {
        for status in [401, 403, 404, 405] {
            let (verdict, _) = judge(&search_train(), |_| {
                Some((ms(20), CallClass::ClientError { status }))
            });
            assert_eq!(verdict, HangVerdict::Unusable { status });
        }
        // Other answers say the operator is there, a rate limit included.
        for class in [
            CallClass::ClientError { status: 429 },
            CallClass::BadPayload,
            CallClass::Ok,
        ] {
            let (verdict, _) = judge(&search_train(), |_| Some((ms(20), class.clone())));
            assert_eq!(verdict, HangVerdict::Answered);
        }
    }

    #[test]
    fn the_train_starts_while_the_call_is_late_and_ends_with_the_old_check() {
        let train = search_train();
        assert_eq!(
            train.pings,
            vec![ms(2_000), ms(2_500), ms(3_000), ms(3_500)]
        );
        // Budget + the check's timeout: when the old rule's one ping ended.
        assert_eq!(train.verdict_at, ms(4_000));
        assert_eq!(train.timeout_at(ms(2_000)), ms(2_000));
        assert_eq!(train.timeout_at(ms(3_500)), ms(500));
        // A budget shorter than the check: from the call's start.
        let short = PingTrain::new(&HangCheck::default(), ms(400));
        assert_eq!(short.pings[0], Duration::ZERO);
        assert_eq!(short.verdict_at, ms(1_400));
        assert!(short.pings.len() >= STRIKES);
    }

    /// The old rule: the one ping sent when the call timed out (at the
    /// budget) had no answer within the check's timeout.
    fn old_rule_trips(ping: impl Fn(Duration) -> Option<(Duration, CallClass)>) -> bool {
        match ping(ms(3_000)) {
            Some((after, class)) => after >= ms(1_000) || !answered(&class),
            None => true,
        }
    }

    #[test]
    fn one_slow_ping_on_a_healthy_operator_does_not_trip() {
        // In a slow moment: the ping sent at 2 s answers after 1.2 s, the
        // one sent at 3 s (the old check's) would have taken 1.1 s.
        let hesitant = |offset: Duration| match offset.as_millis() {
            2_000 => Some((ms(1_200), CallClass::Ok)),
            _ => Some((ms(1_100), CallClass::Ok)),
        };
        assert!(old_rule_trips(hesitant), "the old rule trips here");
        let (verdict, at) = judge(&search_train(), hesitant);
        assert_eq!(verdict, HangVerdict::Answered);
        assert_eq!(at, ms(3_200));
    }

    #[test]
    fn only_the_last_ping_answering_is_enough() {
        // Slow all along; the ping sent at 3.5 s answers at 3.9 s.
        let slow_until_late =
            |offset: Duration| (offset == ms(3_500)).then_some((ms(400), CallClass::Ok));
        assert!(old_rule_trips(slow_until_late));
        assert_eq!(
            judge(&search_train(), slow_until_late),
            (HangVerdict::Answered, ms(3_900))
        );
    }

    #[test]
    fn a_real_hang_still_trips_in_time() {
        let hang = |_: Duration| None;
        let (verdict, at) = judge(&search_train(), hang);
        assert_eq!(verdict, HangVerdict::Hung { pings: 4 });
        // Budget + the check's timeout: within budget + 2 s.
        assert_eq!(at, ms(4_000));
        assert!(at <= ms(3_000) + ms(2_000));
    }

    #[test]
    fn refused_pings_trip_without_waiting_for_the_verdict() {
        // A gateway with nothing behind it: every ping refused at once.
        let refused = |_: Duration| Some((Duration::ZERO, CallClass::Connect));
        let (verdict, at) = judge(&search_train(), refused);
        assert_eq!(verdict, HangVerdict::Hung { pings: 2 });
        assert_eq!(at, ms(2_500));
        // 5xx alike; a 4xx (a rate limit, a gateway without the route) is an
        // answer.
        let limited = |_: Duration| Some((ms(20), CallClass::ClientError { status: 429 }));
        assert_eq!(judge(&search_train(), limited).0, HangVerdict::Answered);
        let erroring = |_: Duration| Some((ms(20), CallClass::ServerError { status: 503 }));
        assert!(matches!(
            judge(&search_train(), erroring).0,
            HangVerdict::Hung { .. }
        ));
    }

    #[test]
    fn an_answer_after_the_verdict_is_too_late() {
        let mut watch = HangWatch::default();
        for _ in 0..3 {
            watch.sent();
        }
        assert_eq!(watch.verdict(ms(3_000), ms(4_000)), HangVerdict::Pending);
        watch.ended(ms(4_000), &CallClass::Timeout);
        watch.ended(ms(4_000), &CallClass::Timeout);
        watch.ended(ms(4_200), &CallClass::Ok);
        assert_eq!(
            watch.verdict(ms(4_200), ms(4_000)),
            HangVerdict::Hung { pings: 3 }
        );
        // One ping is one strike, not a hang.
        let mut one = HangWatch::default();
        one.sent();
        one.ended(ms(4_000), &CallClass::Timeout);
        assert_eq!(one.verdict(ms(4_000), ms(4_000)), HangVerdict::Answered);
        assert_eq!(one.pings(), 1);
    }
}
