//! Parsing request fields into domain types, once, at the edge; and the
//! warnings for constraints the active provider ignores.
//!
//! Every failure is an [`InputError`] carrying the domain's own message
//! (`bad "mem" constraint: must be a non-negative float with optional
//! M/G/T/P suffix`); every handler group answers it with 400.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::api::{ProviderInfo, MAX_COUNT_PER_REQUEST};
use crate::charms::CharmLoadError;
use crate::domain::base::{Base, BaseError};
use crate::domain::charm::{EndpointSpec, RelationError};
use crate::domain::constraints::{unsupported_warning, Constraints, ConstraintsError};
use crate::domain::names::{
    ApplicationName, InvalidApplicationName, InvalidUnitName, MachineId, MachineIdError, UnitName,
};
use crate::domain::placement::{parse_to_list, Placement, PlacementError, UnsupportedPlacement};

/// A request field that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error(transparent)]
    Constraints(#[from] ConstraintsError),
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// A directive that parses but that the model's provider cannot
    /// honour: refused before anything is written.
    #[error(transparent)]
    UnsupportedPlacement(#[from] UnsupportedPlacement),
    #[error(transparent)]
    Base(#[from] BaseError),
    #[error(transparent)]
    ApplicationName(#[from] InvalidApplicationName),
    #[error(transparent)]
    UnitName(#[from] InvalidUnitName),
    #[error(transparent)]
    MachineId(#[from] MachineIdError),
    #[error(transparent)]
    Endpoint(#[from] RelationError),
    #[error(transparent)]
    Charm(#[from] CharmLoadError),
    /// A rule of the request itself (a count out of range, fields that
    /// exclude each other).
    #[error("{0}")]
    Request(String),
}

/// `--to`: one comma-separated string (`"lxd:1,zone=a"`) or a list of
/// directives (`["lxd:1", "zone=a"]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum PlacementList {
    One(String),
    Many(Vec<String>),
}

impl PlacementList {
    /// The directives, in order.
    ///
    /// # Errors
    ///
    /// [`InputError::Placement`], naming the entry that does not parse.
    pub fn parse(&self) -> Result<Vec<Placement>, InputError> {
        match self {
            PlacementList::One(s) => Ok(parse_to_list(s)?),
            PlacementList::Many(entries) => entries
                .iter()
                .map(|entry| {
                    entry.parse().map_err(|source| {
                        InputError::Placement(PlacementError::InvalidToEntry {
                            entry: entry.clone(),
                            source: Box::new(source),
                        })
                    })
                })
                .collect(),
        }
    }

    /// [`PlacementList::parse`], refusing what the provider cannot honour.
    ///
    /// # Errors
    ///
    /// As [`PlacementList::parse`]; [`InputError::UnsupportedPlacement`].
    pub fn parse_for(&self, provider: &ProviderInfo) -> Result<Vec<Placement>, InputError> {
        let list = self.parse()?;
        for placement in &list {
            placement.check_supported(provider.placement_support())?;
        }
        Ok(list)
    }
}

/// The body of a route that takes no options: nothing, or an empty JSON
/// object. Anything else would be ignored, so it is refused.
///
/// # Errors
///
/// [`InputError::Request`] naming what was sent.
pub fn no_options(body: &[u8]) -> Result<(), InputError> {
    let text = String::from_utf8_lossy(body);
    if text.trim().is_empty() {
        return Ok(());
    }
    match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&text) {
        Ok(object) if object.is_empty() => Ok(()),
        Ok(object) => Err(InputError::Request(format!(
            "this route takes no options, but the body names {}: send no body, or {{}}",
            object
                .keys()
                .map(|k| format!("{k:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
        Err(_) => Err(InputError::Request(
            "this route takes no options: send no body, or {}".into(),
        )),
    }
}

/// Why a request body could not be read whole.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyRead {
    /// The connection failed while it was read.
    Unreadable(String),
    /// It passed the route's limit, in bytes.
    TooLarge { limit: usize },
}

/// Reads a request body whole, refusing it once it passes `limit` bytes:
/// the one reading for every route that takes its body as bytes.
///
/// # Errors
///
/// [`BodyRead`]: the connection's failure, or the limit passed.
pub async fn read_limited<E: std::fmt::Display>(
    mut payload: impl futures_util::Stream<Item = Result<actix_web::web::Bytes, E>> + Unpin,
    limit: usize,
) -> Result<actix_web::web::Bytes, BodyRead> {
    use futures_util::StreamExt as _;
    let mut body = actix_web::web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| BodyRead::Unreadable(e.to_string()))?;
        if body.len() + chunk.len() > limit {
            return Err(BodyRead::TooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// The body of a route that takes no options, as an extractor: nothing,
/// or an empty JSON object ([`no_options`]); anything else is refused with
/// 400 before the handler runs.
pub struct NoOptions;

impl actix_web::FromRequest for NoOptions {
    type Error = actix_web::Error;
    type Future = futures_util::future::LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(
        req: &actix_web::HttpRequest,
        payload: &mut actix_web::dev::Payload,
    ) -> Self::Future {
        use crate::api::errors::RequestError;
        // The JSON routes' limit, refused in the same words.
        let limit = req
            .app_data::<actix_web::web::Data<crate::api::Shared>>()
            .map_or(crate::api::BODY_LIMIT_BYTES, |shared| {
                shared.state.limits.body_bytes
            });
        let payload = payload.take();
        Box::pin(async move {
            let body = read_limited(payload, limit).await.map_err(|e| match e {
                BodyRead::Unreadable(e) => RequestError::Body(e),
                BodyRead::TooLarge { limit } => RequestError::TooLarge { limit },
            })?;
            no_options(&body).map_err(|e| RequestError::Body(e.to_string()))?;
            Ok(NoOptions)
        })
    }
}

/// One placement directive (`add-machine`'s), refusing what the provider
/// cannot honour.
///
/// # Errors
///
/// [`InputError::Placement`]; [`InputError::UnsupportedPlacement`].
pub fn placement(
    directive: Option<&str>,
    provider: &ProviderInfo,
) -> Result<Option<Placement>, InputError> {
    let Some(directive) = directive else {
        return Ok(None);
    };
    let placement: Placement = directive.parse()?;
    placement.check_supported(provider.placement_support())?;
    Ok(Some(placement))
}

/// Constraints from an optional field; absent is unset.
///
/// # Errors
///
/// [`InputError::Constraints`] with the parser's message.
pub fn constraints(field: Option<&str>) -> Result<Constraints, InputError> {
    Ok(field
        .map(Constraints::parse)
        .transpose()?
        .unwrap_or_default())
}

/// A base from an optional field.
///
/// # Errors
///
/// [`InputError::Base`].
pub fn base(field: Option<&str>) -> Result<Option<Base>, InputError> {
    Ok(field.map(str::parse).transpose()?)
}

/// An application name from a path or body.
///
/// # Errors
///
/// [`InputError::ApplicationName`].
pub fn application(name: &str) -> Result<ApplicationName, InputError> {
    Ok(name.parse()?)
}

/// A unit name.
///
/// # Errors
///
/// [`InputError::UnitName`].
pub fn unit(name: &str) -> Result<UnitName, InputError> {
    Ok(name.parse()?)
}

/// A machine id from a path tail. A client that percent-encoded the
/// slashes of a container id (`0%2Flxd%2F1`) means the same machine.
///
/// # Errors
///
/// [`InputError::MachineId`].
pub fn machine(raw: &str) -> Result<MachineId, InputError> {
    Ok(raw.replace("%2F", "/").replace("%2f", "/").parse()?)
}

/// An `integrate` endpoint: `wordpress` or `wordpress:db`.
///
/// # Errors
///
/// [`InputError::Endpoint`].
pub fn endpoint(spec: &str) -> Result<EndpointSpec, InputError> {
    Ok(spec.parse()?)
}

/// `items` as given, refusing one listed twice: the commands that take a
/// list act on all of it or none, so a repeat would be judged against its
/// own first appearance (a unit "not found" because it was just removed).
///
/// # Errors
///
/// [`InputError::Request`] naming the repeated item and the field.
pub fn listed_once<T: Ord + std::fmt::Display>(
    field: &str,
    items: Vec<T>,
) -> Result<Vec<T>, InputError> {
    let mut seen = std::collections::BTreeSet::new();
    if let Some(twice) = items.iter().find(|item| !seen.insert(*item)) {
        return Err(InputError::Request(format!(
            "{twice} is listed twice in {field}"
        )));
    }
    Ok(items)
}

/// A count of units or machines: at least `min`, at most
/// [`MAX_COUNT_PER_REQUEST`].
///
/// # Errors
///
/// [`InputError::Request`] naming the field and the range.
pub fn count(field: &str, n: u32, min: u32) -> Result<u32, InputError> {
    if n < min || n > MAX_COUNT_PER_REQUEST {
        return Err(InputError::Request(format!(
            "{field} must be between {min} and {MAX_COUNT_PER_REQUEST}, got {n}"
        )));
    }
    Ok(n)
}

/// Charm settings from JSON: strings as they are, numbers and booleans as
/// they print (`8080`, `true`); the charm's config schema checks them.
///
/// # Errors
///
/// [`InputError::Request`] for a null, list or object value.
pub fn settings(
    config: &BTreeMap<String, serde_json::Value>,
) -> Result<BTreeMap<String, String>, InputError> {
    config
        .iter()
        .map(|(key, value)| {
            let text = match value {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => b.to_string(),
                _ => {
                    return Err(InputError::Request(format!(
                        "config value for {key:?} must be a string, number or boolean"
                    )))
                }
            };
            Ok((key.clone(), text))
        })
        .collect()
}

/// The warnings for keys of `constraints` that the provider ignores.
pub fn warnings(constraints: &Constraints, provider: &ProviderInfo) -> Vec<String> {
    constraints
        .unsupported(&provider.supported_constraints)
        .into_iter()
        .map(|key| unsupported_warning(key, &provider.name))
        .collect()
}

/// A request body that must be a JSON object: `web::Json<Object<T>>`.
/// serde would otherwise read an array as a struct's fields in order, so
/// `[]` would be taken for an empty request (and, say, add a machine).
#[derive(Debug)]
pub struct Object<T>(pub T);

impl<T> std::ops::Deref for Object<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<'de, T: serde::de::DeserializeOwned> serde::Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_json::Value::deserialize(deserializer)?;
        let kind = match &value {
            serde_json::Value::Object(_) => None,
            serde_json::Value::Array(_) => Some("an array"),
            serde_json::Value::String(_) => Some("a string"),
            serde_json::Value::Number(_) => Some("a number"),
            serde_json::Value::Bool(_) => Some("a boolean"),
            serde_json::Value::Null => Some("null"),
        };
        if let Some(kind) = kind {
            return Err(D::Error::custom(format!(
                "expected a JSON object as the request body, got {kind}"
            )));
        }
        serde_json::from_value(value)
            .map(Object)
            .map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::constraints::Key;

    #[test]
    fn a_bad_constraint_keeps_the_domain_message() {
        let e = constraints(Some("mem=lots")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad \"mem\" constraint: must be a non-negative float with optional M/G/T/P suffix"
        );
    }

    #[test]
    fn absent_constraints_are_unset() {
        assert!(constraints(None).unwrap().is_unset());
    }

    #[test]
    fn a_placement_string_is_a_comma_separated_list() {
        let list = PlacementList::One("lxd:1,zone=a".into()).parse().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].to_string(), "lxd:1");
        assert_eq!(list[1].zone(), Some("a"));
    }

    #[test]
    fn a_placement_list_names_the_entry_that_does_not_parse() {
        let e = PlacementList::Many(vec!["lxd:1".into(), "kvm:2".into()])
            .parse()
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid --to parameter \"kvm:2\": "),
            "{e}"
        );
    }

    #[test]
    fn a_percent_encoded_container_id_is_the_same_machine() {
        assert_eq!(machine("0%2Flxd%2F1").unwrap().to_string(), "0/lxd/1");
        assert_eq!(machine("0/lxd/1").unwrap().to_string(), "0/lxd/1");
        assert!(machine("0/kvm/1").is_err());
    }

    #[test]
    fn counts_must_be_in_range() {
        assert_eq!(count("num_units", 0, 0).unwrap(), 0);
        assert_eq!(
            count("count", 0, 1).unwrap_err().to_string(),
            "count must be between 1 and 1000, got 0"
        );
        assert!(count("count", 1001, 1).is_err());
    }

    #[test]
    fn settings_take_scalars_and_refuse_structures() {
        let config = BTreeMap::from([
            ("port".to_string(), json!(8080)),
            ("debug".to_string(), json!(true)),
            ("name".to_string(), json!("blog")),
        ]);
        assert_eq!(
            settings(&config).unwrap(),
            BTreeMap::from([
                ("debug".to_string(), "true".to_string()),
                ("name".to_string(), "blog".to_string()),
                ("port".to_string(), "8080".to_string()),
            ])
        );
        let bad = BTreeMap::from([("x".to_string(), json!([1]))]);
        assert_eq!(
            settings(&bad).unwrap_err().to_string(),
            "config value for \"x\" must be a string, number or boolean"
        );
    }

    #[test]
    fn unsupported_keys_become_warnings_naming_the_provider() {
        let provider = ProviderInfo {
            name: "sim".into(),
            supported_constraints: vec![Key::Mem, Key::Cores],
            supports_containers: true,
            ssh_refused: None,
        };
        let c = Constraints::parse("mem=2G virt-type=kvm").unwrap();
        assert_eq!(
            warnings(&c, &provider),
            ["constraint \"virt-type\" is not supported by provider \"sim\" and is ignored"]
        );
    }

    #[test]
    fn a_body_must_be_an_object_not_an_array_or_a_scalar() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct AllDefault {
            #[serde(default)]
            count: Option<u32>,
        }
        for (body, kind) in [
            ("[]", "an array"),
            ("[1]", "an array"),
            ("3", "a number"),
            ("null", "null"),
            ("\"x\"", "a string"),
        ] {
            let error = serde_json::from_str::<Object<AllDefault>>(body).unwrap_err();
            assert!(
                error.to_string().contains(&format!(
                    "expected a JSON object as the request body, got {kind}"
                )),
                "{body}: {error}"
            );
        }
        let ok: Object<AllDefault> = serde_json::from_str(r#"{"count": 2}"#).unwrap();
        assert_eq!(ok.count, Some(2));
        let unknown = serde_json::from_str::<Object<AllDefault>>(r#"{"colour": 1}"#).unwrap_err();
        assert!(
            unknown.to_string().contains("unknown field `colour`"),
            "{unknown}"
        );
    }
}
