//! Provider webhooks: `POST /v1/webhooks/{provider}` turns a provider's
//! report of an instance's new state into an [`InstanceStateChange`] and
//! forwards it to the engine through [`ControllerLink::instance_changed`].
//!
//! Deliveries are authenticated by an HMAC-SHA256 signature over the
//! timestamp and the body, with the controller's webhook secret:
//!
//! ```text
//! X-Berth-Timestamp: <unix seconds>
//! X-Berth-Signature: sha256=<hex of HMAC(secret, "<timestamp>.<body>")>
//! ```
//!
//! A delivery older than [`MAX_AGE_SECS`], more than [`MAX_AHEAD_SECS`] in
//! the future, or whose signature was already seen within that window (a
//! replay) is refused. Duplicates that get through (a provider sending the
//! same change twice, signed twice) change nothing: only an instance's
//! departure acts, and on the machine still on it. A departure delivered
//! late, after the machine's agent was heard again (an instance stopped
//! and started), is passed over: the engine compares the change's own
//! timestamp with the agent's last heartbeat.
//!
//! [`ControllerLink::instance_changed`]: crate::contracts::provider::ControllerLink::instance_changed

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use actix_web::http::header::HeaderMap;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use utoipa::ToSchema;

use crate::api::errors::{route_error, ErrorBody};
use crate::api::input::{read_limited, BodyRead};
use crate::api::Shared;
use crate::contracts::provider::InstanceStateChange;
use crate::domain::instance::InstanceState;
use crate::domain::words::word_enum;

pub const TIMESTAMP_HEADER: &str = "X-Berth-Timestamp";
pub const SIGNATURE_HEADER: &str = "X-Berth-Signature";

/// How old a delivery may be: long enough for a sender's retries and some
/// clock skew, short enough that remembering every signature seen in the
/// window is cheap.
pub const MAX_AGE_SECS: i64 = 5 * 60;

/// How far ahead of the controller's clock a sender's may be.
pub const MAX_AHEAD_SECS: i64 = 60;

/// The most signatures remembered at once. At the rate this allows (over
/// 200 deliveries a second, sustained for the whole window) a full cache
/// means something is wrong; further deliveries get 503 until entries age
/// out.
pub const REPLAY_CACHE_CAPACITY: usize = 65_536;

/// The EventBridge `detail-type` of EC2 state changes.
pub const EC2_STATE_CHANGE: &str = "EC2 Instance State-change Notification";

word_enum! {
    /// The webhook formats berth understands, by the path's `{provider}`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum WebhookKind {
        /// Amazon EventBridge events, as an API destination delivers them.
        Ec2 => "ec2",
        /// berth's own [`InstanceStateChange`] JSON.
        Sim => "sim",
    }
}

/// Why a delivery was refused.
#[derive(thiserror::Error)]
pub enum WebhookError {
    #[error("webhooks are not set up on this controller: it has no webhook secret")]
    NotConfigured,
    #[error("no webhook for provider {0:?}: expected ec2 or sim")]
    UnknownProvider(String),
    #[error("webhook body too large: the limit is {limit} bytes")]
    TooLarge { limit: usize },
    #[error("cannot read the webhook body: {0}")]
    Unreadable(String),
    #[error("missing or malformed {TIMESTAMP_HEADER} header: expected unix seconds")]
    BadTimestamp,
    #[error("missing or malformed {SIGNATURE_HEADER} header: expected sha256=<hex>")]
    BadSignatureHeader,
    #[error("webhook signature does not match")]
    Forged,
    #[error("webhook delivery is stale: its timestamp is {age} seconds old (at most {MAX_AGE_SECS} accepted)")]
    Stale { age: i64 },
    #[error(
        "webhook timestamp is {ahead} seconds in the future (at most {MAX_AHEAD_SECS} accepted)"
    )]
    Future { ahead: i64 },
    #[error("webhook delivery already received (its signature was seen before)")]
    Replayed,
    #[error("too many webhook deliveries in the replay window; retry later")]
    ReplayCacheFull,
    #[error("invalid webhook body: {0}")]
    Body(String),
}

route_error!(WebhookError {
    WebhookError::NotConfigured | WebhookError::ReplayCacheFull => {
        StatusCode::SERVICE_UNAVAILABLE
    }
    WebhookError::UnknownProvider(_) => StatusCode::NOT_FOUND,
    WebhookError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
    WebhookError::Unreadable(_) | WebhookError::Body(_) => StatusCode::BAD_REQUEST,
    WebhookError::BadTimestamp
    | WebhookError::BadSignatureHeader
    | WebhookError::Forged
    | WebhookError::Stale { .. }
    | WebhookError::Future { .. } => StatusCode::UNAUTHORIZED,
    WebhookError::Replayed => StatusCode::CONFLICT,
});

type HmacSha256 = Hmac<Sha256>;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The `X-Berth-Signature` value for `body` sent at `timestamp`.
pub fn sign(secret: &str, timestamp: i64, body: &[u8]) -> String {
    // HMAC takes a key of any length; this cannot fail.
    let mut mac = match HmacSha256::new_from_slice(secret.as_bytes()) {
        Ok(mac) => mac,
        Err(_) => return String::new(),
    };
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("sha256={}", hex(&mac.finalize().into_bytes()))
}

/// A delivery whose signature and age were checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// When the sender signed it (unix seconds).
    pub timestamp: i64,
    /// The signature, as lowercase hex: however the sender spelled it, the
    /// same signature is the same replay-cache key.
    pub signature: String,
}

/// Checks a delivery's signature and age at time `now` (unix seconds).
///
/// # Errors
///
/// [`WebhookError::BadTimestamp`] / [`WebhookError::BadSignatureHeader`]
/// for missing or malformed headers; [`WebhookError::Forged`] when the
/// signature is not the secret's over this timestamp and body (compared in
/// constant time); [`WebhookError::Stale`] / [`WebhookError::Future`] for a
/// timestamp outside the window. The signature is checked first, so an
/// unsigned request learns nothing about the clock.
pub fn verify(
    secret: &str,
    headers: &HeaderMap,
    body: &[u8],
    now: i64,
) -> Result<Verified, WebhookError> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let timestamp_text = header(TIMESTAMP_HEADER).ok_or(WebhookError::BadTimestamp)?;
    let timestamp: i64 = timestamp_text
        .trim()
        .parse()
        .map_err(|_| WebhookError::BadTimestamp)?;
    let signature = header(SIGNATURE_HEADER)
        .and_then(|v| v.trim().strip_prefix("sha256="))
        .and_then(unhex)
        .ok_or(WebhookError::BadSignatureHeader)?;
    let mut mac =
        HmacSha256::new_from_slice(secret.as_bytes()).map_err(|_| WebhookError::Forged)?;
    mac.update(timestamp_text.trim().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.verify_slice(&signature)
        .map_err(|_| WebhookError::Forged)?;
    let age = now.saturating_sub(timestamp);
    if age > MAX_AGE_SECS {
        return Err(WebhookError::Stale { age });
    }
    if age < -MAX_AHEAD_SECS {
        return Err(WebhookError::Future {
            ahead: timestamp.saturating_sub(now),
        });
    }
    Ok(Verified {
        timestamp,
        signature: hex(&signature),
    })
}

/// Signatures seen within the replay window, with their timestamps.
#[derive(Debug, Default)]
pub struct ReplayCache {
    seen: Mutex<HashMap<String, i64>>,
}

impl ReplayCache {
    /// Remembers `signature` (of a delivery at `timestamp`) unless it was
    /// seen before; forgets what has aged out of the window at `now`.
    ///
    /// # Errors
    ///
    /// [`WebhookError::Replayed`] for a signature already seen;
    /// [`WebhookError::ReplayCacheFull`] at [`REPLAY_CACHE_CAPACITY`].
    pub fn remember(&self, signature: &str, timestamp: i64, now: i64) -> Result<(), WebhookError> {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.contains_key(signature) {
            return Err(WebhookError::Replayed);
        }
        if seen.len() >= REPLAY_CACHE_CAPACITY {
            seen.retain(|_, t| now.saturating_sub(*t) <= MAX_AGE_SECS);
            if seen.len() >= REPLAY_CACHE_CAPACITY {
                return Err(WebhookError::ReplayCacheFull);
            }
        }
        seen.insert(signature.to_string(), timestamp);
        Ok(())
    }
}

/// An Amazon EventBridge event as an API destination delivers it. Fields
/// berth does not need (`account`, and any AWS adds later) are ignored
/// rather than refused: the format is Amazon's, not berth's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct EventBridgeEvent {
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub id: String,
    #[schema(example = "EC2 Instance State-change Notification")]
    pub detail_type: String,
    #[schema(example = "aws.ec2")]
    pub source: String,
    /// RFC 3339: `2026-11-21T05:00:00Z`.
    pub time: String,
    #[serde(default)]
    pub region: String,
    #[serde(default)]
    pub resources: Vec<String>,
    pub detail: Ec2StateDetail,
}

/// The `detail` of an EC2 state-change event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub struct Ec2StateDetail {
    #[schema(example = "i-0123456789abcdef0")]
    pub instance_id: String,
    /// `pending`, `running`, `stopping`, `stopped`, `shutting-down` or
    /// `terminated`.
    #[schema(value_type = String, example = "running")]
    pub state: InstanceState,
}

/// berth's own instance-change JSON (the `sim` webhook).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InstanceChangeBody {
    pub instance_id: String,
    #[schema(value_type = String, example = "running")]
    pub state: InstanceState,
    /// When the provider saw the change, in ms since the Unix epoch.
    pub at_ms: i64,
}

impl From<InstanceChangeBody> for InstanceStateChange {
    fn from(body: InstanceChangeBody) -> InstanceStateChange {
        InstanceStateChange {
            instance_id: body.instance_id,
            state: body.state,
            at_ms: body.at_ms,
        }
    }
}

impl From<&InstanceStateChange> for InstanceChangeBody {
    fn from(change: &InstanceStateChange) -> InstanceChangeBody {
        InstanceChangeBody {
            instance_id: change.instance_id.clone(),
            state: change.state,
            at_ms: change.at_ms,
        }
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The value of exactly `width` ASCII digits, as RFC 3339 writes each
/// field of a date and time.
fn fixed_digits(s: &str, width: usize) -> Option<i64> {
    (s.len() == width && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// Milliseconds since the Unix epoch of an RFC 3339 time
/// (`2026-11-21T05:00:00Z`, `2026-11-21T05:00:00.250+01:00`), or `None`.
/// Every field has RFC 3339's fixed width (a four-digit year, two-digit
/// month, day, hour, minute, second and offset); a fraction may have any
/// number of digits and is read to the millisecond.
pub fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let (date, rest) = s.split_once(['T', 't', ' '])?;
    let mut date_parts = date.split('-');
    let (year, month, day) = (
        fixed_digits(date_parts.next()?, 4)?,
        fixed_digits(date_parts.next()?, 2)?,
        fixed_digits(date_parts.next()?, 2)?,
    );
    if date_parts.next().is_some() || !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let (clock, offset_secs) = if let Some(clock) = rest.strip_suffix(['Z', 'z']) {
        (clock, 0)
    } else {
        let at = rest.rfind(['+', '-'])?;
        let (clock, offset) = rest.split_at(at);
        let sign = if offset.starts_with('-') { -1 } else { 1 };
        let (h, m) = offset.get(1..)?.split_once(':')?;
        let (h, m) = (fixed_digits(h, 2)?, fixed_digits(m, 2)?);
        if h > 23 || m > 59 {
            return None;
        }
        (clock, sign * (h * 3600 + m * 60))
    };
    let (hms, fraction) = match clock.split_once('.') {
        Some((hms, fraction)) => (hms, Some(fraction)),
        None => (clock, None),
    };
    let mut hms_parts = hms.split(':');
    let (hour, minute, second) = (
        fixed_digits(hms_parts.next()?, 2)?,
        fixed_digits(hms_parts.next()?, 2)?,
        fixed_digits(hms_parts.next()?, 2)?,
    );
    if hms_parts.next().is_some() || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let millis = match fraction {
        None => 0,
        Some(f) if !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) => {
            let first_three: String = f.chars().chain("00".chars()).take(3).collect();
            first_three.parse::<i64>().ok()?
        }
        Some(_) => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
    Some(secs * 1000 + millis)
}

/// Reads an EventBridge EC2 state-change event.
///
/// # Errors
///
/// [`WebhookError::Body`] for JSON that is not such an event, another
/// kind of event, or a `time` that is not RFC 3339.
pub fn parse_ec2(body: &[u8]) -> Result<InstanceStateChange, WebhookError> {
    let event: EventBridgeEvent =
        serde_json::from_slice(body).map_err(|e| WebhookError::Body(e.to_string()))?;
    if event.source != "aws.ec2" || event.detail_type != EC2_STATE_CHANGE {
        return Err(WebhookError::Body(format!(
            "unsupported event {:?} from {:?}: expected {EC2_STATE_CHANGE:?} from \"aws.ec2\"",
            event.detail_type, event.source
        )));
    }
    let at_ms = parse_rfc3339_ms(&event.time).ok_or_else(|| {
        WebhookError::Body(format!(
            "invalid time {:?}: expected RFC 3339, such as 2026-11-21T05:00:00Z",
            event.time
        ))
    })?;
    Ok(InstanceStateChange {
        instance_id: event.detail.instance_id,
        state: event.detail.state,
        at_ms,
    })
}

/// Reads berth's own instance-change JSON.
///
/// # Errors
///
/// [`WebhookError::Body`].
pub fn parse_sim(body: &[u8]) -> Result<InstanceStateChange, WebhookError> {
    serde_json::from_slice::<InstanceChangeBody>(body)
        .map(InstanceStateChange::from)
        .map_err(|e| WebhookError::Body(e.to_string()))
}

impl From<BodyRead> for WebhookError {
    fn from(read: BodyRead) -> WebhookError {
        match read {
            BodyRead::Unreadable(e) => WebhookError::Unreadable(e),
            BodyRead::TooLarge { limit } => WebhookError::TooLarge { limit },
        }
    }
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Receives a provider's report of an instance state change and forwards
/// it to the engine. `ec2` takes Amazon EventBridge "EC2 Instance
/// State-change Notification" events; `sim` takes berth's own
/// `InstanceChangeBody`.
#[utoipa::path(
    post,
    path = "/v1/webhooks/{provider}",
    operation_id = "receive_webhook",
    tag = "webhooks",
    security(("webhook_signature" = [])),
    params(
        ("provider" = String, Path, description = "`ec2` or `sim`"),
        ("X-Berth-Timestamp" = String, Header, description = "Unix seconds when the delivery was signed"),
        ("X-Berth-Signature" = String, Header, description = "sha256=<hex of HMAC-SHA256(secret, \"<timestamp>.<body>\")>"),
    ),
    request_body(content = EventBridgeEvent, description = "For `ec2`; `sim` takes an InstanceChangeBody"),
    responses(
        (status = 202, description = "Forwarded to the engine", body = InstanceChangeBody),
        (status = 400, description = "Not an event of this provider", body = ErrorBody),
        (status = 401, description = "Forged, stale or unsigned", body = ErrorBody),
        (status = 404, description = "Unknown provider", body = ErrorBody),
        (status = 409, description = "Replayed delivery", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 503, description = "Unavailable: no webhook secret configured, too many requests at once, or the database cannot be reached, written or locked now", body = ErrorBody),
    )
)]
pub async fn receive(
    shared: web::Data<Shared>,
    req: HttpRequest,
    provider: web::Path<String>,
    payload: web::Payload,
) -> Result<HttpResponse, WebhookError> {
    let secret = shared
        .state
        .webhook_secret
        .as_ref()
        .ok_or(WebhookError::NotConfigured)?;
    let kind = WebhookKind::parse(&provider)
        .ok_or_else(|| WebhookError::UnknownProvider(provider.into_inner()))?;
    let body = read_limited(payload, shared.state.limits.body_bytes).await?;
    let now = now_secs();
    let delivery = verify(secret.expose(), req.headers(), &body, now)?;
    let change = match kind {
        WebhookKind::Ec2 => parse_ec2(&body)?,
        WebhookKind::Sim => parse_sim(&body)?,
    };
    // Remembered only once the delivery is known good, so a rejected one
    // changes nothing.
    shared
        .replays
        .remember(&delivery.signature, delivery.timestamp, now)?;
    let echo = InstanceChangeBody::from(&change);
    shared.state.link.instance_changed(change).await;
    Ok(HttpResponse::Accepted().json(echo))
}

#[cfg(test)]
mod tests {
    use actix_web::http::header::{HeaderName, HeaderValue};

    use super::*;

    const SECRET: &str = "webhook-secret";
    const NOW: i64 = 1_800_000_000;

    fn headers(timestamp: &str, signature: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            HeaderName::from_static("x-berth-timestamp"),
            HeaderValue::from_str(timestamp).unwrap(),
        );
        headers.insert(
            HeaderName::from_static("x-berth-signature"),
            HeaderValue::from_str(signature).unwrap(),
        );
        headers
    }

    fn signed(at: i64, body: &[u8]) -> HeaderMap {
        headers(&at.to_string(), &sign(SECRET, at, body))
    }

    #[test]
    fn a_signed_fresh_delivery_is_accepted() {
        let verified = verify(SECRET, &signed(NOW, b"{}"), b"{}", NOW).unwrap();
        assert_eq!(verified.timestamp, NOW);
        assert_eq!(
            format!("sha256={}", verified.signature),
            sign(SECRET, NOW, b"{}")
        );
    }

    #[test]
    fn an_uppercase_signature_is_the_same_signature() {
        let upper = sign(SECRET, NOW, b"{}")
            .to_uppercase()
            .replace("SHA256=", "sha256=");
        let verified = verify(SECRET, &headers(&NOW.to_string(), &upper), b"{}", NOW).unwrap();
        assert_eq!(
            format!("sha256={}", verified.signature),
            sign(SECRET, NOW, b"{}")
        );
    }

    #[test]
    fn a_signature_over_another_body_or_with_another_secret_is_forged() {
        let h = signed(NOW, b"{}");
        assert!(matches!(
            verify(SECRET, &h, b"{ }", NOW),
            Err(WebhookError::Forged)
        ));
        assert!(matches!(
            verify("other", &h, b"{}", NOW),
            Err(WebhookError::Forged)
        ));
    }

    #[test]
    fn a_signature_for_another_timestamp_is_forged() {
        let h = headers(&(NOW + 1).to_string(), &sign(SECRET, NOW, b"{}"));
        assert!(matches!(
            verify(SECRET, &h, b"{}", NOW),
            Err(WebhookError::Forged)
        ));
    }

    #[test]
    fn deliveries_outside_the_window_are_refused() {
        let old = NOW - MAX_AGE_SECS - 1;
        assert!(matches!(
            verify(SECRET, &signed(old, b"{}"), b"{}", NOW),
            Err(WebhookError::Stale { age: 301 })
        ));
        let ahead = NOW + MAX_AHEAD_SECS + 1;
        assert!(matches!(
            verify(SECRET, &signed(ahead, b"{}"), b"{}", NOW),
            Err(WebhookError::Future { ahead: 61 })
        ));
        let edge = NOW - MAX_AGE_SECS;
        assert!(verify(SECRET, &signed(edge, b"{}"), b"{}", NOW).is_ok());
    }

    #[test]
    fn malformed_headers_are_refused() {
        assert!(matches!(
            verify(SECRET, &HeaderMap::new(), b"{}", NOW),
            Err(WebhookError::BadTimestamp)
        ));
        assert!(matches!(
            verify(SECRET, &headers("soon", "sha256=00"), b"{}", NOW),
            Err(WebhookError::BadTimestamp)
        ));
        for bad in ["00", "sha256=zz", "sha256=abc", "md5=00"] {
            assert!(
                matches!(
                    verify(SECRET, &headers(&NOW.to_string(), bad), b"{}", NOW),
                    Err(WebhookError::BadSignatureHeader)
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_signature_is_remembered_once() {
        let cache = ReplayCache::default();
        cache.remember("sha256=aa", NOW, NOW).unwrap();
        assert!(matches!(
            cache.remember("sha256=aa", NOW, NOW),
            Err(WebhookError::Replayed)
        ));
        cache.remember("sha256=bb", NOW, NOW).unwrap();
    }

    #[test]
    fn an_ec2_state_change_becomes_an_instance_change() {
        let body = br#"{"version":"0","id":"7bf73129","detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","account":"123456789012","time":"2026-11-21T05:00:00Z","region":"us-east-1","resources":["arn:aws:ec2:us-east-1:123456789012:instance/i-abcd1111"],"detail":{"instance-id":"i-abcd1111","state":"shutting-down"}}"#;
        assert_eq!(
            parse_ec2(body).unwrap(),
            InstanceStateChange {
                instance_id: "i-abcd1111".into(),
                state: InstanceState::ShuttingDown,
                at_ms: 1_795_237_200_000,
            }
        );
    }

    #[test]
    fn another_kind_of_event_is_refused() {
        let body = br#"{"detail-type":"AWS API Call via CloudTrail","source":"aws.ec2","time":"2026-11-21T05:00:00Z","detail":{"instance-id":"i-1","state":"running"}}"#;
        let e = parse_ec2(body).unwrap_err();
        assert!(e.to_string().contains("unsupported event"), "{e}");
    }

    #[test]
    fn a_sim_change_must_have_exactly_its_fields() {
        let ok = br#"{"instance_id":"sim-1","state":"running","at_ms":5}"#;
        assert_eq!(parse_sim(ok).unwrap().state, InstanceState::Running);
        let extra = br#"{"instance_id":"sim-1","state":"running","at_ms":5,"x":1}"#;
        assert!(parse_sim(extra).is_err());
        let bad_state = br#"{"instance_id":"sim-1","state":"exploded","at_ms":5}"#;
        assert!(parse_sim(bad_state).is_err());
    }

    #[test]
    fn rfc3339_times_are_read_to_the_millisecond() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ms("2026-11-21T05:00:00Z"),
            Some(1_795_237_200_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2026-11-21T06:00:00.25+01:00"),
            Some(1_795_237_200_250)
        );
        assert_eq!(
            parse_rfc3339_ms("2000-02-29T12:00:00Z"),
            Some(951_825_600_000)
        );
        assert_eq!(
            parse_rfc3339_ms("1970-01-01T00:00:00.1239999999999999999999Z"),
            Some(123)
        );
        for bad in [
            "",
            "2026-11-21",
            "2026-13-01T00:00:00Z",
            "2026-11-21T25:00:00Z",
            "2026-11-21T05:00:00",
            "2026-11-21T05:00Z",
            "26-11-21T05:00:00Z",
            "2026-1-21T05:00:00Z",
            "2026-11-21T5:00:00Z",
            "2026-11-21T05:00:00+1:00",
            "2026-11-21T05:00:00+24:00",
            "2026-11-21T05:00:00.Z",
            "99999999999999999-11-21T05:00:00Z",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_ec2_and_sim_have_webhooks() {
        assert_eq!(WebhookKind::parse("ec2"), Some(WebhookKind::Ec2));
        assert_eq!(WebhookKind::parse("sim"), Some(WebhookKind::Sim));
        assert_eq!(WebhookKind::parse("gce"), None);
    }

    /// Text shaped like an RFC 3339 time, with fields of any width.
    const TIME_LIKE: &str = "[0-9]{1,20}-[0-9]{1,3}-[0-9]{1,3}[Tt ][0-9]{1,3}:[0-9]{1,3}:[0-9]{1,3}(\\.[0-9]{0,25})?([Zz]|[+-][0-9]{1,20}:[0-9]{1,20})";

    proptest::proptest! {
        #[test]
        fn any_body_is_read_or_refused_without_panicking(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)
        ) {
            let _ = parse_ec2(&body);
            let _ = parse_sim(&body);
        }

        #[test]
        fn event_shaped_bodies_are_read_or_refused_without_panicking(
            source in proptest::prop_oneof![proptest::strategy::Just("aws.ec2".to_string()), "\\PC{0,8}"],
            time in proptest::prop_oneof![TIME_LIKE, "\\PC{0,30}"],
            state in "[a-z-]{0,14}",
            id in "\\PC{0,24}",
            at_ms in proptest::prelude::any::<i64>(),
        ) {
            let ec2 = serde_json::json!({
                "version": "0", "source": source, "detail-type": EC2_STATE_CHANGE,
                "time": time, "detail": {"instance-id": id, "state": state},
            });
            let _ = parse_ec2(ec2.to_string().as_bytes());
            let sim = serde_json::json!({"instance_id": id, "state": state, "at_ms": at_ms});
            let _ = parse_sim(sim.to_string().as_bytes());
        }

        #[test]
        fn time_like_text_is_read_or_refused_without_panicking(time in TIME_LIKE) {
            if let Some(ms) = parse_rfc3339_ms(&time) {
                proptest::prop_assert!(time.len() >= 20, "{time} read as {ms}");
            }
        }

        #[test]
        fn any_signed_timestamp_is_judged_without_panicking(
            timestamp in proptest::prelude::any::<i64>(),
            now in proptest::prelude::any::<i64>(),
        ) {
            let body = b"{}";
            if let Ok(verified) = verify(SECRET, &signed(timestamp, body), body, now) {
                let cache = ReplayCache::default();
                proptest::prop_assert!(cache.remember(&verified.signature, timestamp, now).is_ok());
            }
        }

        #[test]
        fn any_signature_headers_are_refused_without_panicking(
            timestamp in "\\PC{0,24}",
            signature in "\\PC{0,80}",
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            let mut headers = HeaderMap::new();
            for (name, value) in [("x-berth-timestamp", &timestamp), ("x-berth-signature", &signature)] {
                if let Ok(value) = HeaderValue::from_str(value) {
                    headers.insert(HeaderName::from_static(name), value);
                }
            }
            proptest::prop_assert!(verify(SECRET, &headers, &body, NOW).is_err());
        }
    }
}
