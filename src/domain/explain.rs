//! Why a machine can or cannot be placed: how many instance types each
//! constraint ruled out, which zones were ruled out and why, and the
//! nearest fits that one relaxed constraint would allow, with prices.
//!
//! [`explain`] is a pure function of the machine's requirements, the
//! catalogue, the price ceiling and what is known of the zones; the store
//! and the engine gather those, the API and the command line show the
//! result ([`Explanation`]'s `Display` is the text `berth explain` prints,
//! and [`Explanation::summary`] the one line a machine in error carries).

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::domain::constraints::Amount;
use crate::domain::instance_types::{
    filters, select, size_text, Catalogue, HourlyPrice, InstanceType, Requirements, SelectError,
};
use crate::domain::zones::{Zone, ZoneHealth};

/// What is known of a machine's zones, for [`explain`].
pub struct ZoneFacts<'a> {
    /// Every zone the cloud has, with its health (an administrator's
    /// disable included).
    pub zones: &'a [Zone],
    /// Whether the cloud offers instance type `.1` in zone `.0`.
    pub offers: &'a dyn Fn(&str, &str) -> bool,
    /// Zones that refused this machine, with the cloud's words.
    pub refusals: &'a [(String, String)],
    /// The zone of a `zone=` placement.
    pub placement: Option<&'a str>,
}

/// Everything [`explain`] looks at.
pub struct Question<'a> {
    pub requirements: &'a Requirements,
    pub catalogue: &'a Catalogue,
    /// `[provisioner] max_hourly_price`; `None` for a container, which
    /// costs nothing of its own.
    pub price_ceiling: Option<HourlyPrice>,
    pub zones: ZoneFacts<'a>,
}

/// One constraint's share of the narrowing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// `mem=16G`, or `max_hourly_price=10` for the price ceiling.
    pub constraint: String,
    /// Types this constraint ruled out of those the earlier ones left.
    pub ruled_out: usize,
    /// Types left after it.
    pub left: usize,
}

/// A zone, and whether the machine can go there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneVerdict {
    pub zone: String,
    pub usable: bool,
    /// Why not, when not: `down (...)`, `disabled by an administrator`,
    /// `outside zones=a,b`, `refused this machine: ...`, `offers none of
    /// the 3 fitting types`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// An instance type and its price.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fit {
    pub instance_type: String,
    pub hourly_price: HourlyPrice,
}

/// A fit that one relaxed constraint would allow.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relaxation {
    /// The constraint as it was.
    pub instead_of: String,
    /// The constraint as it would have to be: `mem=3.75G`, or `no
    /// instance-type` when the fix is to drop it.
    pub relaxed: String,
    #[serde(flatten)]
    pub fit: Fit,
}

/// The answer to "why is this machine (not) placed?".
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Explanation {
    /// How many types the catalogue has.
    pub catalogue_types: usize,
    /// The constraints in the order applied, each with what it ruled out.
    pub steps: Vec<Step>,
    /// The cheapest type left once every constraint is applied (the one
    /// berth launches where the zone offers it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cheapest_fit: Option<Fit>,
    /// The type the constraints choose when it costs more than the price
    /// ceiling although cheaper types fit: with a `max` size (`mem=max`
    /// wants the largest). berth refuses it rather than launch a smaller
    /// type in its place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over_ceiling: Option<Fit>,
    /// The named `instance-type` is not in the catalogue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unknown_instance_type: Option<String>,
    /// Every zone, by name; with a `zone=` placement naming no known zone,
    /// that zone too.
    pub zones: Vec<ZoneVerdict>,
    /// Names in the `zones` constraint that match no known zone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown_zones: Vec<String>,
    /// The nearest fits, cheapest first, when no type fits or the type
    /// chosen is above the ceiling (`over_ceiling`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nearest_fits: Vec<Relaxation>,
}

impl Explanation {
    /// Whether some type fits and some zone can take it.
    pub fn placeable(&self) -> bool {
        self.cheapest_fit.is_some() && self.zones.iter().any(|z| z.usable)
    }

    /// One line: what ruled the machine out (and the nearest fit), or where
    /// it fits.
    pub fn summary(&self) -> String {
        if let Some(name) = &self.unknown_instance_type {
            return format!(
                "instance-type={name} is not one of the catalogue's {} types",
                self.catalogue_types
            );
        }
        if let Some(chosen) = &self.over_ceiling {
            let mut text = format!(
                "these constraints choose {} at ${}/h, above {}",
                chosen.instance_type,
                chosen.hourly_price,
                self.ceiling_step().unwrap_or(PRICE_CEILING_KEY)
            );
            if let Some(nearest) = self.nearest_fits.first() {
                text.push_str(&format!("; {}", nearest));
            }
            return text;
        }
        let Some(fit) = &self.cheapest_fit else {
            let mut text = match self
                .steps
                .iter()
                .rev()
                .find(|s| s.ruled_out > 0 && s.left == 0)
            {
                Some(last) => format!(
                    "no instance type fits: {} ruled out the last {} of {} types",
                    last.constraint, last.ruled_out, self.catalogue_types
                ),
                None => "the catalogue has no instance types".to_string(),
            };
            if let Some(nearest) = self.nearest_fits.first() {
                text.push_str(&format!("; {}", nearest));
            }
            return text;
        };
        if let Some(typo) = self
            .zones
            .iter()
            .find(|z| z.why.as_deref() == Some(NO_SUCH_ZONE))
        {
            return format!(
                "zone={} names no known zone (known: {})",
                typo.zone,
                self.known_zones().join(", ")
            );
        }
        if !self.unknown_zones.is_empty() {
            return format!(
                "zones={} names no known zone (known: {})",
                self.unknown_zones.join(","),
                self.known_zones().join(", ")
            );
        }
        if self.zones.iter().any(|z| z.usable) {
            let usable: Vec<&str> = self
                .zones
                .iter()
                .filter(|z| z.usable)
                .map(|z| z.zone.as_str())
                .collect();
            return format!(
                "fits {} at ${}/h in {}",
                fit.instance_type,
                fit.hourly_price,
                usable.join(", ")
            );
        }
        let reasons: Vec<String> = self
            .zones
            .iter()
            .map(|z| format!("{}: {}", z.zone, z.why.as_deref().unwrap_or("unusable")))
            .collect();
        if reasons.is_empty() {
            "no availability zones are known".to_string()
        } else {
            format!("no zone can take it ({})", reasons.join("; "))
        }
    }

    /// The price ceiling's step: `max_hourly_price=10`.
    fn ceiling_step(&self) -> Option<&str> {
        self.steps
            .iter()
            .map(|s| s.constraint.as_str())
            .find(|c| c.starts_with(PRICE_CEILING_KEY))
    }

    fn known_zones(&self) -> Vec<&str> {
        self.zones
            .iter()
            .filter(|z| z.why.as_deref() != Some(NO_SUCH_ZONE))
            .map(|z| z.zone.as_str())
            .collect()
    }
}

impl fmt::Display for Relaxation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} would fit {} at ${}/h",
            self.relaxed, self.fit.instance_type, self.fit.hourly_price
        )
    }
}

impl fmt::Display for Explanation {
    /// The text `berth explain` prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary())?;
        writeln!(f)?;
        writeln!(
            f,
            "Instance types: {} in the catalogue",
            self.catalogue_types
        )?;
        if let Some(name) = &self.unknown_instance_type {
            writeln!(f, "  instance-type={name:<22} not in the catalogue")?;
        }
        for step in &self.steps {
            writeln!(
                f,
                "  {:<36} ruled out {:>4}, {:>4} left",
                step.constraint, step.ruled_out, step.left
            )?;
        }
        match (&self.cheapest_fit, &self.over_ceiling) {
            (Some(fit), _) => writeln!(
                f,
                "  cheapest fit: {} at ${}/h",
                fit.instance_type, fit.hourly_price
            )?,
            (None, Some(chosen)) => writeln!(
                f,
                "  chosen: {} at ${}/h, above the ceiling",
                chosen.instance_type, chosen.hourly_price
            )?,
            (None, None) => writeln!(f, "  nothing fits")?,
        }
        writeln!(f)?;
        writeln!(f, "Zones:")?;
        if self.zones.is_empty() {
            writeln!(f, "  none known")?;
        }
        for zone in &self.zones {
            match &zone.why {
                None if zone.usable => writeln!(f, "  {:<20} usable", zone.zone)?,
                None => writeln!(f, "  {:<20} available", zone.zone)?,
                Some(why) => writeln!(f, "  {:<20} ruled out: {why}", zone.zone)?,
            }
        }
        if !self.unknown_zones.is_empty() {
            writeln!(
                f,
                "  zones= names unknown zones: {}",
                self.unknown_zones.join(", ")
            )?;
        }
        if !self.nearest_fits.is_empty() {
            writeln!(f)?;
            writeln!(f, "Nearest fits, one constraint relaxed:")?;
            for relaxation in &self.nearest_fits {
                writeln!(f, "  instead of {}: {relaxation}", relaxation.instead_of)?;
            }
        }
        Ok(())
    }
}

/// What a verdict says of a `zone=` placement naming no known zone.
const NO_SUCH_ZONE: &str = "no such zone";

/// The name `max_hourly_price` has in explanations.
pub const PRICE_CEILING_KEY: &str = "max_hourly_price";

/// Explains where (and whether) a machine with these requirements fits.
///
/// # Guarantees
///
/// - The steps apply the constraints in the order of
///   [`crate::domain::instance_types::filters`], then the price ceiling;
///   their `ruled_out` add up to the catalogue's size less what is left.
/// - `cheapest_fit` is what [`select`] chooses, when under the ceiling.
///   When its choice is above the ceiling while cheaper types fit (a `max`
///   size), it is `over_ceiling` instead, and the nearest fits are the
///   changes of one constraint that bring the choice under.
/// - Every known zone has a verdict; a zone is usable only if it is
///   available, allowed by `zones=` and the placement, has not refused
///   the machine, and offers a fitting type.
pub fn explain(question: &Question<'_>) -> Explanation {
    let req = question.requirements;
    let catalogue = question.catalogue;
    let mut explanation = Explanation {
        catalogue_types: catalogue.len(),
        steps: Vec::new(),
        cheapest_fit: None,
        unknown_instance_type: None,
        zones: Vec::new(),
        unknown_zones: Vec::new(),
        over_ceiling: None,
        nearest_fits: Vec::new(),
    };
    let tests = match filters(req, catalogue) {
        Ok(tests) => tests,
        Err(SelectError::InvalidInstanceType(name)) => {
            explanation.unknown_instance_type = Some(name);
            explanation.zones = zone_verdicts(question, &[]);
            return explanation;
        }
        Err(SelectError::NoMatch { .. }) => Vec::new(),
    };
    let ceiling = question.price_ceiling;
    let mut left: Vec<&InstanceType> = catalogue.types().iter().collect();
    for test in &tests {
        let before = left.len();
        left.retain(|t| test.accepts(t));
        explanation.steps.push(Step {
            constraint: test.constraint.clone(),
            ruled_out: before - left.len(),
            left: left.len(),
        });
    }
    if let Some(ceiling) = ceiling {
        let before = left.len();
        left.retain(|t| t.price <= ceiling);
        explanation.steps.push(Step {
            constraint: format!("{PRICE_CEILING_KEY}={ceiling}"),
            ruled_out: before - left.len(),
            left: left.len(),
        });
    }
    let under_ceiling = |t: &InstanceType| ceiling.is_none_or(|c| t.price <= c);
    let chosen = select(req, catalogue).ok();
    match chosen {
        Some(t) if under_ceiling(t) => explanation.cheapest_fit = Some(fit_of(t)),
        Some(t) if !left.is_empty() => {
            explanation.over_ceiling = Some(fit_of(t));
            let ceiling_step = ceiling
                .map(|c| format!("{PRICE_CEILING_KEY}={c}"))
                .unwrap_or_default();
            explanation.nearest_fits =
                under_the_ceiling(req, catalogue, t, &left, &under_ceiling, ceiling_step);
        }
        _ => explanation.cheapest_fit = cheapest(&left).map(fit_of),
    }
    explanation.zones = zone_verdicts(question, &left);
    explanation.unknown_zones = unknown_zones(question);
    if explanation.cheapest_fit.is_none() && explanation.over_ceiling.is_none() {
        // One constraint relaxed at a time, the price ceiling included.
        let count = tests.len() + usize::from(ceiling.is_some());
        for skipped in 0..count {
            let others = |t: &InstanceType| {
                tests
                    .iter()
                    .enumerate()
                    .all(|(i, f)| i == skipped || f.accepts(t))
                    && (skipped == tests.len() || under_ceiling(t))
            };
            let candidates: Vec<&InstanceType> =
                catalogue.types().iter().filter(|t| others(t)).collect();
            let instead_of = explanation.steps[skipped].constraint.clone();
            if let Some(relaxation) = nearest(&instead_of, &candidates) {
                explanation.nearest_fits.push(relaxation);
            }
        }
        explanation.nearest_fits.sort_by_key(|r| r.fit.hourly_price);
    }
    explanation
}

/// When the constraints choose `chosen`, above the price ceiling, while
/// the types in `left` fit under it: each change of one constraint that
/// brings [`select`]'s choice under the ceiling (the ceiling raised to
/// the choice's price, a `max` size set to the largest under the
/// ceiling), with what it would then choose.
fn under_the_ceiling(
    req: &Requirements,
    catalogue: &Catalogue,
    chosen: &InstanceType,
    left: &[&InstanceType],
    under_ceiling: &dyn Fn(&InstanceType) -> bool,
    ceiling_step: String,
) -> Vec<Relaxation> {
    let mut relaxations = Vec::new();
    for size in &SIZES {
        let mut changed = req.clone();
        let setting = (size.of_requirements)(&mut changed);
        if *setting != Some(Amount::Max) {
            continue;
        }
        let Some(largest) = left.iter().map(|t| (size.of_type)(t)).max() else {
            continue;
        };
        *setting = Some(Amount::AtLeast(largest));
        if let Some(t) = select(&changed, catalogue)
            .ok()
            .filter(|t| under_ceiling(t))
        {
            relaxations.push(Relaxation {
                instead_of: format!("{}=max", size.key),
                relaxed: size.setting(largest),
                fit: fit_of(t),
            });
        }
    }
    relaxations.push(Relaxation {
        instead_of: ceiling_step,
        relaxed: format!("{PRICE_CEILING_KEY}={}", chosen.price),
        fit: fit_of(chosen),
    });
    relaxations.sort_by_key(|r| r.fit.hourly_price);
    relaxations
}

/// A constraint on a size (`mem`, `cores`, `cpu-power`): the requirement
/// it sets, and how much of it a type has.
struct Size {
    key: &'static str,
    of_requirements: fn(&mut Requirements) -> &mut Option<Amount>,
    of_type: fn(&InstanceType) -> u64,
}

impl Size {
    /// `mem=1024G`, `cores=8`: the constraint asking for `value`.
    fn setting(&self, value: u64) -> String {
        match self.key {
            "mem" => format!("mem={}", size_text(value)),
            key => format!("{key}={value}"),
        }
    }
}

const SIZES: [Size; 3] = [
    Size {
        key: "mem",
        of_requirements: |r| &mut r.mem,
        of_type: |t| t.mem_mib,
    },
    Size {
        key: "cores",
        of_requirements: |r| &mut r.cores,
        of_type: |t| t.vcpus,
    },
    Size {
        key: "cpu-power",
        of_requirements: |r| &mut r.cpu_power,
        of_type: |t| t.cpu_power,
    },
];

fn fit_of(t: &InstanceType) -> Fit {
    Fit {
        instance_type: t.name.clone(),
        hourly_price: t.price,
    }
}

fn cheapest<'c>(types: &[&'c InstanceType]) -> Option<&'c InstanceType> {
    types
        .iter()
        .copied()
        .min_by(|a, b| (a.price, a.mem_mib, &a.name).cmp(&(b.price, b.mem_mib, &b.name)))
}

/// The fit nearest to what `instead_of` asked for among `candidates` (which
/// meet every other constraint): for a size, the largest there is of it
/// (then the cheapest); otherwise the cheapest.
fn nearest(instead_of: &str, candidates: &[&InstanceType]) -> Option<Relaxation> {
    let key = instead_of.split('=').next().unwrap_or(instead_of);
    let size = SIZES.iter().find(|size| size.key == key);
    let best = match size {
        Some(size) => candidates.iter().copied().max_by(|a, b| {
            let (a_has, b_has) = ((size.of_type)(a), (size.of_type)(b));
            a_has.cmp(&b_has).then(b.price.cmp(&a.price))
        }),
        None => cheapest(candidates),
    }?;
    let relaxed = match (size, key) {
        (Some(size), _) => size.setting((size.of_type)(best)),
        (None, "arch") => format!("arch={}", best.arch),
        (None, "storage") => format!("storage={}", size_text(best.persistent_storage_mib())),
        (None, PRICE_CEILING_KEY) => format!("{PRICE_CEILING_KEY}={}", best.price),
        (None, other) => format!("no {other}"),
    };
    Some(Relaxation {
        instead_of: instead_of.to_string(),
        relaxed,
        fit: fit_of(best),
    })
}

fn zone_verdicts(question: &Question<'_>, fitting: &[&InstanceType]) -> Vec<ZoneVerdict> {
    let facts = &question.zones;
    let allowed: BTreeSet<&str> = question
        .requirements
        .zones
        .iter()
        .map(String::as_str)
        .collect();
    let names: BTreeSet<&str> = facts.zones.iter().map(|z| z.name.as_str()).collect();
    let mut verdicts = Vec::new();
    if let Some(placed) = facts.placement {
        if !names.contains(placed) {
            verdicts.push(ZoneVerdict {
                zone: placed.to_string(),
                usable: false,
                why: Some(NO_SUCH_ZONE.to_string()),
            });
        }
    }
    for name in names {
        let unavailable = facts.zones.iter().find_map(|z| match &z.health {
            ZoneHealth::Unavailable { reason } if z.name == name => Some(reason.as_str()),
            _ => None,
        });
        let refused = facts
            .refusals
            .iter()
            .find(|(zone, _)| zone == name)
            .map(|(_, why)| why.as_str());
        let why = if facts.placement.is_some_and(|p| p != name) {
            Some(format!(
                "not the zone= placement ({})",
                facts.placement.unwrap_or_default()
            ))
        } else if !allowed.is_empty() && !allowed.contains(name) {
            Some(format!(
                "outside zones={}",
                question.requirements.zones.join(",")
            ))
        } else if let Some(reason) = unavailable {
            Some(if reason.contains("administrator") {
                reason.to_string()
            } else {
                format!("down ({reason})")
            })
        } else if let Some(reason) = refused {
            Some(format!("refused this machine: {reason}"))
        } else if !fitting.is_empty() && !fitting.iter().any(|t| (facts.offers)(name, &t.name)) {
            Some(match fitting {
                [one] => format!("does not offer {}", one.name),
                many => format!("offers none of the {} fitting types", many.len()),
            })
        } else {
            None
        };
        verdicts.push(ZoneVerdict {
            zone: name.to_string(),
            usable: why.is_none() && !fitting.is_empty(),
            why,
        });
    }
    verdicts
}

fn unknown_zones(question: &Question<'_>) -> Vec<String> {
    let known: BTreeSet<&str> = question
        .zones
        .zones
        .iter()
        .map(|z| z.name.as_str())
        .collect();
    let mut unknown: Vec<String> = question
        .requirements
        .zones
        .iter()
        .filter(|z| !known.contains(z.as_str()))
        .cloned()
        .collect();
    unknown.sort();
    unknown.dedup();
    unknown
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::domain::constraints::Constraints;
    use crate::domain::machine::MachineRole;

    const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];

    fn healthy() -> Vec<Zone> {
        ZONES.iter().map(|z| Zone::available(*z)).collect()
    }

    fn offers_everything(_: &str, _: &str) -> bool {
        true
    }

    fn requirements(constraints: &str) -> Requirements {
        let constraints = Constraints::parse(constraints).expect("constraints");
        Requirements::resolve(&constraints, MachineRole::Workload)
    }

    /// Explains `constraints` on the embedded catalogue under the default
    /// ceiling of $10/h.
    fn explained(
        constraints: &str,
        zones: &[Zone],
        offers: &dyn Fn(&str, &str) -> bool,
        refusals: &[(String, String)],
        placement: Option<&str>,
    ) -> Explanation {
        let req = requirements(constraints);
        explain(&Question {
            requirements: &req,
            catalogue: Catalogue::embedded().expect("catalogue"),
            price_ceiling: Some("10".parse().unwrap()),
            zones: ZoneFacts {
                zones,
                offers,
                refusals,
                placement,
            },
        })
    }

    /// Compares `explanation`'s text with `golden/explain-<name>.txt`;
    /// `BERTH_UPDATE_GOLDEN=1` writes it instead.
    fn golden(name: &str, explanation: &Explanation) {
        let path: PathBuf = [
            env!("CARGO_MANIFEST_DIR"),
            "src/domain/golden",
            &format!("explain-{name}.txt"),
        ]
        .iter()
        .collect();
        let text = explanation.to_string();
        if std::env::var_os("BERTH_UPDATE_GOLDEN").is_some() {
            std::fs::write(&path, &text).expect("write golden file");
            return;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!("{}: {e} (BERTH_UPDATE_GOLDEN=1 writes it)", path.display())
        });
        assert_eq!(
            text, want,
            "{name}: the explanation differs from its golden file"
        );
    }

    #[test]
    fn an_arch_no_type_has_is_what_rules_everything_out() {
        let e = explained("arch=s390x", &healthy(), &offers_everything, &[], None);
        assert!(!e.placeable());
        assert!(e
            .summary()
            .starts_with("no instance type fits: arch=s390x ruled out the last"));
        golden("arch", &e);
    }

    #[test]
    fn mem_rules_out_the_last_arm_types_and_the_largest_arm_type_is_the_nearest() {
        let e = explained(
            "arch=arm64 mem=100000G",
            &healthy(),
            &offers_everything,
            &[],
            None,
        );
        let mem = e
            .steps
            .iter()
            .find(|s| s.constraint == "mem=100000G")
            .unwrap();
        assert_eq!(mem.left, 0);
        assert!(mem.ruled_out > 0);
        assert!(
            e.summary().contains("mem=100000G ruled out the last"),
            "{}",
            e.summary()
        );
        assert!(e.nearest_fits.iter().any(|r| r.instead_of == "mem=100000G"));
        golden("mem", &e);
    }

    #[test]
    fn cores_rule_out_everything_and_the_ceiling_is_a_step() {
        let e = explained("cores=1000", &healthy(), &offers_everything, &[], None);
        assert!(
            e.summary().contains("cores=1000 ruled out the last"),
            "{}",
            e.summary()
        );
        assert!(e
            .steps
            .iter()
            .any(|s| s.constraint == "max_hourly_price=10"));
        golden("cores", &e);
    }

    #[test]
    fn a_max_size_above_the_ceiling_is_refused_not_replaced_by_the_cheapest_type() {
        let e = explained("mem=max", &healthy(), &offers_everything, &[], None);
        let catalogue = Catalogue::embedded().unwrap();
        let largest = select(&requirements("mem=max"), catalogue).unwrap();
        assert_eq!(e.cheapest_fit, None);
        assert_eq!(e.over_ceiling, Some(fit_of(largest)));
        assert!(!e.placeable());
        assert!(
            e.summary().starts_with(&format!(
                "these constraints choose {} at ${}/h, above max_hourly_price=10; mem=",
                largest.name, largest.price
            )),
            "{}",
            e.summary()
        );
        // Each relaxation names what the selection would then choose,
        // under the ceiling but for the ceiling raised.
        let ceiling: HourlyPrice = "10".parse().unwrap();
        for relaxation in &e.nearest_fits {
            let price = relaxation.fit.hourly_price;
            match relaxation.instead_of.as_str() {
                "mem=max" => {
                    let size = relaxation.relaxed.strip_prefix("mem=").unwrap();
                    let chosen = select(&requirements(&format!("mem={size}")), catalogue).unwrap();
                    assert_eq!(relaxation.fit, fit_of(chosen));
                    assert!(price <= ceiling);
                }
                "max_hourly_price=10" => assert_eq!(relaxation.fit, fit_of(largest)),
                other => panic!("unexpected relaxation of {other}"),
            }
        }
        assert_eq!(e.nearest_fits.len(), 2);
        golden("mem-max", &e);
    }

    #[test]
    fn an_unknown_instance_type_is_named() {
        let e = explained(
            "instance-type=m5.huge",
            &healthy(),
            &offers_everything,
            &[],
            None,
        );
        assert_eq!(e.unknown_instance_type.as_deref(), Some("m5.huge"));
        golden("instance-type", &e);
    }

    #[test]
    fn a_named_type_of_another_arch_is_ruled_out_by_instance_type() {
        let e = explained(
            "arch=arm64 instance-type=m5.large",
            &healthy(),
            &offers_everything,
            &[],
            None,
        );
        assert!(
            e.summary()
                .contains("instance-type=m5.large ruled out the last"),
            "{}",
            e.summary()
        );
        assert!(e
            .nearest_fits
            .iter()
            .any(|r| r.relaxed == "no instance-type"));
    }

    #[test]
    fn a_zone_typo_in_the_placement_is_no_such_zone() {
        let e = explained(
            "",
            &healthy(),
            &offers_everything,
            &[],
            Some("no-such-zone"),
        );
        assert!(!e.placeable());
        assert_eq!(e.zones[0].why.as_deref(), Some("no such zone"));
        golden("zone-typo", &e);
    }

    #[test]
    fn a_zone_typo_in_the_zones_constraint_names_the_known_zones() {
        let e = explained(
            "zones=us-east-1x",
            &healthy(),
            &offers_everything,
            &[],
            None,
        );
        assert!(!e.placeable());
        assert_eq!(
            e.summary(),
            "zones=us-east-1x names no known zone (known: us-east-1a, us-east-1b, us-east-1c)"
        );
    }

    #[test]
    fn a_disabled_zone_and_a_down_zone_say_which_is_which() {
        let zones = vec![
            Zone::unavailable("us-east-1a", "disabled by an administrator"),
            Zone::unavailable("us-east-1b", "impaired"),
            Zone::available("us-east-1c"),
        ];
        let e = explained(
            "zones=us-east-1a,us-east-1b",
            &zones,
            &offers_everything,
            &[],
            None,
        );
        assert!(!e.placeable());
        golden("disabled-zone", &e);
    }

    #[test]
    fn a_zone_out_of_capacity_keeps_the_clouds_words() {
        let refusals = vec![(
            "us-east-1a".to_string(),
            "InsufficientInstanceCapacity: zone us-east-1a is out of capacity".to_string(),
        )];
        let e = explained(
            "zones=us-east-1a",
            &healthy(),
            &offers_everything,
            &refusals,
            None,
        );
        assert!(!e.placeable());
        assert!(e.summary().contains("out of capacity"), "{}", e.summary());
        golden("capacity", &e);
    }

    #[test]
    fn no_fitting_type_offered_in_any_allowed_zone() {
        let only_in_c = |zone: &str, _: &str| zone == "us-east-1c";
        let e = explained(
            "mem=16G zones=us-east-1a,us-east-1b",
            &healthy(),
            &only_in_c,
            &[],
            None,
        );
        assert!(!e.placeable());
        assert!(e.zones[0]
            .why
            .as_deref()
            .unwrap()
            .starts_with("offers none of the"));
        golden("not-offered", &e);
    }

    #[test]
    fn a_machine_that_fits_says_where_and_for_how_much() {
        let e = explained("mem=16G", &healthy(), &offers_everything, &[], None);
        assert!(e.placeable());
        let fit = e.cheapest_fit.clone().unwrap();
        let chosen = select(&requirements("mem=16G"), Catalogue::embedded().unwrap()).unwrap();
        assert_eq!(fit.instance_type, chosen.name);
        assert_eq!(
            e.summary(),
            format!(
                "fits {} at ${}/h in us-east-1a, us-east-1b, us-east-1c",
                chosen.name, chosen.price
            )
        );
        let total: usize = e.steps.iter().map(|s| s.ruled_out).sum();
        assert_eq!(total + e.steps.last().unwrap().left, e.catalogue_types);
    }

    #[test]
    fn sizes_read_as_a_person_writes_them() {
        assert_eq!(size_text(16 * 1024), "16G");
        assert_eq!(size_text(3840), "3.75G");
        assert_eq!(size_text(1740), "1740M");
        assert_eq!(size_text(512), "512M");
    }
}
