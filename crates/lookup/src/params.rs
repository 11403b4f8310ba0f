//! The parameters customers send, checked one by one: each check names the
//! parameter it refuses and says what would be accepted.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use lifeboat_core::OperatorId;
use lifeboat_core::cart::Choices;
use lifeboat_core::settings::IdCase;

use crate::http::Problem;

/// A known operator.
pub fn operator(
    name: &str,
    value: &str,
    known: &BTreeSet<OperatorId>,
) -> Result<OperatorId, Problem> {
    let id = OperatorId::new(value)
        .map_err(|_| Problem::invalid(name, "must be 1 to 64 lowercase letters, digits or '-'"))?;
    if !known.contains(&id) {
        let served: Vec<&str> = known.iter().map(OperatorId::as_str).collect();
        return Err(Problem::invalid(
            name,
            &format!("unknown operator; this service sells {}", served.join(", ")),
        ));
    }
    Ok(id)
}

/// A port code: 3 to 5 capital letters.
pub fn port(name: &str, value: &str) -> Result<String, Problem> {
    if lifeboat_core::operator::is_port_code(value) {
        Ok(value.to_owned())
    } else {
        Err(Problem::invalid(
            name,
            "must be a port code of 3 to 5 capital letters",
        ))
    }
}

/// How far ahead a travel date may be: ferry operators sell about a year
/// ahead, and every distinct date is a question that costs a request, an
/// operator call and a cache item, so dates far beyond are refused.
pub const DATE_HORIZON_DAYS: i64 = 400;

/// A travel date, `YYYY-MM-DD`, not before yesterday (UTC; it is already
/// today somewhere) and at most [`DATE_HORIZON_DAYS`] ahead.
pub fn date(name: &str, value: &str, now: DateTime<Utc>) -> Result<NaiveDate, Problem> {
    let date = NaiveDate::parse_from_str(value, "%Y-%m-%d")
        .ok()
        .filter(|_| value.len() == 10)
        .ok_or_else(|| Problem::invalid(name, "must be a date as YYYY-MM-DD"))?;
    if date < (now - TimeDelta::days(1)).date_naive() {
        return Err(Problem::invalid(name, "is in the past"));
    }
    if date > (now + TimeDelta::days(DATE_HORIZON_DAYS)).date_naive() {
        return Err(Problem::invalid(
            name,
            &format!("is more than {DATE_HORIZON_DAYS} days ahead"),
        ));
    }
    Ok(date)
}

/// A passenger count from 1 to 9.
pub fn passengers(name: &str, value: &str) -> Result<u8, Problem> {
    match value.parse::<u8>() {
        Ok(n) if (1..=9).contains(&n) && value.len() == 1 => Ok(n),
        _ => Err(Problem::invalid(name, "must be a whole number from 1 to 9")),
    }
}

/// An identifier (sailing, accommodation, extra): 1 to 64 letters, digits or '-'.
pub fn code(name: &str, value: &str) -> Result<String, Problem> {
    if !value.is_empty()
        && value.len() <= 64
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        Ok(value.to_owned())
    } else {
        Err(Problem::invalid(
            name,
            "must be 1 to 64 letters, digits or '-'",
        ))
    }
}

/// An operator's id (a sailing id) as the operator compares it: checked as
/// [`code`], with the same problem when refused, then put in the operator's
/// case, so the case variants of one id are one question (one request, one
/// operator call, one cache item) unless the operator's ids are `exact`.
pub fn id(name: &str, value: &str, case: IdCase) -> Result<String, Problem> {
    code(name, value).map(|id| case.normalise(&id))
}

/// A required parameter of a checked map.
pub fn required<'a>(map: &'a BTreeMap<String, String>, name: &str) -> Result<&'a str, Problem> {
    map.get(name)
        .map(String::as_str)
        .ok_or_else(|| Problem::missing(name))
}

/// The gateway parameters of a search question.
pub fn search_params(from: &str, to: &str, date: &str, passengers: u8) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("from".to_owned(), from.to_owned()),
        ("to".to_owned(), to.to_owned()),
        ("date".to_owned(), date.to_owned()),
        ("passengers".to_owned(), passengers.to_string()),
    ])
}

/// The gateway parameters of a price question for the base fare (the
/// default accommodation, no extras). Search and cart both build them here,
/// so both find the same cache entry.
pub fn price_params(sailing_id: &str, passengers: u8) -> BTreeMap<String, String> {
    price_params_for(sailing_id, passengers, &Choices::default())
}

/// The gateway parameters of a price question for `choices`: the
/// accommodation as `accommodation`, the extras as `extras` (codes in order,
/// comma-separated), each only when there is one, so the base fare's
/// question stays the same.
pub fn price_params_for(
    sailing_id: &str,
    passengers: u8,
    choices: &Choices,
) -> BTreeMap<String, String> {
    let mut params = BTreeMap::from([
        ("sailing_id".to_owned(), sailing_id.to_owned()),
        ("passengers".to_owned(), passengers.to_string()),
    ]);
    if let Some(code) = &choices.accommodation {
        params.insert("accommodation".to_owned(), code.clone());
    }
    if !choices.extras.is_empty() {
        params.insert("extras".to_owned(), choices.extras.join(","));
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_796_032_800, 0).unwrap_or_default() // 2026-12-01
    }

    #[test]
    fn each_check_names_its_parameter() {
        let known = BTreeSet::from([OperatorId::new("nordic").unwrap_or_else(|e| panic!("{e}"))]);
        assert!(operator("operator", "nordic", &known).is_ok());
        for bad in ["Nordic", "", "baltic"] {
            let p = operator("operator", bad, &known)
                .err()
                .unwrap_or_else(|| panic!("{bad}"));
            assert_eq!(
                (p.status, p.invalid_params[0].name.as_str()),
                (400, "operator")
            );
        }
        assert!(port("from", "HEL").is_ok());
        assert!(port("from", "hel").is_err());
        assert!(port("from", "HELSINKI").is_err());
        assert!(date("date", "2026-12-24", now()).is_ok());
        assert!(
            date("date", "2026-11-30", now()).is_ok(),
            "yesterday is fine"
        );
        assert!(date("date", "2026-11-01", now()).is_err());
        let far = date("date", "9999-12-31", now()).unwrap_err().reply();
        assert!(
            far.body["detail"]
                .as_str()
                .unwrap()
                .contains("400 days ahead"),
            "{}",
            far.body
        );
        let last = (now() + TimeDelta::days(DATE_HORIZON_DAYS)).date_naive();
        assert!(date("date", &last.to_string(), now()).is_ok());
        let beyond = last + TimeDelta::days(1);
        assert!(date("date", &beyond.to_string(), now()).is_err());
        assert!(date("date", "2026-13-01", now()).is_err());
        assert!(date("date", "2026-1-01", now()).is_err());
        assert_eq!(passengers("passengers", "2").ok(), Some(2));
        for bad in ["0", "10", "02", "-1", "+2", "two", ""] {
            assert!(passengers("passengers", bad).is_err(), "{bad}");
        }
        assert!(code("sailing_id", "HEL-TLL-0730").is_ok());
        assert!(code("sailing_id", "a b").is_err());
    }

    #[test]
    fn ids_are_checked_then_put_in_the_operators_case() {
        let sent = "hel-Tll-20261224-0615";
        let asked = |case| id("sailing_id", sent, case).ok();
        assert_eq!(
            asked(IdCase::Upper).as_deref(),
            Some("HEL-TLL-20261224-0615")
        );
        assert_eq!(
            asked(IdCase::Lower).as_deref(),
            Some("hel-tll-20261224-0615")
        );
        assert_eq!(asked(IdCase::Exact).as_deref(), Some(sent));
        let long = "a".repeat(65);
        for case in [IdCase::Upper, IdCase::Lower, IdCase::Exact] {
            for bad in ["hel tll", "", "hel_tll", "h\u{e9}l-tll", long.as_str()] {
                let refused = id("sailing_id", bad, case).err();
                assert!(refused.is_some(), "{bad:?} taken");
                assert_eq!(refused, code("sailing_id", bad).err(), "the same problem");
            }
        }
        // Every spelling is one question: the same gateway parameters.
        let spellings = [
            "HEL-TLL-20261224-0615",
            "hel-tll-20261224-0615",
            "Hel-Tll-20261224-0615",
        ];
        let questions: BTreeSet<_> = spellings
            .iter()
            .map(|s| price_params(&id("sailing_id", s, IdCase::Upper).unwrap_or_default(), 2))
            .collect();
        assert_eq!(questions.len(), 1);
    }
}
