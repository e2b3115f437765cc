//! AWS's price list for EC2: the bulk offer file AWS publishes for each
//! region (`https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/<region>/index.csv`),
//! read when `[provider.ec2] price_list` names a downloaded copy. Its
//! on-demand, Linux, shared-tenancy hourly price of each instance type
//! replaces the embedded catalogue's, so plans, the price ceiling and
//! status use the prices AWS publishes today.
//!
//! The file opens with a few `"key","value"` lines (format version,
//! publication date, ...), then a header row beginning with `"SKU"`, then
//! one row per price. Rows for other terms (reserved), operating systems,
//! tenancies, pre-installed software, capacity reservations, currencies,
//! units or regions are skipped.

use std::collections::BTreeMap;
use std::path::Path;

use crate::domain::instance_types::HourlyPrice;

/// Why the price list cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PriceListError {
    #[error("cannot read the EC2 price list {path}: {reason}")]
    Read { path: String, reason: String },
    #[error(
        "the EC2 price list {path} is not AWS's offer file: {reason} (expected the CSV at \
         .../offers/v1.0/aws/AmazonEC2/current/<region>/index.csv)"
    )]
    Format { path: String, reason: String },
    #[error("the EC2 price list {path} has no on-demand Linux price for region {region:?}")]
    Empty { path: String, region: String },
}

/// The columns a price row is chosen and read by, and the value each
/// filter column must have.
const FILTERS: [(&str, &str); 6] = [
    ("TermType", "OnDemand"),
    ("Unit", "Hrs"),
    ("Operating System", "Linux"),
    ("Tenancy", "Shared"),
    ("Pre Installed S/W", "NA"),
    ("Currency", "USD"),
];

/// Reads the price list at `path`: each instance type's on-demand Linux
/// shared-tenancy price in `region`.
///
/// # Errors
///
/// [`PriceListError`] when the file cannot be read, is not an offer file
/// (no header row, a missing column, a price that is not a number), or
/// holds no price for the region.
pub fn read_price_list(
    path: &Path,
    region: &str,
) -> Result<BTreeMap<String, HourlyPrice>, PriceListError> {
    let text = std::fs::read_to_string(path).map_err(|e| PriceListError::Read {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    parse_price_list(&text, region).map_err(|e| match e {
        PriceListError::Format { reason, .. } => PriceListError::Format {
            path: path.display().to_string(),
            reason,
        },
        PriceListError::Empty { region, .. } => PriceListError::Empty {
            path: path.display().to_string(),
            region,
        },
        other => other,
    })
}

/// [`read_price_list`] of the file's text.
///
/// # Errors
///
/// As [`read_price_list`], naming no path.
pub fn parse_price_list(
    text: &str,
    region: &str,
) -> Result<BTreeMap<String, HourlyPrice>, PriceListError> {
    let format = |reason: String| PriceListError::Format {
        path: String::new(),
        reason,
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .from_reader(text.as_bytes());
    let mut records = reader.records();
    let header = loop {
        match records.next() {
            Some(Ok(record)) if record.get(0) == Some("SKU") => break record,
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(format(e.to_string())),
            None => return Err(format("no header row beginning with \"SKU\"".into())),
        }
    };
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| format(format!("no {name:?} column")))
    };
    let instance_type = column("Instance Type")?;
    let price = column("PricePerUnit")?;
    let filters: Vec<(usize, &str)> = FILTERS
        .iter()
        .map(|(name, want)| Ok((column(name)?, *want)))
        .collect::<Result<_, PriceListError>>()?;
    // Not in every edition of the file: checked when present.
    let capacity = header.iter().position(|h| h == "CapacityStatus");
    let region_code = header.iter().position(|h| h == "Region Code");

    let mut prices = BTreeMap::new();
    for (line, record) in records.enumerate() {
        let record = record.map_err(|e| format(e.to_string()))?;
        let field = |i: usize| record.get(i).unwrap_or("");
        let chosen = filters.iter().all(|(i, want)| field(*i) == *want)
            && capacity.is_none_or(|i| field(i) == "Used")
            && region_code.is_none_or(|i| field(i) == region)
            && !field(instance_type).is_empty();
        if !chosen {
            continue;
        }
        let text = field(price);
        let parsed = dollars(text).ok_or_else(|| {
            format(format!(
                "price {text:?} of {} (row {}) is not a number of dollars",
                field(instance_type),
                line + 1
            ))
        })?;
        prices.insert(field(instance_type).to_string(), parsed);
    }
    if prices.is_empty() {
        return Err(PriceListError::Empty {
            path: String::new(),
            region: region.to_string(),
        });
    }
    Ok(prices)
}

/// `0.0416000000` as a price, rounded to the millionth of a dollar.
fn dollars(text: &str) -> Option<HourlyPrice> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let kept = &frac[..frac.len().min(6)];
    let mut micro: u64 = whole.parse::<u64>().ok()?.checked_mul(1_000_000)?;
    let scale = 10u64.pow(6 - u32::try_from(kept.len()).ok()?);
    if !kept.is_empty() {
        micro = micro.checked_add(kept.parse::<u64>().ok()? * scale)?;
    }
    if frac.as_bytes().get(6).is_some_and(|d| *d >= b'5') {
        micro = micro.checked_add(1)?;
    }
    Some(HourlyPrice::from_micro_usd(micro))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head of a real offer file, with rows every filter must skip.
    const OFFER_FILE: &str = r#""FormatVersion","v1.0"
"Disclaimer","This pricing list is for informational purposes only."
"Publication Date","2026-11-20T18:12:40Z"
"Version","20261120181240"
"OfferCode","AmazonEC2"
"SKU","OfferTermCode","RateCode","TermType","PriceDescription","EffectiveDate","StartingRange","EndingRange","Unit","PricePerUnit","Currency","Instance Type","Tenancy","Operating System","CapacityStatus","Pre Installed S/W","Region Code"
"A1","JRTCKXETXF","A1.JRTCKXETXF.6YS6EN2CT7","OnDemand","$0.0416 per On Demand Linux t3.medium Instance Hour","2026-11-01T00:00:00Z","0","Inf","Hrs","0.0416000000","USD","t3.medium","Shared","Linux","Used","NA","us-east-1"
"A2","JRTCKXETXF","A2.JRTCKXETXF.6YS6EN2CT7","OnDemand","$0.0600 per On Demand Windows t3.medium Instance Hour","2026-11-01T00:00:00Z","0","Inf","Hrs","0.0600000000","USD","t3.medium","Shared","Windows","Used","NA","us-east-1"
"A3","4NA7Y494T4","A3.4NA7Y494T4.6YS6EN2CT7","Reserved","Linux/UNIX, 1 yr, No Upfront","2026-11-01T00:00:00Z","0","Inf","Hrs","0.0262000000","USD","t3.medium","Shared","Linux","Used","NA","us-east-1"
"A4","JRTCKXETXF","A4.JRTCKXETXF.6YS6EN2CT7","OnDemand","$0.0458 per Dedicated Linux t3.medium Instance Hour","2026-11-01T00:00:00Z","0","Inf","Hrs","0.0458000000","USD","t3.medium","Dedicated","Linux","Used","NA","us-east-1"
"A5","JRTCKXETXF","A5.JRTCKXETXF.6YS6EN2CT7","OnDemand","$0.0000 per Unused Reservation, Linux t3.medium","2026-11-01T00:00:00Z","0","Inf","Hrs","0.0000000000","USD","t3.medium","Shared","Linux","UnusedCapacityReservation","NA","us-east-1"
"A6","JRTCKXETXF","A6.JRTCKXETXF.6YS6EN2CT7","OnDemand","$0.1140 per On Demand Linux m5.large with SQL Web","2026-11-01T00:00:00Z","0","Inf","Hrs","0.1140000000","USD","m5.large","Shared","Linux","Used","SQL Web","us-east-1"
"A7","JRTCKXETXF","A7.JRTCKXETXF.6YS6EN2CT7","OnDemand","$0.0900 per On Demand Linux m5.large Instance Hour","2026-11-01T00:00:00Z","0","Inf","Hrs","0.0900000000","USD","m5.large","Shared","Linux","Used","NA","us-east-1"
"A8","JRTCKXETXF","A8.JRTCKXETXF.6YS6EN2CT7","OnDemand","$0.1000 per On Demand Linux m5.large Instance Hour","2026-11-01T00:00:00Z","0","Inf","Hrs","0.1000000000","USD","m5.large","Shared","Linux","Used","NA","eu-west-1"
"A9","JRTCKXETXF","A9.JRTCKXETXF.6YS6EN2CT7","OnDemand","$0.00347 per On Demand Linux t4g.nano, rounded","2026-11-01T00:00:00Z","0","Inf","Hrs","0.0034650000","USD","t4g.nano","Shared","Linux","Used","NA","us-east-1"
"#;

    fn price(text: &str) -> HourlyPrice {
        text.parse().unwrap()
    }

    #[test]
    fn only_on_demand_linux_shared_prices_of_the_region_are_taken() {
        let prices = parse_price_list(OFFER_FILE, "us-east-1").unwrap();
        assert_eq!(
            prices,
            BTreeMap::from([
                ("m5.large".to_string(), price("0.09")),
                ("t3.medium".to_string(), price("0.0416")),
                ("t4g.nano".to_string(), price("0.003465")),
            ])
        );
        let europe = parse_price_list(OFFER_FILE, "eu-west-1").unwrap();
        assert_eq!(europe.get("m5.large"), Some(&price("0.1")));
    }

    #[test]
    fn a_file_that_is_not_an_offer_file_says_what_it_lacks() {
        let no_header = parse_price_list("\"FormatVersion\",\"v1.0\"\n", "us-east-1");
        assert!(
            matches!(&no_header, Err(PriceListError::Format { reason, .. }) if reason.contains("no header row")),
            "{no_header:?}"
        );
        let no_price = parse_price_list("\"SKU\",\"Instance Type\"\n", "us-east-1");
        assert!(
            matches!(&no_price, Err(PriceListError::Format { reason, .. }) if reason == "no \"PricePerUnit\" column"),
            "{no_price:?}"
        );
        let bad = OFFER_FILE.replace("\"0.0416000000\"", "\"0,04\"");
        let bad = parse_price_list(&bad, "us-east-1");
        assert!(
            matches!(&bad, Err(PriceListError::Format { reason, .. }) if reason.contains("\"0,04\" of t3.medium")),
            "{bad:?}"
        );
        assert_eq!(
            parse_price_list(OFFER_FILE, "ap-south-2"),
            Err(PriceListError::Empty {
                path: String::new(),
                region: "ap-south-2".into()
            })
        );
    }

    #[test]
    fn a_missing_file_is_named() {
        let err = read_price_list(Path::new("/nonexistent/index.csv"), "us-east-1").unwrap_err();
        assert!(err
            .to_string()
            .starts_with("cannot read the EC2 price list /nonexistent/index.csv"));
    }

    #[test]
    fn dollars_round_to_the_millionth() {
        assert_eq!(dollars("0.0416000000"), Some(price("0.0416")));
        assert_eq!(dollars("0.0000005"), Some(price("0.000001")));
        assert_eq!(dollars("12"), Some(price("12")));
        assert_eq!(dollars("-1"), None);
        assert_eq!(dollars(""), None);
        assert_eq!(dollars("1.2.3"), None);
    }
}
