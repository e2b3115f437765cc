//! Routes that show state without changing it: status, the change log as
//! Server-Sent Events, `/healthz`, `/metrics` and the OpenAPI document.

use std::time::Duration;

use actix_web::http::header::{self, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::web::{Bytes, BytesMut};
use actix_web::{web, HttpRequest, HttpResponse};
use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use tokio::sync::{watch, OwnedSemaphorePermit};
use utoipa::{IntoParams, ToSchema};

use crate::api::errors::{route_error, store_status, ErrorBody, UNAVAILABLE};
use crate::api::feed::{Deflated, Next, Watcher};
use crate::api::socket::ConnectionSocket;
use crate::api::Shared;
use crate::status::filter::{FilterError, StatusFilter};
use crate::status::gzip;
use crate::status::view::Status;
use crate::store::{Change, StoreError};

/// The header a reconnecting `EventSource` sends with the last `id:` it saw.
pub const LAST_EVENT_ID: &str = "Last-Event-ID";

/// Why an observation failed.
#[derive(thiserror::Error)]
pub enum ObserveError {
    #[error("invalid Last-Event-ID header {0:?}: expected a change-log revision (a whole number)")]
    BadLastEventId(String),
    #[error("too many event streams are open (the limit is {0}); retry later")]
    TooManyStreams(usize),
    /// A client's revision the change log has not reached: the store was
    /// restored or replaced since the client saw it.
    #[error("revision {asked} is ahead of the change log, which is at {head}: this controller's store was restored or replaced since; read the status and follow from its revision")]
    AheadOfLog { asked: i64, head: i64 },
    #[error(transparent)]
    Filter(#[from] FilterError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

route_error!(ObserveError {
    ObserveError::BadLastEventId(_) | ObserveError::AheadOfLog { .. } => StatusCode::BAD_REQUEST,
    ObserveError::Filter(e) if e.is_not_found() => StatusCode::NOT_FOUND,
    ObserveError::Filter(_) => StatusCode::BAD_REQUEST,
    ObserveError::TooManyStreams(_) => StatusCode::SERVICE_UNAVAILABLE,
    ObserveError::Store(e) => store_status(e),
});

/// `GET /v1/status` filters: each narrows the status (see
/// [`crate::status::filter`]); none gives the whole of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct StatusQuery {
    /// Only these applications (comma-separated names), with their units
    /// and the machines those are on.
    pub application: Option<String>,
    /// Only these units (comma-separated names), with the subordinates of
    /// principal units.
    pub unit: Option<String>,
    /// Only these machines and their containers, and the units on them:
    /// numbers and ranges such as `1-100,205`.
    pub machines: Option<String>,
}

/// The whole state, as `juju status --format=json` shapes it, or the part
/// the filters select. The whole state is sent gzipped
/// (`Content-Encoding: gzip`) to a client whose `Accept-Encoding` takes
/// gzip: with 100,000 machines that is about 4 MB instead of 60.
#[utoipa::path(
    get,
    path = "/v1/status",
    operation_id = "get_status",
    tag = "observe",
    params(StatusQuery),
    responses(
        (status = 200, description = "The status (the whole of it gzipped when Accept-Encoding takes gzip)", body = Status),
        (status = 400, description = "A filter that does not parse", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 404, description = "A filter names an application or unit the model does not have", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn get_status(
    shared: web::Data<Shared>,
    query: web::Query<StatusQuery>,
    request: HttpRequest,
) -> Result<HttpResponse, ObserveError> {
    let StatusQuery {
        application,
        unit,
        machines,
    } = query.into_inner();
    let filter = StatusFilter::parse(application.as_deref(), unit.as_deref(), machines.as_deref())?;
    let (store, cloud) = (&shared.state.store, &shared.state.provider.name);
    let mut response = HttpResponse::Ok();
    response.content_type("application/json");
    let body = if !filter.is_whole() {
        InSlices::new(shared.status.get_filtered(store, cloud, filter).await??)
    } else {
        response.insert_header((header::VARY, "Accept-Encoding"));
        if accepts_gzip(&request) {
            response.insert_header((header::CONTENT_ENCODING, "gzip"));
            InSlices::of(shared.status.get_gzip(store, cloud).await?.iter().cloned())
        } else {
            InSlices::of(shared.status.get(store, cloud).await?.pieces())
        }
    };
    Ok(response.body(body))
}

/// Whether the request's `Accept-Encoding` takes gzip: `gzip` (or
/// `x-gzip`) with a weight above zero, or `*` so where gzip is not named.
/// A weight that does not parse counts as zero.
fn accepts_gzip(request: &HttpRequest) -> bool {
    let (mut gzip, mut any) = (None, None);
    let values = request.headers().get_all(header::ACCEPT_ENCODING);
    for item in values
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
    {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or_default().trim();
        let weight = parts
            .map(str::trim)
            .find_map(|p| p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")))
            .map_or(Some(1.0), |q| q.trim().parse::<f32>().ok());
        let takes = weight.is_some_and(|q| q > 0.0);
        if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
            gzip = Some(takes);
        } else if coding == "*" {
            any = Some(takes);
        }
    }
    gzip.or(any).unwrap_or(false)
}

/// How much of a shared body the connection is handed at a time.
const SLICE: usize = 64 * 1024;

/// A body already in memory (the rendered status, shared by every reader
/// of its revision, in one piece or in segments), handed to the
/// connection a slice at a time. The connection copies what it is given
/// into its write buffer and asks for more only as the buffer drains, so
/// each reader costs a slice, not a copy of the whole document (60 MB
/// with 100,000 machines).
pub struct InSlices {
    /// The pieces not yet handed over, the next last.
    rest: Vec<Bytes>,
    size: u64,
}

impl InSlices {
    pub fn new(body: Bytes) -> InSlices {
        InSlices::of([body])
    }

    /// The body of `pieces` one after the other.
    pub fn of(pieces: impl IntoIterator<Item = Bytes>) -> InSlices {
        let mut rest: Vec<Bytes> = pieces.into_iter().filter(|p| !p.is_empty()).collect();
        rest.reverse();
        let size = rest.iter().map(|p| p.len() as u64).sum();
        InSlices { rest, size }
    }
}

impl actix_web::body::MessageBody for InSlices {
    type Error = std::convert::Infallible;

    fn size(&self) -> actix_web::body::BodySize {
        actix_web::body::BodySize::Sized(self.size)
    }

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Bytes, Self::Error>>> {
        let Some(next) = self.rest.last_mut() else {
            return std::task::Poll::Ready(None);
        };
        let slice = next.split_to(SLICE.min(next.len()));
        if next.is_empty() {
            self.rest.pop();
        }
        std::task::Poll::Ready(Some(Ok(slice)))
    }
}

/// This document.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    operation_id = "get_openapi",
    tag = "observe",
    responses(
        (status = 200, description = "The OpenAPI 3 document", content_type = "application/json", body = Object),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn get_openapi(shared: web::Data<Shared>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(shared.openapi_json.clone())
}

/// What `/healthz` says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Health {
    #[schema(example = "ok")]
    pub status: String,
}

/// Whether the API is up. Needs no token, reads nothing, and is not
/// subject to the concurrency limit.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "observe",
    security(()),
    responses((status = 200, description = "Up", body = Health))
)]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(Health {
        status: "ok".to_string(),
    })
}

/// Prometheus metrics: machines by state, provisioning attempts and
/// errors, provider call latency, queue depths.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "get_metrics",
    tag = "observe",
    responses(
        (status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain", body = String),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 503, description = UNAVAILABLE, body = ErrorBody),
    )
)]
pub async fn get_metrics(shared: web::Data<Shared>) -> Result<HttpResponse, ObserveError> {
    let figures = shared
        .status
        .machines_by_state(&shared.state.store, &shared.state.provider.name)
        .await?;
    let machines: Vec<(&'static str, u64)> = figures
        .by_state
        .into_iter()
        .map(|(state, n)| (state.as_str(), u64::try_from(n).unwrap_or(u64::MAX)))
        .collect();
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(shared.state.metrics.render(&machines, figures.hourly_cost)))
}

/// One change-log entry, the `data:` of an event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangeEvent {
    /// The change log's revision; also the event's `id:`.
    pub revision: i64,
    /// `model`, `charm`, `application`, `unit`, `machine`, `relation` or
    /// `zone`.
    pub entity: String,
    /// The entity's name or id.
    pub id: String,
    /// `created`, `updated` or `removed`.
    pub change: String,
    /// What changed, in a few words (`state=allocating zone=sim-a`).
    pub detail: String,
    /// Who made it: `user`, `engine`, `agent` or `provider`.
    pub origin: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: i64,
}

impl From<&Change> for ChangeEvent {
    fn from(change: &Change) -> ChangeEvent {
        ChangeEvent {
            revision: change.revision,
            entity: change.entity.as_str().to_string(),
            id: change.id.clone(),
            change: change.change.as_str().to_string(),
            detail: change.detail.clone(),
            origin: change.origin.as_str().to_string(),
            at_ms: change.at_ms,
        }
    }
}

/// `GET /v1/events` options.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Send the changes after this revision (the `revision` of a status,
    /// or the last event's `id`). Without it (and without a
    /// `Last-Event-ID` header), only changes from now on are sent.
    pub since: Option<u64>,
}

/// One event, in the `text/event-stream` format, in a buffer of its own
/// (the feed writes frames into one buffer with [`write_sse_frame`]).
#[cfg(test)]
pub(crate) fn sse_frame(change: &Change) -> Bytes {
    let mut frame = BytesMut::new();
    write_sse_frame(&mut frame, change);
    frame.freeze()
}

/// Appends the event of `change`, in the `text/event-stream` format, to
/// `out`.
pub fn write_sse_frame(out: &mut BytesMut, change: &Change) {
    use actix_web::web::BufMut;
    use std::fmt::Write;
    // Writing to a `BytesMut` cannot fail.
    let _ = write!(out, "id: {}\nevent: change\ndata: ", change.revision);
    // serde_json writes no newlines, so the data is one `data:` line.
    let mut writer = out.writer();
    if serde_json::to_writer(&mut writer, &ChangeEventRef::from(change)).is_err() {
        writer.get_mut().extend_from_slice(b"{}");
    }
    out.extend_from_slice(b"\n\n");
}

/// [`ChangeEvent`] borrowed from the change, to render without copying.
#[derive(Serialize)]
struct ChangeEventRef<'a> {
    revision: i64,
    entity: &'a str,
    id: &'a str,
    change: &'a str,
    detail: &'a str,
    origin: &'a str,
    at_ms: i64,
}

impl<'a> From<&'a Change> for ChangeEventRef<'a> {
    fn from(change: &'a Change) -> Self {
        ChangeEventRef {
            revision: change.revision,
            entity: change.entity.as_str(),
            id: &change.id,
            change: change.change.as_str(),
            detail: &change.detail,
            origin: change.origin.as_str(),
            at_ms: change.at_ms,
        }
    }
}

/// The comment an idle stream sends.
pub const KEEP_ALIVE_FRAME: &[u8] = b": keep-alive\n\n";

/// What an open event stream holds between pieces.
struct Follow {
    shared: web::Data<Shared>,
    /// The last revision sent; the next piece starts after it.
    since: i64,
    /// Changes whenever the feed's tail grows.
    newest: watch::Receiver<i64>,
    keep_alive: Duration,
    /// Counts this stream against the limit until it is dropped.
    _permit: OwnedSemaphorePermit,
    /// Counts this stream as following the feed, which keeps a tail only
    /// while some stream does.
    _watcher: Watcher,
    /// For a client that takes gzip: what the stream's one gzip member
    /// holds so far, which its end states.
    gzip: Option<crc32fast::Hasher>,
    /// The stream has ended (and a gzip member has been ended).
    ended: bool,
}

impl Follow {
    /// The next piece: frames from the feed's tail, or from the store when
    /// the tail has left this stream behind, or a keep-alive comment, each
    /// deflated for a gzip stream. `None` ends the stream (the server is
    /// stopping, or a catch-up read failed: the client reconnects with
    /// `Last-Event-ID` and loses nothing); a gzip stream is sent the end of
    /// its member first.
    async fn next_piece(&mut self) -> Option<Bytes> {
        if self.ended {
            return None;
        }
        let piece = self.next_frames().await;
        if piece.is_none() {
            self.ended = true;
            // A gzip member is ended properly, so that the client can tell
            // the end from a connection cut short.
            return self.gzip.take().map(gzip::end);
        }
        piece
    }

    /// [`Self::next_piece`] until the stream ends.
    async fn next_frames(&mut self) -> Option<Bytes> {
        loop {
            // Mark the tail seen *before* looking, so growth after the
            // look still wakes `changed()` below.
            self.newest.borrow_and_update();
            let feed = &self.shared.feed;
            let next = if self.gzip.is_none() {
                feed.after(self.since)
            } else {
                // Deflated once for every stream handed the same piece.
                match feed.after_deflated(self.since) {
                    Next::Frames { body, last } => {
                        self.since = last;
                        return Some(self.joined(body));
                    }
                    Next::Waiting => Next::Waiting,
                    Next::Behind => Next::Behind,
                }
            };
            let next = match next {
                Next::Behind => match feed.catch_up(&self.shared.state.store, self.since).await {
                    Ok(next) => next,
                    Err(e) => {
                        log::warn!("event stream after revision {} ends: {e}", self.since);
                        return None;
                    }
                },
                next => next,
            };
            if let Next::Frames { body, last } = next {
                self.since = last;
                return Some(self.encoded(body));
            }
            match tokio::time::timeout(self.keep_alive, self.newest.changed()).await {
                Ok(Ok(())) => continue,
                Ok(Err(_)) => return None,
                Err(_) => return Some(self.encoded(Bytes::from_static(KEEP_ALIVE_FRAME))),
            }
        }
    }

    /// `plain`, deflated into the stream's gzip member if it has one.
    fn encoded(&mut self, plain: Bytes) -> Bytes {
        if self.gzip.is_none() {
            return plain;
        }
        self.joined(Deflated::of(&plain))
    }

    /// The bytes of `piece`, counted into the stream's gzip member.
    fn joined(&mut self, piece: Deflated) -> Bytes {
        if let Some(data) = &mut self.gzip {
            data.combine(&piece.data);
        }
        piece.bytes
    }
}

/// The send buffer an event stream over HTTP/1.1 asks for its connection,
/// instead of the kernel's own sizing, which grows up to 4 MiB for a
/// client that reads slowly. What a stream has yet to send waits in the feed's tail, one
/// copy for every stream, rather than in a kernel copy of each stream's
/// own: with 500 streams following a 10,000-unit deploy, the kernel's TCP
/// memory peaked at 156–171 MiB instead of 283–299 MiB, and serving them
/// cost the controller about a third less CPU time (RELIABILITY.md). The
/// kernel keeps twice this, so 128 KiB can be in flight: 2.6 MB/s to a
/// client 50 ms away, some 15,000 events a second as they are and about
/// fifteen times that gzipped.
pub const EVENT_STREAM_SEND_BUFFER: usize = 64 * 1024;

/// The revision to start after: `Last-Event-ID` (what a reconnecting
/// client saw last) over `since` (where it first asked to start).
///
/// # Errors
///
/// [`ObserveError::BadLastEventId`] for a header that is not a revision.
pub fn start_revision(
    last_event_id: Option<&HeaderValue>,
    since: Option<u64>,
) -> Result<Option<i64>, ObserveError> {
    if let Some(value) = last_event_id {
        let text = value.to_str().unwrap_or_default().trim();
        return text
            .parse::<u64>()
            .ok()
            .and_then(|n| i64::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                ObserveError::BadLastEventId(String::from_utf8_lossy(value.as_bytes()).into())
            });
    }
    Ok(since.map(|n| i64::try_from(n).unwrap_or(i64::MAX)))
}

/// The change log as Server-Sent Events: each event's `id:` is its
/// revision, its `data:` a [`ChangeEvent`]. Resumable from any revision;
/// no change is skipped or repeated. An idle stream sends a
/// `: keep-alive` comment every 15 seconds. A client whose
/// `Accept-Encoding` takes gzip gets the stream as one gzip member, each
/// piece flushed so that it can be read as it arrives.
#[utoipa::path(
    get,
    path = "/v1/events",
    operation_id = "get_events",
    tag = "observe",
    params(
        EventsQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this revision (wins over `since`)"),
    ),
    responses(
        (status = 200, description = "An endless stream of change events (gzipped when Accept-Encoding takes gzip)", content_type = "text/event-stream", body = ChangeEvent),
        (status = 400, description = "Bad since or Last-Event-ID, or one ahead of the change log", body = ErrorBody),
        (status = 401, description = "No or wrong admin token", body = ErrorBody),
        (status = 503, description = "Too many streams open, or the database cannot be read to check a since or Last-Event-ID ahead of this controller's head", body = ErrorBody),
    )
)]
pub async fn get_events(
    shared: web::Data<Shared>,
    req: HttpRequest,
    query: web::Query<EventsQuery>,
) -> Result<HttpResponse, ObserveError> {
    let start = start_revision(req.headers().get(LAST_EVENT_ID), query.since)?;
    if let Some(asked) = start.filter(|asked| *asked > shared.state.store.revision()) {
        // Not heard of yet here, or not there at all: the database says.
        let head = shared.state.store.blocking(|s| s.stored_revision()).await?;
        if asked > head {
            return Err(ObserveError::AheadOfLog { asked, head });
        }
    }
    let permit = shared
        .event_streams
        .clone()
        .try_acquire_owned()
        .map_err(|_| {
            shared.state.metrics.api_overloaded();
            ObserveError::TooManyStreams(shared.state.limits.max_event_streams)
        })?;
    let since = start.unwrap_or_else(|| shared.state.store.revision());
    // An HTTP/2 connection carries the client's other requests too (a
    // browser's status reads beside its stream), which keep the kernel's
    // sizing.
    let own_connection = req.version() < actix_web::http::Version::HTTP_2;
    if let Some(socket) = req
        .conn_data::<ConnectionSocket>()
        .filter(|_| own_connection)
    {
        if let Err(e) = socket.limit_send_buffer(EVENT_STREAM_SEND_BUFFER) {
            log::debug!("event stream: cannot bound the socket's send buffer: {e}");
        }
    }
    let gzipped = accepts_gzip(&req);
    let mut follow = Follow {
        newest: shared.feed.subscribe(),
        since,
        keep_alive: shared.state.limits.event_keep_alive,
        _permit: permit,
        _watcher: shared.feed.watcher(),
        shared: shared.clone(),
        gzip: gzipped.then(crc32fast::Hasher::new),
        ended: false,
    };
    // The first frame goes out at once, so the client knows the stream is
    // open before anything changes (after the gzip header, if gzipped).
    let opening = format!(": berth change log after revision {since}\n\n");
    let opening = if gzipped {
        [gzip::header(), follow.encoded(Bytes::from(opening))]
            .concat()
            .into()
    } else {
        Bytes::from(opening)
    };
    let stream =
        futures_util::stream::once(async move { Ok::<_, actix_web::Error>(opening) }).chain(
            futures_util::stream::unfold(follow, |mut follow| async move {
                let piece = follow.next_piece().await?;
                Some((Ok::<_, actix_web::Error>(piece), follow))
            }),
        );
    let mut response = HttpResponse::Ok();
    response
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .insert_header((header::VARY, "Accept-Encoding"));
    if gzipped {
        response.insert_header((header::CONTENT_ENCODING, "gzip"));
    }
    Ok(response.streaming(stream))
}

#[cfg(test)]
mod tests {
    use actix_web::body::{BodySize, MessageBody};
    use actix_web::ResponseError;

    use super::*;
    use crate::store::{ChangeKind, Entity, Origin};

    /// The slices `slices` hands over, their lengths and bytes.
    async fn drain(slices: &mut InSlices) -> (Vec<usize>, Vec<u8>) {
        let mut seen = Vec::new();
        let mut lengths = Vec::new();
        while let Some(piece) =
            std::future::poll_fn(|cx| std::pin::Pin::new(&mut *slices).poll_next(cx)).await
        {
            let piece = piece.unwrap();
            lengths.push(piece.len());
            seen.extend_from_slice(&piece);
        }
        (lengths, seen)
    }

    #[test]
    fn an_event_frame_carries_its_revision_and_the_documented_change_event() {
        let change = Change {
            revision: 42,
            entity: Entity::Machine,
            id: "7".into(),
            change: ChangeKind::Updated,
            detail: "state=started zone=\"a\"\n\u{e9}".into(),
            origin: Origin::Engine,
            at_ms: 1_700_000_000_000,
        };
        let frame = sse_frame(&change);
        let text = std::str::from_utf8(&frame).unwrap();
        let data = text
            .strip_prefix("id: 42\nevent: change\ndata: ")
            .and_then(|rest| rest.strip_suffix("\n\n"))
            .unwrap_or_else(|| panic!("not one event frame: {text:?}"));
        assert!(!data.contains('\n'), "{data:?}");
        let event: ChangeEvent = serde_json::from_str(data).unwrap();
        assert_eq!(event, ChangeEvent::from(&change));
        // Appended to a buffer, the same bytes after what was there.
        let mut out = BytesMut::from(&b"before"[..]);
        write_sse_frame(&mut out, &change);
        assert_eq!(&out[..6], b"before");
        assert_eq!(&out[6..], &frame[..]);
    }

    #[actix_web::test]
    async fn a_body_in_slices_is_handed_over_whole_in_bounded_pieces() {
        let body: Vec<u8> = (0..SLICE * 2 + 100).map(|i| (i % 251) as u8).collect();
        let mut slices = InSlices::new(Bytes::from(body.clone()));
        assert_eq!(slices.size(), BodySize::Sized(body.len() as u64));
        let (lengths, seen) = drain(&mut slices).await;
        assert_eq!(lengths, vec![SLICE, SLICE, 100]);
        assert_eq!(seen, body);

        let mut empty = InSlices::new(Bytes::new());
        assert_eq!(empty.size(), BodySize::Sized(0));
        let end = std::future::poll_fn(|cx| std::pin::Pin::new(&mut empty).poll_next(cx)).await;
        assert!(end.is_none());

        // In pieces: each handed over in slices of its own, empty ones
        // skipped.
        let pieces = [
            Bytes::from(body[..10].to_vec()),
            Bytes::new(),
            Bytes::from(body[10..SLICE + 20].to_vec()),
            Bytes::from(body[SLICE + 20..].to_vec()),
        ];
        let mut slices = InSlices::of(pieces);
        assert_eq!(slices.size(), BodySize::Sized(body.len() as u64));
        let (lengths, seen) = drain(&mut slices).await;
        assert_eq!(lengths, vec![10, SLICE, 10, SLICE, 80]);
        assert_eq!(seen, body);
    }

    #[test]
    fn gzip_is_taken_when_accept_encoding_weighs_it_above_zero() {
        let takes = |values: &[&str]| {
            let mut request = actix_web::test::TestRequest::get();
            for value in values {
                request = request.append_header((header::ACCEPT_ENCODING, *value));
            }
            accepts_gzip(&request.to_http_request())
        };
        assert!(takes(&["gzip"]));
        assert!(takes(&["gzip, deflate, br"]));
        assert!(takes(&["br;q=1.0, GZIP;q=0.5"]));
        assert!(takes(&["x-gzip"]));
        assert!(takes(&["*"]));
        assert!(takes(&["identity", "gzip"]));
        assert!(!takes(&[]));
        assert!(!takes(&["identity"]));
        assert!(!takes(&["br, deflate"]));
        assert!(!takes(&["gzip;q=0"]));
        assert!(!takes(&["gzip; q=0.000"]));
        assert!(!takes(&["*, gzip;q=0"]));
        assert!(!takes(&["*;q=0"]));
        // A weight that does not parse is no weight.
        assert!(!takes(&["gzip;q=lots"]));
        assert!(!takes(&["gzipped"]));
    }

    #[test]
    fn an_event_frame_has_the_revision_as_id_and_the_change_as_data() {
        let change = Change {
            revision: 7,
            entity: Entity::Machine,
            id: "0/lxd/1".into(),
            change: ChangeKind::Updated,
            detail: "state=allocating".into(),
            origin: Origin::Engine,
            at_ms: 1000,
        };
        assert_eq!(
            sse_frame(&change),
            Bytes::from(
                "id: 7\nevent: change\ndata: {\"revision\":7,\"entity\":\"machine\",\"id\":\"0/lxd/1\",\"change\":\"updated\",\"detail\":\"state=allocating\",\"origin\":\"engine\",\"at_ms\":1000}\n\n"
            )
        );
    }

    #[test]
    fn last_event_id_wins_over_since() {
        let header = HeaderValue::from_static("12");
        assert_eq!(start_revision(Some(&header), Some(3)).unwrap(), Some(12));
        assert_eq!(start_revision(None, Some(3)).unwrap(), Some(3));
        assert_eq!(start_revision(None, None).unwrap(), None);
    }

    #[test]
    fn a_last_event_id_that_is_not_a_revision_is_refused() {
        for bad in ["", "-1", "abc", "1.5"] {
            let header = HeaderValue::from_str(bad).unwrap();
            let e = start_revision(Some(&header), None).unwrap_err();
            assert_eq!(e.status_code(), StatusCode::BAD_REQUEST, "{bad:?}");
        }
    }
}
