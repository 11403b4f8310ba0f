//! CloudWatch's own time format. Alarm state changes, their reason data and
//! alarm history write times as `2026-11-30T10:15:42.185+0000` (an offset
//! without a colon, which RFC 3339 does not allow); lifeboat reads those and
//! RFC 3339 alike.

use chrono::{DateTime, Utc};

/// A CloudWatch timestamp (`2026-11-30T10:15:42.185+0000`) or an RFC 3339
/// one, in UTC; `None` for anything else.
pub fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .or_else(|_| DateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f%z"))
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloudwatch_and_rfc_3339_times_parse() {
        let at = DateTime::from_timestamp_millis(1_796_033_742_185).unwrap();
        assert_eq!(parse_time("2026-11-30T10:15:42.185+0000"), Some(at));
        assert_eq!(parse_time("2026-11-30T11:15:42.185+0100"), Some(at));
        assert_eq!(parse_time("2026-11-30T10:15:42.185Z"), Some(at));
        assert_eq!(parse_time("2026-11-30T10:15:42.185+00:00"), Some(at));
        assert!(parse_time("2026-11-30T10:15:42+0000").is_some());
        assert!(parse_time("2026-11-30T10:15:42").is_none());
        assert!(parse_time("yesterday").is_none());
        assert!(parse_time("").is_none());
    }
}
