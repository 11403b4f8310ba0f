//! How every flag of the `lifeboat` command reads a span of time.

use std::time::Duration;

/// `60s`, `2m`, `1h30m`, `1h 30m`, `500ms`, `1.5s`, `1d`, `2days`
/// (humantime's spans: numbers each with a unit, added up), or a number of
/// seconds (`90`, `1.5`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let bad = || format!("{text:?} is not a duration like 60s, 2m, 1h30m, 500ms or 1d");
    if t.is_empty() {
        return Err(bad());
    }
    if t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        let seconds: f64 = t.parse().map_err(|_| bad())?;
        return Duration::try_from_secs_f64(seconds).map_err(|_| bad());
    }
    humantime::parse_duration(t).map_err(|e| format!("{}: {e}", bad()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn durations_read_as_people_write_them() {
        let ok = [
            ("60s", 60_000),
            ("2m", 120_000),
            ("2min", 120_000),
            ("1h", 3_600_000),
            ("1h30m", 5_400_000),
            ("1d", 86_400_000),
            ("500ms", 500),
            ("1h 30m", 5_400_000),
            ("2days", 172_800_000),
            ("1.5s", 1_500),
            ("1.5", 1_500),
            ("90", 90_000),
            (" 45s ", 45_000),
        ];
        for (text, ms) in ok {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_millis(ms)),
                "{text}"
            );
        }
        for bad in [
            "",
            "h",
            "2x",
            "-2h",
            "2h30",
            "soon",
            "99999999999999999999d",
            "1..5s",
            "5 fortnights",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert!(parse_duration("5 fortnights").unwrap_err().contains("unit"));
    }
}
