//! The change log's recent tail, read from the store once for every event
//! stream.
//!
//! One background task ([`keep_following`]) reads each new change once,
//! renders it as a Server-Sent Events frame, and appends it to a tail held
//! in memory; every open stream takes its frames from that tail, so a
//! thousand watchers cost one read of the log, not a thousand, and their
//! number is bounded by memory and file descriptors rather than by the
//! store's connection pool. The frames of one read are rendered into one
//! buffer, and a stream is handed slices of it: a thousand watchers share
//! one copy of each frame.
//!
//! # Guarantees
//!
//! - The tail holds every change after [`ChangeFeed`]'s `complete_after`
//!   revision, in order. A stream whose cursor is older (a client resuming
//!   from long ago, or one so slow that the tail moved past it) reads what
//!   it missed from the store itself, [`CATCH_UP_BATCH`] changes at a time
//!   and at most [`CATCH_UP_READERS`] streams at once, then returns to the
//!   tail. So no stream skips or repeats a change, however slow it is.
//! - The tail is trimmed from its oldest end to [`TAIL_BYTES`] of frames,
//!   so its memory does not grow with the log.
//! - While no stream is open, the follower reads and keeps nothing: the
//!   tail starts again, empty, at the store's head each time the log grows
//!   ([`ChangeFeed::start_over_at`]). A stream opened later at an older
//!   revision is behind it and reads that part from the store, as above.
//!
//! # Gzip
//!
//! A stream whose client takes gzip is sent one gzip member that does not
//! end while the stream lasts: its pieces are deflated each on its own,
//! ending in a sync flush, so that each joins the deflate stream wherever
//! it falls (see [`crate::status::gzip`]). A piece deflated for one stream
//! is kept with the tail's frame it starts at
//! ([`ChangeFeed::after_deflated`]), so the streams that follow the head,
//! which are handed the same pieces, share one deflation of each: about a
//! fifteenth of the bytes to send, for the cost of deflating once.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard, Weak};
use std::time::Duration;

use actix_web::web::{Bytes, BytesMut};
use tokio::sync::{watch, Semaphore};

use crate::api::observe::write_sse_frame;
use crate::status::gzip;
use crate::store::{blocking, Change, Store, StoreError};

/// How many change-log entries the follower reads at a time.
pub const FOLLOW_BATCH: i64 = 1024;

/// How many entries a stream that is behind the tail reads at a time.
pub const CATCH_UP_BATCH: i64 = 256;

/// How many streams may read the store at once to catch up.
pub const CATCH_UP_READERS: usize = 4;

/// How many bytes of rendered frames the tail keeps (about 70,000 changes).
pub const TAIL_BYTES: usize = 16 * 1024 * 1024;

/// The most one piece of a stream carries, so a stream far behind the head
/// is handed its backlog in pieces the connection can take.
pub const PIECE_BYTES: usize = 64 * 1024;

/// How long the follower waits before reading again after a failed read.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// What a stream at `since` gets next from the tail: frames as they are
/// (`B` = [`Bytes`]) or [`Deflated`].
#[derive(Debug, PartialEq, Eq)]
pub enum Next<B = Bytes> {
    /// Frames after `since`, concatenated, and the revision of the last.
    Frames { body: B, last: i64 },
    /// Nothing after `since` yet: wait for the tail to grow.
    Waiting,
    /// The tail no longer holds what follows `since`: read the store.
    Behind,
}

/// A piece of frames deflated for a gzip stream: bytes that join a gzip
/// member's deflate stream wherever they fall ([`gzip::deflate_piece`]),
/// and the CRC-32 and length of the frames themselves, which the member's
/// end states.
#[derive(Clone)]
pub struct Deflated {
    pub bytes: Bytes,
    pub data: crc32fast::Hasher,
}

impl Deflated {
    /// `plain` deflated.
    pub fn of(plain: &[u8]) -> Deflated {
        let mut data = crc32fast::Hasher::new();
        data.update(plain);
        Deflated {
            bytes: Bytes::from(gzip::deflate_piece(plain)),
            data,
        }
    }
}

impl fmt::Debug for Deflated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deflated")
            .field("bytes", &self.bytes.len())
            .field("of", &self.data.clone().total_len())
            .finish()
    }
}

/// The frame of one change: bytes `start..end` of `block`, the frames of
/// the changes appended with it, rendered into one buffer so that a run of
/// them is handed to a stream as one slice, without copying.
struct Frame {
    revision: i64,
    block: Bytes,
    start: usize,
    end: usize,
    /// The piece that starts at this frame, deflated for the first gzip
    /// stream handed it, with the revision it ends at: the next stream
    /// handed the same piece takes it as it is.
    deflated: OnceLock<Box<(i64, Deflated)>>,
}

impl Frame {
    fn len(&self) -> usize {
        self.end - self.start
    }

    fn bytes(&self) -> &[u8] {
        &self.block[self.start..self.end]
    }

    /// Whether `next` follows this frame in the same block.
    fn runs_into(&self, next: &Frame) -> bool {
        self.block.as_ptr() == next.block.as_ptr() && self.end == next.start
    }
}

/// A piece smaller than this is topped up with the frames of the next
/// blocks (copied) rather than sent alone, so a stream near the head is
/// not sent a chunk per append.
const LEAST_PIECE_BYTES: usize = 8 * 1024;

/// Rendered change-log frames after `complete_after`, oldest first.
struct Tail {
    frames: VecDeque<Frame>,
    bytes: usize,
    complete_after: i64,
    capacity_bytes: usize,
}

impl Tail {
    /// What follows `since` (see [`ChangeFeed::after`]), and where in the
    /// tail its first frame is.
    fn piece_after(&self, since: i64) -> (Next, usize) {
        if since < self.complete_after {
            return (Next::Behind, 0);
        }
        let start = self.frames.partition_point(|frame| frame.revision <= since);
        let mut frames = self.frames.range(start..).peekable();
        let Some(first) = frames.next() else {
            return (Next::Waiting, start);
        };
        // The run of frames in `first`'s block, up to a piece's size: one
        // slice of the block, not a copy.
        let mut last = first;
        while let Some(next) =
            frames.next_if(|next| last.runs_into(next) && next.end - first.start <= PIECE_BYTES)
        {
            last = next;
        }
        let run = last.end - first.start;
        let more_blocks = frames.peek().is_some_and(|next| !last.runs_into(next));
        if run >= LEAST_PIECE_BYTES || !more_blocks {
            return (
                Next::Frames {
                    body: first.block.slice(first.start..last.end),
                    last: last.revision,
                },
                start,
            );
        }
        // A short run followed by other blocks: copy frames into one
        // piece, so the stream is not sent many small chunks.
        let mut body = BytesMut::with_capacity(PIECE_BYTES.min(self.bytes));
        body.extend_from_slice(&first.block[first.start..last.end]);
        let mut newest = last.revision;
        for frame in frames {
            if body.len() + frame.len() > PIECE_BYTES {
                break;
            }
            body.extend_from_slice(frame.bytes());
            newest = frame.revision;
        }
        (
            Next::Frames {
                body: body.freeze(),
                last: newest,
            },
            start,
        )
    }
}

/// The tail of the change log every event stream reads. Created when the
/// server starts, at the store's revision then; [`keep_following`] keeps
/// it growing.
pub struct ChangeFeed {
    tail: RwLock<Tail>,
    /// The newest revision in the tail; streams wait on it.
    newest: watch::Sender<i64>,
    catch_up: Semaphore,
    /// How many streams follow the tail (see [`ChangeFeed::watcher`]).
    watchers: Arc<AtomicUsize>,
}

/// An open stream, counted while it is held: with none, the follower
/// keeps no tail.
pub struct Watcher(Arc<AtomicUsize>);

impl Drop for Watcher {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl ChangeFeed {
    /// An empty feed that will hold every change after `revision`.
    pub fn new(revision: i64) -> ChangeFeed {
        ChangeFeed::with_capacity(revision, TAIL_BYTES)
    }

    /// As [`ChangeFeed::new`], keeping at most `capacity_bytes` of frames.
    pub fn with_capacity(revision: i64, capacity_bytes: usize) -> ChangeFeed {
        ChangeFeed {
            tail: RwLock::new(Tail {
                frames: VecDeque::new(),
                bytes: 0,
                complete_after: revision,
                capacity_bytes,
            }),
            newest: watch::channel(revision).0,
            catch_up: Semaphore::new(CATCH_UP_READERS),
            watchers: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Counts a stream as following the tail until the returned value is
    /// dropped.
    pub fn watcher(&self) -> Watcher {
        self.watchers.fetch_add(1, Ordering::Relaxed);
        Watcher(Arc::clone(&self.watchers))
    }

    /// How many streams follow the tail.
    pub fn watchers(&self) -> usize {
        self.watchers.load(Ordering::Relaxed)
    }

    /// Empties the tail and makes it hold every change after `revision`
    /// (when that is newer than what it holds), for a feed no stream
    /// follows: nothing is read or kept for no one, and a stream that
    /// opens later at an older revision reads that part from the store.
    pub fn start_over_at(&self, revision: i64) {
        {
            let mut tail = self.tail.write().unwrap_or_else(PoisonError::into_inner);
            if revision <= tail.complete_after.max(self.newest()) {
                return;
            }
            tail.frames.clear();
            tail.bytes = 0;
            tail.complete_after = revision;
        }
        self.newest.send_replace(revision);
    }

    /// The newest revision the tail holds (or started at).
    pub fn newest(&self) -> i64 {
        *self.newest.borrow()
    }

    /// A receiver that changes whenever the tail grows.
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.newest.subscribe()
    }

    /// Appends the frames of changes `rendered` (oldest first, each newer
    /// than [`Self::newest`]), trims the tail to its capacity and wakes
    /// the streams.
    pub fn append(&self, rendered: Rendered) {
        let Some(last) = rendered.ends.last().map(|(revision, _)| *revision) else {
            return;
        };
        {
            let Rendered { block, ends } = rendered;
            let mut tail = self.tail.write().unwrap_or_else(PoisonError::into_inner);
            let mut start = 0;
            for (revision, end) in ends {
                tail.frames.push_back(Frame {
                    revision,
                    block: block.clone(),
                    start,
                    end,
                    deflated: OnceLock::new(),
                });
                start = end;
            }
            tail.bytes += block.len();
            while tail.bytes > tail.capacity_bytes {
                let Some(frame) = tail.frames.pop_front() else {
                    break;
                };
                tail.bytes -= frame.len();
                tail.complete_after = frame.revision;
            }
        }
        self.newest.send_replace(last);
    }

    /// What follows `since`: up to [`PIECE_BYTES`] of frames (at least one).
    pub fn after(&self, since: i64) -> Next {
        self.read_tail().piece_after(since).0
    }

    /// [`Self::after`] deflated, for a stream that takes gzip: a piece
    /// another stream was handed deflated is taken as it is; one that was
    /// not is deflated (outside the tail's lock, so that appends do not
    /// wait on it) and kept for the next.
    pub fn after_deflated(&self, since: i64) -> Next<Deflated> {
        let (body, last, first) = {
            let tail = self.read_tail();
            let (next, at) = tail.piece_after(since);
            let (body, last) = match next {
                Next::Frames { body, last } => (body, last),
                Next::Waiting => return Next::Waiting,
                Next::Behind => return Next::Behind,
            };
            let first = &tail.frames[at];
            let kept = first.deflated.get().map(|kept| &**kept);
            if let Some((_, deflated)) = kept.filter(|(ends_at, _)| *ends_at == last) {
                return Next::Frames {
                    body: deflated.clone(),
                    last,
                };
            }
            (body, last, first.revision)
        };
        let deflated = Deflated::of(&body);
        let tail = self.read_tail();
        let at = tail.frames.partition_point(|frame| frame.revision < first);
        if let Some(frame) = tail.frames.get(at).filter(|frame| frame.revision == first) {
            // Another stream may have kept its own first: either serves.
            let _ = frame.deflated.set(Box::new((last, deflated.clone())));
        }
        Next::Frames {
            body: deflated,
            last,
        }
    }

    fn read_tail(&self) -> RwLockReadGuard<'_, Tail> {
        self.tail.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The changes after `since` read from the store, for a stream the
    /// tail has left behind, rendered as [`Next::Frames`] (or
    /// [`Next::Waiting`] when the store has none).
    ///
    /// # Errors
    ///
    /// The store's, when the read fails.
    pub async fn catch_up(&self, store: &Store, since: i64) -> Result<Next, StoreError> {
        let _turn = self
            .catch_up
            .acquire()
            .await
            .map_err(|_| StoreError::WriterGone)?;
        let store = store.clone();
        let changes = blocking(move || store.changes_since(since, CATCH_UP_BATCH)).await?;
        let Some(last) = changes.last().map(|c| c.revision) else {
            return Ok(Next::Waiting);
        };
        Ok(Next::Frames {
            body: Rendered::of(&changes).block,
            last,
        })
    }
}

/// Changes rendered as event-stream frames into one buffer, each frame's
/// revision and where it ends.
pub struct Rendered {
    block: Bytes,
    ends: Vec<(i64, usize)>,
}

impl Rendered {
    /// `changes`' frames, oldest first.
    pub fn of(changes: &[Change]) -> Rendered {
        let mut rendered = BytesMut::new();
        let mut ends = Vec::with_capacity(changes.len());
        for change in changes {
            write_sse_frame(&mut rendered, change);
            ends.push((change.revision, rendered.len()));
        }
        // The buffer grew by doubling: up to half of it may be room never
        // written, which the tail (trimmed by bytes written) would keep.
        let block = if rendered.capacity() - rendered.len() > rendered.len() / 8 {
            Bytes::copy_from_slice(&rendered)
        } else {
            rendered.freeze()
        };
        Rendered { block, ends }
    }
}

/// What [`keep_following`] needs of the server's shared state.
pub struct Following<'a> {
    pub feed: &'a ChangeFeed,
    pub store: &'a Store,
}

/// Keeps `shared`'s feed up with the change log: reads what follows the
/// tail whenever the store's head moves, while any stream follows it
/// (otherwise the tail starts over at the head). A failed read is retried
/// after a second (streams wait meanwhile; none ends). Ends when the server
/// has let go of `shared` or the store has stopped.
pub async fn keep_following<S>(shared: Weak<S>, parts: fn(&S) -> Following<'_>) {
    let Some(mut head) = shared.upgrade().map(|s| parts(&s).store.watch_revision()) else {
        return;
    };
    loop {
        let Some(current) = shared.upgrade() else {
            return;
        };
        let Following { feed, store } = parts(&current);
        // Mark the head seen *before* reading, so a commit that lands
        // after the read still wakes `changed()` below.
        head.borrow_and_update();
        if feed.watchers() == 0 {
            feed.start_over_at(store.revision());
        } else {
            let since = feed.newest();
            let reader = store.clone();
            // Rendered where it is read, on the blocking pool, and not on
            // the thread that runs the server's and the engine's actors.
            let read = blocking(move || {
                reader
                    .changes_since(since, FOLLOW_BATCH)
                    .map(|changes| Rendered::of(&changes))
            });
            match read.await {
                Ok(rendered) if !rendered.ends.is_empty() => {
                    feed.append(rendered);
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    log::warn!("event streams: cannot read the change log after revision {since}: {e}; trying again");
                    drop(current);
                    tokio::time::sleep(RETRY_AFTER).await;
                    continue;
                }
            }
        }
        drop(current);
        // Wake now and then to notice a server that has stopped (and a
        // stream opened while the log stood still).
        match tokio::time::timeout(RETRY_AFTER, head.changed()).await {
            Ok(Ok(())) | Err(_) => {}
            Ok(Err(_)) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::observe::sse_frame;
    use crate::store::{ChangeKind, Entity, Origin};

    fn change(revision: i64) -> Change {
        Change {
            revision,
            entity: Entity::Machine,
            id: revision.to_string(),
            change: ChangeKind::Updated,
            detail: "state=started".into(),
            origin: Origin::Engine,
            at_ms: 0,
        }
    }

    fn revisions(body: &Bytes) -> Vec<i64> {
        String::from_utf8_lossy(body)
            .lines()
            .filter_map(|line| line.strip_prefix("id: "))
            .map(|id| id.parse().unwrap())
            .collect()
    }

    #[test]
    fn a_stream_gets_every_frame_after_its_cursor_in_order() {
        let feed = ChangeFeed::new(10);
        assert_eq!(feed.after(10), Next::Waiting);
        feed.append(Rendered::of(&(11..=15).map(change).collect::<Vec<_>>()));
        assert_eq!(feed.newest(), 15);
        let Next::Frames { body, last } = feed.after(12) else {
            panic!("expected frames");
        };
        assert_eq!(last, 15);
        assert_eq!(revisions(&body), vec![13, 14, 15]);
        let Next::Frames { body, last } = feed.after(14) else {
            panic!("expected frames");
        };
        assert_eq!((revisions(&body), last), (vec![15], 15));
        assert_eq!(feed.after(15), Next::Waiting);
        // A cursor from before the feed started is behind it.
        assert_eq!(feed.after(9), Next::Behind);
    }

    /// `pieces` (deflated, in order) as the gzip member a stream sends,
    /// read back.
    fn gunzip(pieces: &[Deflated]) -> Vec<u8> {
        use std::io::Read;
        let mut data = crc32fast::Hasher::new();
        for piece in pieces {
            data.combine(&piece.data);
        }
        let member = gzip::member(pieces.iter().map(|p| p.bytes.clone()), data).concat();
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&member[..])
            .read_to_end(&mut out)
            .expect("a whole gzip member");
        out
    }

    fn deflated_after(feed: &ChangeFeed, since: i64) -> (Deflated, i64) {
        match feed.after_deflated(since) {
            Next::Frames { body, last } => (body, last),
            other => panic!("expected frames, got {other:?}"),
        }
    }

    #[test]
    fn a_piece_deflated_for_one_stream_is_handed_as_it_is_to_the_next() {
        let feed = ChangeFeed::new(0);
        feed.append(Rendered::of(&(1..=2000).map(change).collect::<Vec<_>>()));
        let (mut since, mut pieces, mut plain) = (0, Vec::new(), Vec::new());
        while let Next::Frames { body, last } = feed.after(since) {
            let (deflated, deflated_last) = deflated_after(&feed, since);
            assert_eq!(deflated_last, last);
            // The second stream at the same place gets the same bytes.
            let (again, _) = deflated_after(&feed, since);
            assert_eq!(again.bytes.as_ptr(), deflated.bytes.as_ptr());
            assert!(deflated.bytes.len() < body.len() / 4, "{deflated:?}");
            plain.extend_from_slice(&body);
            pieces.push(deflated);
            since = last;
        }
        assert!(pieces.len() > 1, "more than one piece");
        assert_eq!(gunzip(&pieces), plain);
        assert!(matches!(feed.after_deflated(since), Next::Waiting));
        assert!(matches!(ChangeFeed::new(5).after_deflated(4), Next::Behind));
    }

    #[test]
    fn a_piece_that_ends_elsewhere_than_the_one_kept_is_deflated_anew() {
        let feed = ChangeFeed::new(0);
        feed.append(Rendered::of(&(1..=5).map(change).collect::<Vec<_>>()));
        let (kept, last) = deflated_after(&feed, 0);
        assert_eq!(last, 5);
        // Small reads after it: the piece after 0 now runs on into them.
        for revision in 6..=9 {
            feed.append(Rendered::of(&[change(revision)]));
        }
        let Next::Frames { body, last } = feed.after(0) else {
            panic!("expected frames");
        };
        assert_eq!(last, 9);
        let (joined, joined_last) = deflated_after(&feed, 0);
        assert_eq!(joined_last, 9);
        assert_ne!(joined.bytes.as_ptr(), kept.bytes.as_ptr());
        assert_eq!(gunzip(&[joined]), body);
    }

    #[test]
    fn the_tail_is_trimmed_to_its_capacity_and_says_what_it_no_longer_holds() {
        let frame = sse_frame(&change(10)).len();
        let feed = ChangeFeed::with_capacity(0, frame * 3);
        feed.append(Rendered::of(&(1..=10).map(change).collect::<Vec<_>>()));
        // Revisions 8, 9 and 10 (and frames of similar size) remain.
        assert_eq!(feed.after(6), Next::Behind);
        let Next::Frames { body, .. } = feed.after(7) else {
            panic!("expected frames");
        };
        assert_eq!(revisions(&body), vec![8, 9, 10]);
    }

    #[test]
    fn a_piece_is_bounded_but_never_empty() {
        let feed = ChangeFeed::new(0);
        let n = 2000;
        feed.append(Rendered::of(&(1..=n).map(change).collect::<Vec<_>>()));
        let mut since = 0;
        let mut seen = Vec::new();
        while let Next::Frames { body, last } = feed.after(since) {
            assert!(body.len() <= PIECE_BYTES);
            seen.extend(revisions(&body));
            since = last;
        }
        assert_eq!(seen, (1..=n).collect::<Vec<_>>());
    }

    #[test]
    fn streams_share_the_rendered_frames_and_small_appends_are_joined() {
        let feed = ChangeFeed::new(0);
        feed.append(Rendered::of(&(1..=5).map(change).collect::<Vec<_>>()));
        let piece = |since| match feed.after(since) {
            Next::Frames { body, last } => (body, last),
            other => panic!("expected frames, got {other:?}"),
        };
        // Two streams at the same place are handed the same bytes.
        let ((one, _), (other, _)) = (piece(0), piece(0));
        assert_eq!(one.as_ptr(), other.as_ptr());
        // A stream that has the first frames gets the rest of that read
        // as a slice of the same buffer.
        let (rest, last) = piece(2);
        assert_eq!((revisions(&rest), last), (vec![3, 4, 5], 5));
        assert_eq!(rest.as_ptr(), one[one.len() - rest.len()..].as_ptr());
        // Reads of one change each are joined into one piece.
        for revision in 6..=9 {
            feed.append(Rendered::of(&[change(revision)]));
        }
        let (joined, last) = piece(5);
        assert_eq!((revisions(&joined), last), (vec![6, 7, 8, 9], 9));
    }

    #[test]
    fn a_feed_no_stream_follows_starts_over_at_the_head_and_never_goes_back() {
        let feed = ChangeFeed::new(0);
        feed.append(Rendered::of(&(1..=5).map(change).collect::<Vec<_>>()));
        let mut rx = feed.subscribe();
        rx.borrow_and_update();
        feed.start_over_at(8);
        assert_eq!(feed.newest(), 8);
        assert!(rx.has_changed().unwrap());
        // What it held is let go: a stream at 5 reads from the store.
        assert_eq!(feed.after(5), Next::Behind);
        assert_eq!(feed.after(8), Next::Waiting);
        // An older or the same revision changes nothing.
        rx.borrow_and_update();
        feed.start_over_at(7);
        feed.start_over_at(8);
        assert!(!rx.has_changed().unwrap());
        assert_eq!(feed.newest(), 8);
        assert_eq!(feed.after(7), Next::Behind);
        // And it follows on from there.
        feed.append(Rendered::of(&[change(9)]));
        let Next::Frames { body, last } = feed.after(8) else {
            panic!("expected frames");
        };
        assert_eq!((revisions(&body), last), (vec![9], 9));
    }

    #[test]
    fn streams_are_counted_while_their_watchers_are_held() {
        let feed = ChangeFeed::new(0);
        assert_eq!(feed.watchers(), 0);
        let one = feed.watcher();
        let two = feed.watcher();
        assert_eq!(feed.watchers(), 2);
        drop(one);
        assert_eq!(feed.watchers(), 1);
        drop(two);
        assert_eq!(feed.watchers(), 0);
    }

    #[test]
    fn subscribers_wake_when_the_tail_grows() {
        let feed = ChangeFeed::new(0);
        let mut rx = feed.subscribe();
        assert!(!rx.has_changed().unwrap());
        feed.append(Rendered::of(&[]));
        assert!(!rx.has_changed().unwrap());
        feed.append(Rendered::of(&[change(1)]));
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 1);
    }
}
