//! How every flag of the `lifeboat` command reads a span of time.

use std::time::Duration;

/// `60s`, `2m`, `1h30m`, `500ms`, `1.5s`, `1d`, or a number of seconds: one
/// or more numbers each followed by a unit (`ms`, `s`, `m` or `min`, `h`,
/// `d`), added up.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let bad = || format!("{text:?} is not a duration like 60s, 2m, 1h30m, 500ms or 1d");
    if t.is_empty() {
        return Err(bad());
    }
    let is_number = |c: char| c.is_ascii_digit() || c == '.';
    let seconds = if t.chars().all(is_number) {
        t.parse::<f64>().map_err(|_| bad())?
    } else {
        let mut total = 0.0;
        let mut rest = t;
        while !rest.is_empty() {
            let split = rest.find(|c: char| !is_number(c)).ok_or_else(bad)?;
            let (number, after) = rest.split_at(split);
            let n: f64 = number.parse().map_err(|_| bad())?;
            let (unit, next) = after.split_at(after.find(is_number).unwrap_or(after.len()));
            let scale = match unit {
                "ms" => 0.001,
                "s" => 1.0,
                "m" | "min" => 60.0,
                "h" => 3_600.0,
                "d" => 86_400.0,
                other => {
                    return Err(format!(
                        "unknown unit {other:?} in {text:?}: use ms, s, m, h or d"
                    ));
                }
            };
            total += n * scale;
            rest = next;
        }
        total
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| bad())
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
            ("1.5s", 1_500),
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
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
        assert!(
            parse_duration("5 days")
                .unwrap_err()
                .contains("unknown unit")
        );
    }
}
