//! A part of the status: `berth status wordpress`, `berth status
//! wordpress/3`, `berth status --machines 1-100`, and the same as
//! `GET /v1/status?application=wordpress&unit=...&machines=1-100`.
//!
//! # What a filter shows
//!
//! Each filter given narrows the status; none given is the whole status.
//!
//! - Applications and units named (`application`, `unit`) select those
//!   applications' units and those units, with the subordinates of the
//!   principal units selected.
//! - Machine numbers and ranges (`machines`) select those machines with
//!   their containers, and the units on them; with names as well, only the
//!   named units that are on them.
//! - The machines shown are the ones selected by `machines`, or else the
//!   ones the selected units are on (with the host of a container).
//! - The applications shown are those of the units shown, and, without
//!   `machines`, every application named even if it has no unit.
//! - An application keeps the status and cost of all its units, and the
//!   model its own figures: a filter changes what is listed, not what it
//!   says.
//!
//! Naming an application or unit that does not exist is an error; a range
//! of machines is a range, and may hold none.

use std::collections::BTreeSet;
use std::ops::RangeInclusive;

use crate::domain::names::{parse_number, ApplicationName, MachineId, UnitName};

/// How many names or ranges one filter may hold.
pub const MOST_PARTS: usize = 1000;

/// Why a filter cannot be read, or names what the model does not have.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error("{0:?} is not a machine range: expected machine numbers and ranges such as 1-100,205")]
    BadRange(String),
    #[error("machine range {0:?} runs backwards: write the smaller number first")]
    BackwardsRange(String),
    #[error("{0:?} is not a valid application name")]
    BadApplication(String),
    #[error("{0:?} is not a valid unit name")]
    BadUnit(String),
    #[error("a status filter holds at most {MOST_PARTS} names or ranges; {0} given")]
    TooMany(usize),
    #[error("no application named {0:?} in the model")]
    NoApplication(String),
    #[error("no unit named {0:?} in the model")]
    NoUnit(String),
}

impl FilterError {
    /// Whether the filter names something the model does not have (as
    /// opposed to being malformed).
    pub fn is_not_found(&self) -> bool {
        matches!(self, FilterError::NoApplication(_) | FilterError::NoUnit(_))
    }
}

/// Machine numbers as inclusive ranges, sorted and not overlapping.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MachineRanges(Vec<RangeInclusive<u64>>);

impl MachineRanges {
    /// Reads `1-100,205`: numbers and `low-high` ranges, comma-separated.
    ///
    /// # Errors
    ///
    /// [`FilterError::BadRange`] for anything else, `BackwardsRange` for
    /// `9-2`, `TooMany` past [`MOST_PARTS`].
    pub fn parse(text: &str) -> Result<MachineRanges, FilterError> {
        let parts = split_list(text)?;
        let mut ranges = Vec::with_capacity(parts.len());
        for part in parts {
            let bad = || FilterError::BadRange(part.to_string());
            let (low, high) = match part.split_once('-') {
                Some((low, high)) => (low, high),
                None => (part, part),
            };
            let low = parse_number(low).ok_or_else(bad)?;
            let high = parse_number(high).ok_or_else(bad)?;
            if high < low {
                return Err(FilterError::BackwardsRange(part.to_string()));
            }
            ranges.push(low..=high);
        }
        ranges.sort_by_key(|r| *r.start());
        let mut merged: Vec<RangeInclusive<u64>> = Vec::with_capacity(ranges.len());
        for range in ranges {
            match merged.last_mut() {
                Some(last) if *range.start() <= last.end().saturating_add(1) => {
                    *last = *last.start()..=(*last.end()).max(*range.end());
                }
                _ => merged.push(range),
            }
        }
        Ok(MachineRanges(merged))
    }

    /// The ranges, in order.
    pub fn ranges(&self) -> &[RangeInclusive<u64>] {
        &self.0
    }

    /// Whether `machine` (or the host of a container) is in a range.
    pub fn holds(&self, machine: MachineId) -> bool {
        let number = machine.host_number();
        let after = self.0.partition_point(|r| *r.end() < number);
        self.0.get(after).is_some_and(|r| r.contains(&number))
    }
}

/// What part of the status to show. The default shows all of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatusFilter {
    pub applications: BTreeSet<ApplicationName>,
    pub units: BTreeSet<UnitName>,
    pub machines: Option<MachineRanges>,
}

impl StatusFilter {
    /// The filter of the API's query parameters: comma-separated
    /// application names, unit names, and machine ranges.
    ///
    /// # Errors
    ///
    /// The first malformed part, in the words of [`FilterError`].
    pub fn parse(
        applications: Option<&str>,
        units: Option<&str>,
        machines: Option<&str>,
    ) -> Result<StatusFilter, FilterError> {
        let mut filter = StatusFilter::default();
        for name in applications
            .map(split_list)
            .transpose()?
            .unwrap_or_default()
        {
            let application = name
                .parse()
                .map_err(|_| FilterError::BadApplication(name.to_string()))?;
            filter.applications.insert(application);
        }
        for name in units.map(split_list).transpose()?.unwrap_or_default() {
            let unit = name
                .parse()
                .map_err(|_| FilterError::BadUnit(name.to_string()))?;
            filter.units.insert(unit);
        }
        filter.machines = machines.map(MachineRanges::parse).transpose()?;
        Ok(filter)
    }

    /// Whether the filter shows everything.
    pub fn is_whole(&self) -> bool {
        self.applications.is_empty() && self.units.is_empty() && self.machines.is_none()
    }

    /// Whether the filter names applications or units.
    pub fn names_any(&self) -> bool {
        !self.applications.is_empty() || !self.units.is_empty()
    }

    /// The query string that asks the API for this filter (empty for the
    /// whole status), its parts in `application`, `unit`, `machines` order.
    pub fn query(&self) -> String {
        let mut parts = Vec::new();
        let joined = |names: Vec<String>| names.join(",");
        if !self.applications.is_empty() {
            let names = self.applications.iter().map(ToString::to_string).collect();
            parts.push(format!("application={}", joined(names)));
        }
        if !self.units.is_empty() {
            let names = self.units.iter().map(ToString::to_string).collect();
            parts.push(format!("unit={}", joined(names)));
        }
        if let Some(machines) = &self.machines {
            let ranges = machines
                .ranges()
                .iter()
                .map(|r| match r.start() == r.end() {
                    true => r.start().to_string(),
                    false => format!("{}-{}", r.start(), r.end()),
                })
                .collect();
            parts.push(format!("machines={}", joined(ranges)));
        }
        match parts.is_empty() {
            true => String::new(),
            false => format!("?{}", parts.join("&")),
        }
    }
}

/// The parts of a comma-separated list, at most [`MOST_PARTS`] of them.
fn split_list(text: &str) -> Result<Vec<&str>, FilterError> {
    let parts: Vec<&str> = text.split(',').collect();
    if parts.len() > MOST_PARTS {
        return Err(FilterError::TooMany(parts.len()));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::domain::names::{
        APPLICATION_LIST_PATTERN, MACHINE_RANGES_PATTERN, UNIT_LIST_PATTERN,
    };

    fn ranges(text: &str) -> Vec<RangeInclusive<u64>> {
        MachineRanges::parse(text).unwrap().ranges().to_vec()
    }

    #[test]
    fn machine_ranges_are_numbers_and_ranges_merged_in_order() {
        assert_eq!(ranges("1-100"), vec![1..=100]);
        assert_eq!(ranges("205,1-100"), vec![1..=100, 205..=205]);
        assert_eq!(ranges("3,1-2,5-9,8-20"), vec![1..=3, 5..=20]);
        assert_eq!(ranges("0"), vec![0..=0]);
        assert_eq!(ranges("18446744073709551615"), vec![u64::MAX..=u64::MAX]);
    }

    #[test]
    fn a_range_holds_its_machines_and_their_containers() {
        let r = MachineRanges::parse("1-3,10").unwrap();
        for held in ["1", "2", "3", "3/lxd/4", "10", "10/lxd/0"] {
            assert!(r.holds(held.parse().unwrap()), "{held}");
        }
        for not in ["0", "4", "9", "11", "4/lxd/1"] {
            assert!(!r.holds(not.parse().unwrap()), "{not}");
        }
    }

    #[test]
    fn malformed_ranges_are_refused_in_words() {
        for bad in [
            "", "a", "1-", "-1", "1--2", "01", "1-02", "1,,2", " 1", "1/lxd/0", "1-2-3",
        ] {
            let part = bad
                .split(',')
                .find(|p| MachineRanges::parse(p).is_err())
                .unwrap_or(bad);
            assert_eq!(
                MachineRanges::parse(bad),
                Err(FilterError::BadRange(part.to_string())),
                "{bad:?}"
            );
        }
        assert_eq!(
            MachineRanges::parse("9-2").unwrap_err().to_string(),
            r#"machine range "9-2" runs backwards: write the smaller number first"#
        );
        let many = vec!["1"; MOST_PARTS + 1].join(",");
        assert_eq!(
            MachineRanges::parse(&many),
            Err(FilterError::TooMany(MOST_PARTS + 1))
        );
    }

    #[test]
    fn names_are_read_and_refused_in_words() {
        let filter = StatusFilter::parse(Some("wordpress,mysql"), Some("ntp/0"), None).unwrap();
        assert_eq!(filter.applications.len(), 2);
        assert_eq!(filter.units.len(), 1);
        assert!(filter.names_any() && !filter.is_whole());
        assert_eq!(
            StatusFilter::parse(Some("Word"), None, None),
            Err(FilterError::BadApplication("Word".into()))
        );
        assert_eq!(
            StatusFilter::parse(None, Some("wordpress"), None),
            Err(FilterError::BadUnit("wordpress".into()))
        );
        assert_eq!(
            StatusFilter::parse(Some(""), None, None),
            Err(FilterError::BadApplication(String::new()))
        );
        assert!(StatusFilter::parse(None, None, None).unwrap().is_whole());
    }

    #[test]
    fn a_filter_asks_for_itself() {
        let filter =
            StatusFilter::parse(Some("mysql,wordpress"), Some("ntp/0"), Some("7,1-3")).unwrap();
        assert_eq!(
            filter.query(),
            "?application=mysql,wordpress&unit=ntp/0&machines=1-3,7"
        );
        assert_eq!(StatusFilter::default().query(), "");
    }

    /// Whether `pattern` and `parses` agree on `s`, but for numbers too big
    /// for a `u64` (which the pattern allows and the parser refuses).
    fn agree(pattern: &str, s: &str, parses: bool) -> Result<(), TestCaseError> {
        let matches = regex::Regex::new(pattern).unwrap().is_match(s);
        prop_assert!(!parses || matches, "{s:?} parses but {pattern} refuses it");
        let too_big = s
            .split(|c: char| !c.is_ascii_digit())
            .any(|digits| digits.len() >= 20);
        let backwards = MachineRanges::parse(s) == Err(FilterError::BackwardsRange(s.into()))
            || s.split(',')
                .any(|p| MachineRanges::parse(p) == Err(FilterError::BackwardsRange(p.into())));
        prop_assert!(
            !matches || parses || too_big || backwards,
            "{s:?} matches {pattern} but does not parse"
        );
        Ok(())
    }

    proptest! {
        #[test]
        fn the_documented_list_patterns_agree_with_the_parsers(
            s in "([a-z0-9]{1,3}(/[0-9]{1,2})?|[0-9]{1,3}(-[0-9]{0,3})?|)(,([a-z0-9-]{0,3}(/[0-9]{1,2})?|[0-9]{1,3}(-[0-9]{0,3})?)){0,3}"
        ) {
            agree(MACHINE_RANGES_PATTERN, &s, MachineRanges::parse(&s).is_ok())?;
            agree(APPLICATION_LIST_PATTERN, &s, StatusFilter::parse(Some(&s), None, None).is_ok())?;
            agree(UNIT_LIST_PATTERN, &s, StatusFilter::parse(None, Some(&s), None).is_ok())?;
        }
    }
}
