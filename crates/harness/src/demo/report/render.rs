//! The demo's report for people: the timeline (script marks, breaker
//! transitions, sale changes, sample searches and carts, in time order) and
//! the summary [`Report::render`] prints after it.

use std::fmt::Write as _;
use std::time::Duration;

use lifeboat_core::events::SaleStatus;
use lifeboat_core::memory::SwitchOutcome;

use super::{Inputs, Report, TransitionSeen, round1, secs_since};
use crate::demo::Phase;

/// The readable story: script marks, breaker transitions, sale changes,
/// sample searches and carts, in time order.
pub(super) fn timeline(
    i: &Inputs<'_>,
    breaker: &[TransitionSeen],
    accepted: &[(f64, SaleStatus)],
) -> Vec<(f64, String)> {
    let s = i.script;
    let mut lines: Vec<(f64, String)> = vec![
        (
            0.0,
            format!(
                "healthy traffic: {} searches/s, {:.0}% go on to a cart",
                s.searches_per_s,
                s.cart_share * 100.0
            ),
        ),
        (
            s.outage_start().as_secs_f64(),
            format!(
                "OPERATOR OUTAGE begins ({}); traffic x{}",
                s.mode, s.outage_traffic
            ),
        ),
        (
            s.outage_end().as_secs_f64(),
            "operator back; normal traffic".to_owned(),
        ),
    ];
    for t in breaker {
        lines.push((
            t.at_s,
            format!(
                "breaker {} -> {} (v{}): {}",
                t.from.as_str(),
                t.to.as_str(),
                t.version,
                t.reason
            ),
        ));
    }
    for (at, status) in accepted {
        let what = match status {
            SaleStatus::OffSale => "OFF SALE",
            SaleStatus::OnSale => "ON SALE",
        };
        lines.push((*at, format!("sale switch: {what}")));
    }
    for w in i
        .switch_writes
        .iter()
        .filter(|w| w.outcome != SwitchOutcome::Accepted)
    {
        lines.push((
            round1(secs_since(i.start, w.at)),
            format!(
                "sale switch refused the write (v{}; a refusal the script injects); retried on the schedule",
                w.version
            ),
        ));
    }
    // The first search of each (phase, source or status), and the first
    // unavailable one.
    let mut shown = std::collections::BTreeSet::new();
    for seen in &i.observed.searches {
        let kind = seen
            .source
            .clone()
            .unwrap_or_else(|| format!("{}", seen.status));
        if shown.insert((seen.phase, kind.clone())) {
            let age = seen
                .age_s
                .map(|a| format!(", age {a} s"))
                .unwrap_or_default();
            lines.push((
                round1(seen.at.as_secs_f64()),
                format!(
                    "search {}: {kind}{age}, answered in {} ms",
                    seen.label,
                    seen.latency.as_millis()
                ),
            ));
        }
    }
    let mut cart_shown = std::collections::BTreeSet::new();
    for cart in &i.observed.carts {
        if let Some(paid) = cart.reached_payment {
            let kind = (cart.phase, cart.degraded, cart.price_changes > 0);
            if cart_shown.insert(kind) {
                let mut text = format!("cart {} reached payment", cart.label);
                if cart.degraded {
                    text.push_str(" (default accommodation, extras skipped");
                    if cart.on_cached_price {
                        let _ = write!(
                            text,
                            ", cached price {} s old",
                            cart.price_age_s.unwrap_or(0)
                        );
                    }
                    text.push(')');
                }
                if cart.price_changes > 0 {
                    text.push_str(" after a price change was shown");
                }
                let _ = write!(text, ", started at +{}", clock(cart.started.as_secs_f64()));
                lines.push((round1(paid.as_secs_f64()), text));
            }
        }
    }
    lines.sort_by(|a, b| a.0.total_cmp(&b.0));
    lines
}

/// `mm:ss.s` since the start of the day.
pub fn clock(s: f64) -> String {
    let whole = s.max(0.0);
    let minutes = (whole / 60.0).floor();
    format!("{:02}:{:04.1}", minutes as u64, whole - minutes * 60.0)
}

impl Report {
    /// The timeline and the summary, for people.
    pub fn render(&self, wall: Duration) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "lifeboat demo: one operator through {:.0} min of virtual time (outage of {} s, {})\n",
            self.virtual_s / 60.0,
            self.script.outage.as_secs(),
            self.script.mode
        );
        for (at, line) in &self.timeline {
            let _ = writeln!(out, "  +{}  {line}", clock(*at));
        }
        let _ = writeln!(out, "\nsummary");
        let fmt_s = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{x:.1} s"));
        let rows = [
            ("outage -> breaker open", fmt_s(self.detection_s)),
            ("operator back -> breaker closed", fmt_s(self.recovery_s)),
            (
                "breaker open -> off sale",
                fmt_s(self.offsale.off_after_open_s),
            ),
            (
                "breaker closed -> on sale",
                fmt_s(self.offsale.on_after_close_s),
            ),
            (
                "sale switch writes (refused)",
                format!("{} ({})", self.offsale.writes, self.offsale.writes_failed),
            ),
            (
                "gateway requests with one outcome",
                format!(
                    "{} / {} ({} duplicates, {} given up on)",
                    self.requests.with_outcome,
                    self.requests.total,
                    self.requests.duplicate_outcomes,
                    self.requests.discarded
                ),
            ),
            (
                "closes replaced by a later outcome",
                self.requests.closes_replaced.to_string(),
            ),
            (
                "answers in budget but late (healthy)",
                self.requests
                    .answered_too_late
                    .get(&Phase::Healthy)
                    .copied()
                    .unwrap_or(0)
                    .to_string(),
            ),
            (
                "operator calls (switch's probes)",
                format!("{} ({})", self.operator_calls, self.probe_calls),
            ),
            (
                "carts reached payment",
                format!(
                    "{} / {} ({} degraded, {} price changes shown)",
                    self.carts.reached_payment,
                    self.carts.started,
                    self.carts.degraded,
                    self.carts.price_changes_shown
                ),
            ),
            (
                "  of those started in the outage",
                format!(
                    "{} / {} ({} paid during the outage)",
                    self.carts.outage_carts_reached_payment,
                    self.carts.started_during_outage,
                    self.carts.reached_payment_during_outage
                ),
            ),
            (
                "price changes first shown at payment",
                format!(
                    "{} carts ({} carts lost to a changed price; {:.0} % leave when shown one at payment, {:.0} % before)",
                    self.carts.price_changes_first_at_payment,
                    self.carts.lost_to_price_change,
                    self.carts.customer_model.leave_on_change_at_payment * 100.0,
                    self.carts.customer_model.leave_on_change_before_payment * 100.0
                ),
            ),
            (
                "prices first shown at payment",
                format!(
                    "{} carts ({} lost)",
                    self.carts.prices_first_shown_at_payment,
                    self.carts.lost_to_price_first_shown_at_payment,
                ),
            ),
        ];
        for (name, value) in rows {
            let _ = writeln!(out, "  {name:<36} {value}");
        }
        let _ = writeln!(
            out,
            "\n  {:<9} {:>6} {:>7} {:>7} {:>6} {:>5} {:>5} {:>9} {:>11}",
            "searches",
            "count",
            "p50 ms",
            "p95 ms",
            "fresh",
            "live",
            "empty",
            "last_good",
            "unavailable"
        );
        for (phase, f) in &self.search {
            let _ = writeln!(
                out,
                "  {:<9} {:>6} {:>7} {:>7} {:>6} {:>5} {:>5} {:>9} {:>11}",
                phase.as_str(),
                f.count,
                f.p50_ms,
                f.p95_ms,
                f.by_source.fresh,
                f.by_source.live,
                f.empty,
                f.by_source.last_good,
                f.unavailable
            );
        }
        let counted = match self.script.world {
            lifeboat_sim::World::Aws => {
                "waits on the operator, the stream, the stores, API Gateway and Lambda count (docs/aws-model.md)"
            }
            lifeboat_sim::World::Ideal => {
                "only waits on the operator and the stream count, as the ideal world charges nothing else"
            }
        };
        let _ = writeln!(
            out,
            "  (answer times are virtual: {counted}; the handlers' own work takes no virtual time)"
        );
        let _ = writeln!(
            out,
            "\n  ran in {:.1} s of wall time ({} searches, {} carts)",
            wall.as_secs_f64(),
            self.search.values().map(|f| f.count).sum::<usize>(),
            self.carts.started
        );
        out
    }
}
