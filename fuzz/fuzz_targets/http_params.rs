//! The HTTP parameter checks of search and cart (`lifeboat_lookup::params`).
//!
//! Input: lines. The first is the clock, in epoch seconds (out of the years
//! 2000 to 2200, or unreadable: 2026-12-01); the second the served operators,
//! comma separated; each of the next (at most 16) lines is a parameter value
//! and goes through every check, and consecutive lines also make
//! `name=value` pairs of a parameter map for `required`.
//!
//! Invariants: no panic, and what each check promises of what it accepts: a
//! known operator, spelled as sent; a port code of 3 to 5 capital letters; a
//! date from yesterday to `DATE_HORIZON_DAYS` ahead (its text need not be
//! `YYYY-MM-DD` to the letter: chrono also reads `+2026-12-1`, and search and
//! cart pass on the date's own `YYYY-MM-DD` form, never the text sent); a
//! passenger count from 1 to 9, written as one digit; a code of 1 to 64
//! letters, digits or '-'; a required parameter exactly when the map has it.
#![no_main]

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, TimeDelta, Utc};
use libfuzzer_sys::fuzz_target;
use lifeboat_core::OperatorId;
use lifeboat_lookup::params::{
    DATE_HORIZON_DAYS, code, date, operator, passengers, port, required,
};

/// 2000-01-01 to 2200-01-01: a clock outside is no clock lifeboat runs on.
const CLOCK_RANGE: std::ops::RangeInclusive<i64> = 946_684_800..=7_258_118_400;
/// 2026-12-01, the fixtures' today.
const FIXTURE_NOW: i64 = 1_796_032_800;
/// Values read from one input: a request has a handful of parameters, and a
/// longer input only makes each run slower.
const MAX_VALUES: usize = 16;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let now = lines
        .next()
        .and_then(|l| l.trim().parse::<i64>().ok())
        .filter(|s| CLOCK_RANGE.contains(s))
        .unwrap_or(FIXTURE_NOW);
    let Some(now) = DateTime::<Utc>::from_timestamp(now, 0) else {
        return;
    };
    let known: BTreeSet<OperatorId> = lines
        .next()
        .unwrap_or_default()
        .split(',')
        .filter_map(|o| OperatorId::new(o).ok())
        .collect();
    let values: Vec<&str> = lines.take(MAX_VALUES).collect();
    for value in &values {
        check(value, now, &known);
    }
    let map: BTreeMap<String, String> = values
        .chunks(2)
        .map(|pair| {
            (
                pair[0].to_owned(),
                pair.get(1).copied().unwrap_or("").to_owned(),
            )
        })
        .collect();
    for name in
        values
            .iter()
            .copied()
            .chain(["operator", "from", "to", "date", "passengers", "sailing_id"])
    {
        match required(&map, name) {
            Ok(value) => assert_eq!(Some(value), map.get(name).map(String::as_str)),
            Err(problem) => {
                assert!(!map.contains_key(name));
                let _ = problem.reply();
            }
        }
    }
});

fn check(value: &str, now: DateTime<Utc>, known: &BTreeSet<OperatorId>) {
    match operator("operator", value, known) {
        Ok(id) => {
            assert_eq!(id.as_str(), value);
            assert!(known.contains(&id));
        }
        Err(problem) => {
            let _ = problem.reply();
        }
    }
    if let Ok(p) = port("from", value) {
        assert_eq!(p, value);
        assert!((3..=5).contains(&p.len()));
        assert!(p.bytes().all(|b| b.is_ascii_uppercase()));
    }
    if let Ok(d) = date("date", value, now) {
        assert_eq!(value.len(), 10);
        assert!(d >= (now - TimeDelta::days(1)).date_naive(), "{d} {now}");
        assert!(
            d <= (now + TimeDelta::days(DATE_HORIZON_DAYS)).date_naive(),
            "{d} {now}"
        );
    }
    if let Ok(n) = passengers("passengers", value) {
        assert!((1..=9).contains(&n));
        assert_eq!(n.to_string(), value);
    }
    if let Ok(c) = code("sailing_id", value) {
        assert_eq!(c, value);
        assert!((1..=64).contains(&c.len()));
        assert!(c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
    }
}
