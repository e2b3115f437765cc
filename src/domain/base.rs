//! Bases: the operating system release an application's units and their
//! machines run, written `ubuntu@22.04` (Juju's successor to series names
//! such as `jammy`).
//!
//! A [`Base`] is an operating system, a release of it that berth knows, and
//! the risk level of the images to use (`stable` unless given, as in
//! `ubuntu@24.04/edge`). The series names of Ubuntu releases are accepted
//! as aliases (`jammy` is `ubuntu@22.04`). A base prints in its canonical
//! form, which is also how it serializes.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::domain::words::{text_conversions, word_enum};

word_enum! {
    /// An operating system berth can deploy: Ubuntu on every provider;
    /// Debian on existing hosts enlisted over SSH (no cloud provider berth
    /// has looks up Debian images).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Os {
        Ubuntu => "ubuntu",
        Debian => "debian",
    }
}

word_enum! {
    /// How much risk the images of a release may carry, from most to least
    /// tested. The default, and what a base without one means, is `stable`.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Risk {
        #[default]
        Stable => "stable",
        Candidate => "candidate",
        Beta => "beta",
        Edge => "edge",
    }
    /// A word that is not a risk level.
    error UnknownRisk("unknown risk {0:?}: expected stable, candidate, beta or edge");
}

/// A release of an operating system, `22.04` (Ubuntu) or `12` (Debian).
/// Only releases berth knows can be held in a [`Base`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Version {
    major: u8,
    minor: u8,
    /// Written `major.minor` (Ubuntu) rather than `major` (Debian).
    dotted: bool,
}

impl Version {
    /// Reads a version only as Debian writes it: `12`, not `012` or `12.0`.
    fn parse_major(s: &str) -> Option<Version> {
        let digits = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits || s.starts_with('0') {
            return None;
        }
        Some(Version {
            major: s.parse().ok()?,
            minor: 0,
            dotted: false,
        })
    }

    /// Reads a version only as Ubuntu writes it: `22.04`, not `22.4` or
    /// `022.04`.
    fn parse_as_written(s: &str) -> Option<Version> {
        let (major, minor) = s.split_once('.')?;
        let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        if !digits(major) || major.starts_with('0') || minor.len() != 2 || !digits(minor) {
            return None;
        }
        Some(Version {
            major: major.parse().ok()?,
            minor: minor.parse().ok()?,
            dotted: true,
        })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.dotted {
            write!(f, "{}.{:02}", self.major, self.minor)
        } else {
            write!(f, "{}", self.major)
        }
    }
}

/// One Ubuntu release berth knows.
struct UbuntuRelease {
    version: Version,
    series: &'static str,
    lts: bool,
}

const fn release(major: u8, minor: u8, series: &'static str, lts: bool) -> UbuntuRelease {
    UbuntuRelease {
        version: Version {
            major,
            minor,
            dotted: true,
        },
        series,
        lts,
    }
}

/// The Debian releases berth knows, by version and code name: from 10
/// (buster) to 13 (trixie).
const DEBIAN_RELEASES: [(u8, &str); 4] = [
    (10, "buster"),
    (11, "bullseye"),
    (12, "bookworm"),
    (13, "trixie"),
];

/// Every Ubuntu release from 12.04 (precise) to 26.04 (resolute), LTS and
/// interim. Older releases predate the machines berth provisions; a release
/// is added here once its series name is final.
const UBUNTU_RELEASES: [UbuntuRelease; 29] = [
    release(12, 4, "precise", true),
    release(12, 10, "quantal", false),
    release(13, 4, "raring", false),
    release(13, 10, "saucy", false),
    release(14, 4, "trusty", true),
    release(14, 10, "utopic", false),
    release(15, 4, "vivid", false),
    release(15, 10, "wily", false),
    release(16, 4, "xenial", true),
    release(16, 10, "yakkety", false),
    release(17, 4, "zesty", false),
    release(17, 10, "artful", false),
    release(18, 4, "bionic", true),
    release(18, 10, "cosmic", false),
    release(19, 4, "disco", false),
    release(19, 10, "eoan", false),
    release(20, 4, "focal", true),
    release(20, 10, "groovy", false),
    release(21, 4, "hirsute", false),
    release(21, 10, "impish", false),
    release(22, 4, "jammy", true),
    release(22, 10, "kinetic", false),
    release(23, 4, "lunar", false),
    release(23, 10, "mantic", false),
    release(24, 4, "noble", true),
    release(24, 10, "oracular", false),
    release(25, 4, "plucky", false),
    release(25, 10, "questing", false),
    release(26, 4, "resolute", true),
];

/// The operating system release a machine runs, and the risk of its images.
///
/// Written `<os>@<version>[/<risk>]`: `ubuntu@22.04`, `ubuntu@22.04/stable`
/// (the same base), `ubuntu@24.04/edge`. A series name (`jammy`) is also
/// accepted and means its release at `stable` risk. `Display` and serde use
/// the canonical form, which leaves out a `stable` risk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Base {
    os: Os,
    version: Version,
    risk: Risk,
}

/// Why a string is not a base berth knows.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BaseError {
    #[error("invalid base {0:?}: expected <os>@<version>[/<risk>] or a series name")]
    Invalid(String),
    #[error("unknown base {0:?}: expected an ubuntu or debian base")]
    UnknownOs(String),
    #[error("unknown base {0:?}")]
    UnknownVersion(String),
    #[error("invalid base {base:?}: {source}")]
    UnknownRisk {
        base: String,
        #[source]
        source: UnknownRisk,
    },
    #[error("unknown series {0:?}")]
    UnknownSeries(String),
}

impl Base {
    /// The base of an application (and so of its units and machines) that
    /// names none: `ubuntu@24.04`, the newest LTS every provider berth
    /// supports has images for.
    pub const DEFAULT: Base = Base {
        os: Os::Ubuntu,
        version: Version {
            major: 24,
            minor: 4,
            dotted: true,
        },
        risk: Risk::Stable,
    };

    /// The `stable` base of the Ubuntu release called `series` (`jammy` is
    /// `ubuntu@22.04`).
    ///
    /// # Errors
    ///
    /// [`BaseError::UnknownSeries`] when berth knows no release by that name.
    pub fn from_series(series: &str) -> Result<Base, BaseError> {
        UBUNTU_RELEASES
            .iter()
            .find(|release| release.series == series)
            .map(|release| Base {
                os: Os::Ubuntu,
                version: release.version,
                risk: Risk::Stable,
            })
            .ok_or_else(|| BaseError::UnknownSeries(series.to_string()))
    }

    pub fn os(&self) -> Os {
        self.os
    }

    pub fn version(&self) -> Version {
        self.version
    }

    pub fn risk(&self) -> Risk {
        self.risk
    }

    /// This base's release at another risk level.
    pub fn with_risk(self, risk: Risk) -> Base {
        Base { risk, ..self }
    }

    /// The channel images are taken from, always with its risk:
    /// `22.04/stable`.
    pub fn channel(&self) -> String {
        format!("{}/{}", self.version, self.risk)
    }

    fn release(&self) -> Option<&'static UbuntuRelease> {
        match self.os {
            Os::Ubuntu => UBUNTU_RELEASES
                .iter()
                .find(|release| release.version == self.version),
            Os::Debian => None,
        }
    }

    /// The stable base an `/etc/os-release` file describes, by its `ID`
    /// and `VERSION_ID` (`ubuntu` and `22.04`, `debian` and `12`).
    ///
    /// # Errors
    ///
    /// [`BaseError`] when the system is not one berth knows.
    pub fn from_os_release(id: &str, version_id: &str) -> Result<Base, BaseError> {
        format!("{id}@{version_id}").parse()
    }

    /// The series name of an Ubuntu release (`jammy`), used to look up
    /// cloud images; `None` for other systems.
    pub fn series(&self) -> Option<&'static str> {
        self.release().map(|release| release.series)
    }

    /// Whether this is a long-term-support release.
    pub fn is_lts(&self) -> bool {
        self.release().is_some_and(|release| release.lts)
    }

    /// Whether `other` is the same operating system release, whatever the
    /// risk of either: a unit of an `ubuntu@22.04` application may go to an
    /// `ubuntu@22.04/edge` machine.
    pub fn is_compatible(&self, other: &Base) -> bool {
        self.os == other.os && self.version == other.version
    }
}

impl Default for Base {
    fn default() -> Base {
        Base::DEFAULT
    }
}

impl fmt::Display for Base {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.os, self.version)?;
        if self.risk != Risk::Stable {
            write!(f, "/{}", self.risk)?;
        }
        Ok(())
    }
}

impl FromStr for Base {
    type Err = BaseError;

    /// Parses `<os>@<version>[/<risk>]` or a series name.
    ///
    /// # Errors
    ///
    /// - [`BaseError::Invalid`] when the string has neither form;
    /// - [`BaseError::UnknownOs`] for an operating system other than ubuntu;
    /// - [`BaseError::UnknownVersion`] for a release berth does not know
    ///   (`ubuntu@99.04`, or `ubuntu@22.4`: versions are written as Ubuntu
    ///   writes them);
    /// - [`BaseError::UnknownRisk`] for a risk other than stable, candidate,
    ///   beta or edge.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || BaseError::Invalid(s.to_string());
        let Some((os, channel)) = s.split_once('@') else {
            return Base::from_series(s).map_err(|_| invalid());
        };
        let (version, risk) = match channel.split_once('/') {
            Some((version, risk)) => (version, Some(risk)),
            None => (channel, None),
        };
        let malformed = os.is_empty()
            || version.is_empty()
            || channel.contains('@')
            || risk.is_some_and(|risk| risk.contains('/'));
        if malformed {
            return Err(invalid());
        }
        let os = Os::ALL
            .iter()
            .copied()
            .find(|known| known.as_str() == os)
            .ok_or_else(|| BaseError::UnknownOs(s.to_string()))?;
        let version = match os {
            Os::Ubuntu => Version::parse_as_written(version)
                .and_then(|v| UBUNTU_RELEASES.iter().find(|release| release.version == v))
                .map(|release| release.version),
            Os::Debian => Version::parse_major(version)
                .filter(|v| DEBIAN_RELEASES.iter().any(|(major, _)| *major == v.major)),
        }
        .ok_or_else(|| BaseError::UnknownVersion(s.to_string()))?;
        let risk = match risk {
            None => Risk::Stable,
            Some(risk) => risk.parse().map_err(|source| BaseError::UnknownRisk {
                base: s.to_string(),
                source,
            })?,
        };
        Ok(Base { os, version, risk })
    }
}

text_conversions!(Base);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn base(s: &str) -> Base {
        s.parse().unwrap()
    }

    fn base_error(s: &str) -> String {
        s.parse::<Base>().unwrap_err().to_string()
    }

    #[test]
    fn debian_releases_are_bases_written_with_their_major_version() {
        let b = base("debian@12");
        assert_eq!(b.os(), Os::Debian);
        assert_eq!(b.to_string(), "debian@12");
        assert_eq!(b.series(), None, "no cloud image series for debian");
        assert_eq!(base("debian@13/edge").to_string(), "debian@13/edge");
        for bad in ["debian@12.04", "debian@012", "debian@9", "debian@"] {
            assert!(bad.parse::<Base>().is_err(), "{bad} parsed");
        }
        assert!(!b.is_compatible(&base("ubuntu@22.04")));
    }

    #[test]
    fn an_os_release_file_names_its_base() {
        assert_eq!(
            Base::from_os_release("ubuntu", "22.04").unwrap(),
            base("ubuntu@22.04")
        );
        assert_eq!(
            Base::from_os_release("debian", "12").unwrap(),
            base("debian@12")
        );
        assert_eq!(
            Base::from_os_release("fedora", "40")
                .unwrap_err()
                .to_string(),
            r#"unknown base "fedora@40": expected an ubuntu or debian base"#
        );
    }

    #[test]
    fn a_base_is_an_os_at_a_version() {
        let b = base("ubuntu@22.04");
        assert_eq!(b.os(), Os::Ubuntu);
        assert_eq!(b.version().to_string(), "22.04");
        assert_eq!(b.risk(), Risk::Stable);
        assert_eq!(b.to_string(), "ubuntu@22.04");
    }

    #[test]
    fn a_base_without_a_risk_is_the_stable_base() {
        assert_eq!(base("ubuntu@22.04/stable"), base("ubuntu@22.04"));
    }

    #[test]
    fn a_stable_base_prints_without_its_risk() {
        assert_eq!(base("ubuntu@22.04/stable").to_string(), "ubuntu@22.04");
    }

    #[test]
    fn a_base_may_ask_for_riskier_images() {
        for (s, risk) in [
            ("ubuntu@24.04/candidate", Risk::Candidate),
            ("ubuntu@24.04/beta", Risk::Beta),
            ("ubuntu@24.04/edge", Risk::Edge),
        ] {
            let b = base(s);
            assert_eq!(b.risk(), risk);
            assert_eq!(b.to_string(), s);
        }
    }

    #[test]
    fn the_channel_always_names_the_risk() {
        assert_eq!(base("ubuntu@22.04").channel(), "22.04/stable");
        assert_eq!(base("ubuntu@24.04/edge").channel(), "24.04/edge");
    }

    #[test]
    fn series_names_are_aliases_for_ubuntu_releases() {
        for (series, canonical) in [
            ("precise", "ubuntu@12.04"),
            ("trusty", "ubuntu@14.04"),
            ("xenial", "ubuntu@16.04"),
            ("bionic", "ubuntu@18.04"),
            ("focal", "ubuntu@20.04"),
            ("jammy", "ubuntu@22.04"),
            ("noble", "ubuntu@24.04"),
            ("oracular", "ubuntu@24.10"),
            ("plucky", "ubuntu@25.04"),
            ("questing", "ubuntu@25.10"),
            ("resolute", "ubuntu@26.04"),
        ] {
            assert_eq!(Base::from_series(series).unwrap().to_string(), canonical);
            assert_eq!(base(series).to_string(), canonical);
        }
    }

    #[test]
    fn a_base_gives_back_its_series_name() {
        assert_eq!(base("ubuntu@22.04").series(), Some("jammy"));
        assert_eq!(base("ubuntu@20.04/edge").series(), Some("focal"));
        assert_eq!(base("ubuntu@23.10").series(), Some("mantic"));
    }

    #[test]
    fn every_known_release_has_a_distinct_version_and_series() {
        for (i, a) in UBUNTU_RELEASES.iter().enumerate() {
            for b in &UBUNTU_RELEASES[i + 1..] {
                assert!(a.version < b.version, "{} before {}", a.series, b.series);
                assert_ne!(a.series, b.series);
            }
        }
    }

    #[test]
    fn lts_releases_are_the_even_years_in_april() {
        for release in &UBUNTU_RELEASES {
            let expected = release.version.major % 2 == 0 && release.version.minor == 4;
            assert_eq!(release.lts, expected, "{}", release.series);
        }
        assert!(base("jammy").is_lts());
        assert!(!base("ubuntu@23.10").is_lts());
    }

    #[test]
    fn the_default_base_is_ubuntu_24_04() {
        assert_eq!(Base::DEFAULT.to_string(), "ubuntu@24.04");
        assert_eq!(Base::default(), base("noble"));
    }

    #[test]
    fn an_unknown_series_is_refused() {
        assert_eq!(
            Base::from_series("cheese").unwrap_err().to_string(),
            r#"unknown series "cheese""#
        );
        assert_eq!(
            Base::from_series("Jammy").unwrap_err().to_string(),
            r#"unknown series "Jammy""#
        );
    }

    #[test]
    fn an_unknown_ubuntu_version_is_an_unknown_base() {
        assert_eq!(base_error("ubuntu@99.04"), r#"unknown base "ubuntu@99.04""#);
        assert_eq!(base_error("ubuntu@22.4"), r#"unknown base "ubuntu@22.4""#);
        assert_eq!(base_error("ubuntu@22"), r#"unknown base "ubuntu@22""#);
        assert_eq!(base_error("ubuntu@11.10"), r#"unknown base "ubuntu@11.10""#);
        for written_otherwise in [
            "022.04", "22.040", "+22.04", "22.+4", "22.", ".04", "22..04",
        ] {
            let base = format!("ubuntu@{written_otherwise}");
            assert_eq!(base_error(&base), format!("unknown base {base:?}"));
        }
    }

    #[test]
    fn an_os_other_than_ubuntu_is_an_unknown_base() {
        assert_eq!(
            base_error("centos@7"),
            r#"unknown base "centos@7": expected an ubuntu or debian base"#
        );
        assert_eq!(
            base_error("Ubuntu@22.04"),
            r#"unknown base "Ubuntu@22.04": expected an ubuntu or debian base"#
        );
    }

    #[test]
    fn a_string_without_an_at_sign_must_be_a_series_name() {
        for s in ["x", "cheese", "", "22.04", "ubuntu"] {
            assert_eq!(
                base_error(s),
                format!("invalid base {s:?}: expected <os>@<version>[/<risk>] or a series name")
            );
        }
    }

    #[test]
    fn a_base_needs_an_os_and_a_version() {
        for s in ["@22.04", "ubuntu@", "ubuntu@/stable", "@", "ubuntu@22.04@x"] {
            assert_eq!(
                base_error(s),
                format!("invalid base {s:?}: expected <os>@<version>[/<risk>] or a series name"),
                "{s:?}"
            );
        }
    }

    #[test]
    fn a_base_has_no_branch_after_its_risk() {
        assert_eq!(
            base_error("ubuntu@22.04/stable/hotfix"),
            r#"invalid base "ubuntu@22.04/stable/hotfix": expected <os>@<version>[/<risk>] or a series name"#
        );
    }

    #[test]
    fn an_unknown_risk_is_refused_with_the_known_ones() {
        assert_eq!(
            base_error("ubuntu@22.04/daily"),
            r#"invalid base "ubuntu@22.04/daily": unknown risk "daily": expected stable, candidate, beta or edge"#
        );
        assert_eq!(
            base_error("ubuntu@22.04/"),
            r#"invalid base "ubuntu@22.04/": unknown risk "": expected stable, candidate, beta or edge"#
        );
    }

    #[test]
    fn bases_of_one_release_are_compatible_whatever_their_risk() {
        assert!(base("ubuntu@22.04").is_compatible(&base("ubuntu@22.04/edge")));
        assert!(!base("ubuntu@22.04").is_compatible(&base("ubuntu@24.04")));
    }

    #[test]
    fn bases_serialize_as_their_canonical_string() {
        let b = base("ubuntu@22.04/stable");
        assert_eq!(serde_json::to_string(&b).unwrap(), r#""ubuntu@22.04""#);
        let edge = base("ubuntu@24.04/edge");
        assert_eq!(
            serde_json::to_string(&edge).unwrap(),
            r#""ubuntu@24.04/edge""#
        );
        assert_eq!(
            serde_json::from_str::<Base>(r#""ubuntu@22.04""#).unwrap(),
            b
        );
        assert_eq!(serde_json::from_str::<Base>(r#""jammy""#).unwrap(), b);
        let err = serde_json::from_str::<Base>(r#""ubuntu@99.04""#).unwrap_err();
        assert_eq!(err.to_string(), r#"unknown base "ubuntu@99.04""#);
    }

    fn bases() -> impl Strategy<Value = Base> {
        (0..UBUNTU_RELEASES.len(), 0..Risk::ALL.len()).prop_map(|(release, risk)| Base {
            os: Os::Ubuntu,
            version: UBUNTU_RELEASES[release].version,
            risk: Risk::ALL[risk],
        })
    }

    proptest! {
        #[test]
        fn bases_round_trip_through_display(b in bases()) {
            prop_assert_eq!(b.to_string().parse::<Base>(), Ok(b));
        }

        #[test]
        fn bases_round_trip_through_their_channel(b in bases()) {
            let written = format!("{}@{}", b.os(), b.channel());
            prop_assert_eq!(written.parse::<Base>(), Ok(b));
        }

        #[test]
        fn a_series_name_gives_the_stable_base_of_its_release(b in bases()) {
            let series = b.series().unwrap();
            prop_assert_eq!(Base::from_series(series), Ok(b.with_risk(Risk::Stable)));
        }

        #[test]
        fn the_base_parser_never_panics_on_any_string(s in any::<String>()) {
            let _ = s.parse::<Base>();
            let _ = Base::from_series(&s);
        }

        #[test]
        fn whatever_parses_as_a_base_parses_again_from_its_display(
            s in "(ubuntu|[a-z]{0,6})?@?[0-9]{0,2}\\.?[0-9]{0,2}(/[a-z]{0,9})?"
        ) {
            if let Ok(b) = s.parse::<Base>() {
                prop_assert_eq!(b.to_string().parse::<Base>(), Ok(b));
            }
        }
    }
}
