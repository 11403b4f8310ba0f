use lifeboat_core::cache::Source;
use lifeboat_core::cart::{CartPolicy, CartPrice, Sailing, StepKind, StepRecord};

use super::*;

/// 2026-12-01T06:00:00Z plus `s` seconds.
fn t(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_104_800 + s, 0).unwrap()
}

fn op(name: &str) -> OperatorId {
    OperatorId::new(name).unwrap()
}

/// A cart of `operator` opened at `opened` (s), with further steps at
/// `steps` (s, price change shown).
fn cart(operator: &str, opened: i64, steps: &[(i64, bool)]) -> Cart {
    let mut cart = Cart::open(
        format!("c-{opened}-{}", steps.len()),
        op(operator),
        Sailing {
            sailing_id: "s-1".into(),
            from: "HEL".into(),
            to: "TLL".into(),
            date: "2026-12-24".into(),
            passengers: 1,
        },
        false,
        &CartPolicy::default(),
        t(opened),
    );
    cart.record_step(StepRecord {
        step: StepKind::Open,
        at: t(opened),
        status: 201,
        price_change_shown: false,
    });
    for &(at, shown) in steps {
        cart.record_step(StepRecord {
            step: StepKind::Confirm,
            at: t(at),
            status: if shown { 409 } else { 200 },
            price_change_shown: shown,
        });
        cart.updated_at = t(at);
    }
    cart
}

fn paid(mut cart: Cart, at: i64) -> Cart {
    let price = CartPrice {
        amount_cents: 10_000,
        currency: "EUR".into(),
        source: Source::Live,
        as_of: t(at),
        parts: Vec::new(),
        covers: Default::default(),
        absorbed_cents: 0,
    };
    cart.set_price(price.clone(), &Default::default(), t(at))
        .unwrap();
    assert_eq!(
        cart.confirm_live(price, &Default::default(), t(at))
            .unwrap(),
        lifeboat_core::cart::ConfirmStep::Confirmed
    );
    cart
}

fn change(operator: &str, at: i64, from: BreakerState, to: BreakerState) -> StateChange {
    StateChange {
        operator: op(operator),
        at: t(at),
        from: Some(from),
        to,
    }
}

fn query(since: i64, until: i64, judged_at: i64) -> MinutesQuery {
    MinutesQuery {
        since: t(since),
        until: t(until),
        judged_at: t(judged_at),
        operator: None,
    }
}

/// (minute offset, breaker) of `operator`'s rows.
fn breaker(rows: &[MinuteRow], operator: &str) -> Vec<(i64, String)> {
    rows.iter()
        .filter(|r| r.operator == op(operator))
        .map(|r| ((r.minute - t(0)).num_minutes(), r.breaker.clone()))
        .collect()
}

use BreakerState::{Closed, HalfOpen, Open};

#[test]
fn the_breaker_column_shows_the_state_at_the_start_and_every_change_inside() {
    let changes = [
        change("nordic", 620, Closed, Open),
        change("nordic", 640, Open, HalfOpen),
        change("nordic", 725, HalfOpen, Closed),
        // Exactly at a minute's start: a change of that minute.
        change("nordic", 780, Closed, Open),
    ];
    let rows = minutes(&[], &changes, &BTreeMap::new(), &query(540, 840, 840)).unwrap();
    assert_eq!(
        breaker(&rows, "nordic"),
        vec![
            (9, "closed".to_owned()),
            (10, "closed→open→half_open".to_owned()),
            (11, "half_open".to_owned()),
            (12, "half_open→closed".to_owned()),
            (13, "closed→open".to_owned()),
        ]
    );
    // Changes before the range set the state at its start.
    let later = minutes(&[], &changes, &BTreeMap::new(), &query(665, 700, 840)).unwrap();
    assert_eq!(
        breaker(&later, "nordic"),
        vec![(11, "half_open".to_owned())]
    );
}

#[test]
fn an_operator_without_changes_is_in_its_current_state_and_every_minute_has_a_row() {
    let current = BTreeMap::from([(op("baltic"), BreakerState::ForcedOpen)]);
    let carts = [cart("nordic", 70, &[])];
    let rows = minutes(&carts, &[], &current, &query(0, 300, 300)).unwrap();
    assert_eq!(rows.len(), 10, "5 minutes of 2 operators");
    assert_eq!(
        rows.iter()
            .map(|r| (r.operator.as_str(), r.breaker.as_str()))
            .take(2)
            .collect::<Vec<_>>(),
        vec![("baltic", "forced_open"), ("nordic", "closed")],
        "by minute, then operator"
    );
    let quiet: Vec<i64> = rows
        .iter()
        .filter(|r| r.is_quiet())
        .map(|r| (r.minute - t(0)).num_minutes())
        .collect();
    assert_eq!(
        quiet,
        vec![0, 0, 1, 2, 2, 3, 3, 4, 4],
        "only nordic's minute 1 moved"
    );
    assert!(
        rows.iter().all(|r| r.stopped == 0),
        "70 s idle is not stopped"
    );
}

#[test]
fn carts_are_counted_in_the_minute_of_each_event() {
    let carts = [
        // Opened at 06:01:10, shown a price change at 06:02:30, paid 06:02:50.
        paid(cart("nordic", 70, &[(150, true), (170, false)]), 170),
        // Opened at 06:01:50, last step at 06:03:00, never paid: stopped.
        cart("nordic", 110, &[(180, false)]),
        // Opened and left at 06:04:00.
        cart("nordic", 240, &[]),
    ];
    let rows = minutes(&carts, &[], &BTreeMap::new(), &query(60, 300, 7_200)).unwrap();
    let figures: Vec<(i64, u32, u32, u32, u32, u32)> = rows
        .iter()
        .map(|r| {
            (
                (r.minute - t(0)).num_minutes(),
                r.carts_started,
                r.steps,
                r.reached_payment,
                r.stopped,
                r.price_changes_shown,
            )
        })
        .collect();
    assert_eq!(
        figures,
        vec![
            (1, 2, 2, 0, 0, 0),
            (2, 0, 2, 1, 0, 1),
            (3, 0, 1, 0, 1, 0),
            (4, 1, 1, 0, 1, 0),
        ]
    );
}

#[test]
fn a_cart_stops_only_once_it_was_idle_long_enough_by_the_end_of_the_data() {
    let carts = [cart("nordic", 60, &[(90, false)])];
    let stopped = |judged_at: i64| -> u32 {
        minutes(&carts, &[], &BTreeMap::new(), &query(0, 600, judged_at))
            .unwrap()
            .iter()
            .map(|r| r.stopped)
            .sum()
    };
    assert_eq!(stopped(90 + 30 * 60 - 1), 0);
    assert_eq!(stopped(90 + 30 * 60), 1);
    // A step after the range still counts as the cart moving on.
    let later = [cart("nordic", 60, &[(90, false), (1_000, false)])];
    let rows = minutes(&later, &[], &BTreeMap::new(), &query(0, 600, 100_000)).unwrap();
    assert_eq!(rows.iter().map(|r| r.stopped).sum::<u32>(), 0);
    assert_eq!(
        rows.iter().map(|r| r.steps).sum::<u32>(),
        2,
        "the later step is outside"
    );
    // A paid cart never stops.
    let done = [paid(cart("nordic", 60, &[]), 90)];
    let rows = minutes(&done, &[], &BTreeMap::new(), &query(0, 600, 100_000)).unwrap();
    assert_eq!(rows.iter().map(|r| r.stopped).sum::<u32>(), 0);
}

#[test]
fn a_cart_stored_before_steps_were_recorded_counts_from_its_own_times() {
    let mut old = cart("nordic", 60, &[(200, false)]);
    old.steps.clear();
    old.price_change = Some(lifeboat_core::cart::PriceChange {
        old_cents: 1,
        new_cents: 2,
        difference_cents: 1,
        currency: "EUR".into(),
        at: t(130),
        scope: Default::default(),
    });
    let rows = minutes(&[old], &[], &BTreeMap::new(), &query(0, 300, 10_000)).unwrap();
    let sum = |f: fn(&MinuteRow) -> u32| rows.iter().map(f).sum::<u32>();
    assert_eq!(
        (
            sum(|r| r.carts_started),
            sum(|r| r.steps),
            sum(|r| r.price_changes_shown)
        ),
        (1, 0, 1)
    );
    assert_eq!(
        rows.iter()
            .find(|r| r.stopped == 1)
            .map(|r| (r.minute - t(0)).num_minutes()),
        Some(3),
        "idle since its last change"
    );
}

#[test]
fn bad_ranges_and_unknown_operators_are_errors() {
    let carts = [cart("nordic", 60, &[])];
    let none = BTreeMap::new();
    let empty = minutes(&carts, &[], &none, &query(60, 0, 60)).unwrap_err();
    assert_eq!(
        empty.to_string(),
        "the range is empty: --since 2026-12-01T06:01:00Z is not before --until 2026-12-01T06:00:00Z"
    );
    assert!(matches!(
        minutes(&carts, &[], &none, &query(60, 60, 60)),
        Err(MinutesError::EmptyRange { .. })
    ));
    assert!(matches!(
        minutes(&carts, &[], &none, &query(0, 32 * 86_400, 0)),
        Err(MinutesError::TooLong { .. })
    ));
    let mut only = query(0, 120, 120);
    only.operator = Some(op("baltic"));
    let err = minutes(&carts, &[], &none, &only).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown operator baltic: no cart and no breaker of it is stored"
    );
    only.operator = Some(op("nordic"));
    let rows = minutes(&carts, &[change("other", 10, Closed, Open)], &none, &only).unwrap();
    assert!(rows.iter().all(|r| r.operator == op("nordic")));
    assert_eq!(rows.len(), 2);
}

#[test]
fn the_table_folds_quiet_minutes_and_sums_each_operator() {
    let carts = [cart("nordic", 30, &[(40, false)])];
    let changes = [change("nordic", 430, Closed, Open)];
    let rows = minutes(&carts, &changes, &BTreeMap::new(), &query(0, 600, 600)).unwrap();
    let text = render(&rows, t(600));
    let line = |start: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(start))
            .unwrap_or_else(|| panic!("no line {start} in\n{text}"))
            .to_owned()
    };
    assert!(
        line("06:01").ends_with("(6 quiet minutes, to 06:06)"),
        "{text}"
    );
    assert!(line("06:07").contains("closed→open"), "{text}");
    assert!(
        !text.contains("(2 quiet minutes"),
        "two quiet minutes stay rows: {text}"
    );
    assert!(line("06:09").contains(" open "), "{text}");
    let total = text
        .lines()
        .find(|l| l.trim_start().starts_with("total"))
        .unwrap();
    assert_eq!(
        total.split_whitespace().collect::<Vec<_>>(),
        ["total", "1", "2", "0", "0", "0"]
    );
}
