//! `lifeboat fleet`, shortened: a marketplace hour of 16 operators.

use std::time::Duration;

use lifeboat_cli::fleet::{self, FleetReport, FleetScript};
use lifeboat_sim::LaneLayout;

fn hour(lanes: LaneLayout) -> FleetReport {
    let script = FleetScript {
        operators: 16,
        duration: Duration::from_secs(3600),
        searches_per_s: 4.0,
        lanes,
        ..FleetScript::default()
    };
    fleet::run_paused(&script).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_incident_is_caught_and_recovers_and_nobody_else_pays() {
    let report = hour(LaneLayout::PerOperator);
    println!("{}", report.render());
    println!(
        "{}",
        serde_json::to_string(&report).unwrap_or_else(|e| panic!("{e}"))
    );
    let kinds: Vec<&str> = report.incidents.iter().map(|i| i.kind).collect();
    assert!(kinds.contains(&"quiet"), "{kinds:?}");
    for incident in &report.incidents {
        let length = incident.end_s - incident.start_s;
        if incident.kind == "brownout" {
            assert_eq!(incident.detection_s, None, "{incident:?}");
            continue;
        }
        let detection = incident
            .detection_s
            .unwrap_or_else(|| panic!("not detected: {incident:?}"));
        assert!(detection <= 60.0, "{incident:?}");
        let recovery = incident
            .recovery_s
            .unwrap_or_else(|| panic!("not recovered: {incident:?}"));
        assert!(recovery <= 30.0, "{incident:?}");
        // At most one probe per 10 s while open; customers' calls only from
        // batches already running when the breaker opened.
        assert!(
            incident.probe_calls as f64 <= length / 10.0 + 2.0,
            "{incident:?}"
        );
        assert!(incident.calls_while_open <= 5, "{incident:?}");
        if incident.kind != "flapping" {
            assert_eq!(incident.sale_writes, 2, "one off, one on: {incident:?}");
        }
    }
    assert_eq!(report.false_trips, 0);
    assert_eq!(report.requests.total, report.requests.with_outcome);
    assert_eq!(report.requests.duplicate_outcomes, 0);

    // Isolation: bystanders keep their answers and their speed.
    let b = &report.bystanders;
    assert!(
        b.live_or_fresh as f64 >= 0.99 * b.answerable as f64,
        "{b:?}"
    );
    let (p95, baseline) = (
        b.p95_ms.unwrap_or(u64::MAX) as f64,
        b.baseline_p95_ms.unwrap_or(0) as f64,
    );
    assert!(p95 <= 1.1 * baseline, "{b:?}");
    // Store calls: a cache hit is one read; no invocation reads more than
    // a few items per operator.
    let calls = &report.store_calls;
    assert!(calls.per_search_hit <= 2.0, "{calls:?}");
    assert!(calls.per_tick <= 4.0, "{calls:?}");
    assert!(
        calls.max_items_read_per_invocation <= 4 * report.operators as u64,
        "{calls:?}"
    );
    // Healthy days cost nothing.
    let h = &report.healthy;
    assert!(
        (h.answerable - h.live_or_fresh) as f64 <= 0.005 * h.answerable as f64,
        "{h:?}"
    );
}
