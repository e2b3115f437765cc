//! The status response: a [`StatusDocument`] kept up to date from the
//! change log, and its rendering kept per revision.
//!
//! Reading and rendering the whole state costs tens of milliseconds with
//! thousands of machines, and memory in proportion, while most of it does
//! not change between two reads. So:
//!
//! - the document is read whole once, then brought forward by reading only
//!   the entities that changed since its revision (or whole again when
//!   most of them did); a starting controller reads and renders it
//!   ([`StatusCache::prepared`]; on SQLite, in shares read at once on
//!   every core) while its provider opens;
//! - [`keep_fresh`] brings it forward in the background a moment after the
//!   log grows (and once a second while it keeps growing: an entity that
//!   changes several times in that second is read once), so a request
//!   finds little left to read, and renders it once the log is quiet, so
//!   the next request finds it rendered;
//! - the rendered JSON is kept with its revision: a request whose revision
//!   (the store's head when it arrives) is already rendered gets those
//!   bytes at once, and requests that arrive while one renders wait for
//!   that one instead of rendering again;
//! - the rendering is kept in segments ([`crate::status::rendering`]): the
//!   next revision's shares the segments that come out the same;
//! - for clients that accept gzip, the rendering is compressed once per
//!   revision (only its new segments, on every core) and kept beside it
//!   the same way; once a client has asked for it, [`keep_fresh`]
//!   compresses each quiet rendering too, and one now and then during a
//!   long burst of writes.
//!
//! # Guarantees
//!
//! A response is never older than the store's head when the request
//! arrived, so a client sees its own acknowledged writes (the head moves
//! before a write is acknowledged).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use actix_web::web::Bytes;

use crate::domain::instance_types::HourlyPrice;
use crate::domain::machine::MachineState;
use crate::status::cores;
use crate::status::document::StatusDocument;
use crate::status::filter::{FilterError, StatusFilter};
use crate::status::rendering::Rendering;
use crate::store::{Store, StoreError};

/// How long the background refresh waits after the log grows, so that one
/// refresh covers a burst of writes.
const SETTLE: Duration = Duration::from_millis(100);

/// How often, at most, [`keep_fresh`] renders and gzips the status while
/// the log keeps growing (and never more than a tenth of the time).
const BUSY_RENDER_EVERY: Duration = Duration::from_secs(1);

/// How often, at most, [`keep_fresh`] brings the document forward while
/// the log keeps growing. A machine's changes in a deploy come a fraction
/// of a second apart: brought forward every [`SETTLE`] or so, the document
/// read most machines several times over.
const BUSY_REFRESH_EVERY: Duration = Duration::from_secs(1);

/// The fewest changes after which the document is read whole again rather
/// than entity by entity.
const WHOLE_READ_AT_LEAST: usize = 4096;

/// A rendering gzipped: one gzip member's bytes in order, in pieces that
/// are its header, the rendering's segments deflated (shared with it, not
/// copied) and its end.
pub type Gzipped = Arc<[Bytes]>;

/// The status document and its newest rendering, shared by every request.
#[derive(Default)]
pub struct StatusCache {
    /// `None` until first read.
    document: Arc<Mutex<Option<StatusDocument>>>,
    /// The newest rendering and the revision it reflects.
    latest: Mutex<Option<(i64, Arc<Rendering>)>>,
    /// Held by whoever is bringing the document forward or rendering it.
    updating: tokio::sync::Mutex<()>,
    /// The newest rendering gzipped (in pieces: see [`Gzipped`]), and the
    /// revision it reflects.
    gzipped: Mutex<Option<(i64, Gzipped)>>,
    /// Held by whoever is compressing a rendering.
    compressing: tokio::sync::Mutex<()>,
    /// Whether any client has asked for the status gzipped.
    gzip_wanted: AtomicBool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Brings `document` up to the store's head (reading it whole if there is
/// none yet, or if most of it changed, in shares by `readers` at once).
fn bring_forward(
    document: &mut Option<StatusDocument>,
    store: &Store,
    cloud: &str,
    readers: usize,
) -> Result<(), StoreError> {
    if let Some(current) = document.as_mut() {
        let most = WHOLE_READ_AT_LEAST.max(current.len());
        if let Some(delta) = store.status_delta(current.revision(), most)? {
            current.apply(delta);
            return Ok(());
        }
    }
    // Let go of the old document before the new one is read.
    *document = None;
    let started = Instant::now();
    let shown = match store.status_shown_in_shares(readers)? {
        Some(shown) => shown,
        // A write came between the shares.
        None => store.status_shown()?,
    };
    let read = started.elapsed();
    let mut whole = StatusDocument::new(cloud);
    whole.apply(shown);
    log::debug!(
        "status read whole at revision {}: {} machines and units read in {:.1} ms, made into pieces in {:.1} ms",
        whole.revision(),
        whole.len(),
        read.as_secs_f64() * 1e3,
        (started.elapsed() - read).as_secs_f64() * 1e3,
    );
    *document = Some(whole);
    Ok(())
}

/// Brings `document` up to the store's head and renders it, sharing the
/// segments of `previous` that come out the same: the revision rendered
/// and its rendering.
fn bring_forward_and_render(
    document: &mut Option<StatusDocument>,
    store: &Store,
    cloud: &str,
    previous: Option<Arc<Rendering>>,
    readers: usize,
) -> Result<(i64, Arc<Rendering>), StoreError> {
    let started = Instant::now();
    bring_forward(document, store, cloud, readers)?;
    let current = document
        .as_ref()
        .ok_or_else(|| StoreError::Invariant("no status document".into()))?;
    let brought = started.elapsed();
    let rendering = current.render_segments(previous);
    log::debug!(
        "status at revision {}: brought forward in {:.1} ms, rendered in {:.1} ms ({} of {} segments new)",
        current.revision(),
        brought.as_secs_f64() * 1e3,
        (started.elapsed() - brought).as_secs_f64() * 1e3,
        rendering.fresh(),
        rendering.segments(),
    );
    Ok((current.revision(), Arc::new(rendering)))
}

impl StatusCache {
    /// A cache whose document is already read whole from `store` and
    /// rendered. The controller prepares it while its other parts start, so
    /// the first status request after a start finds it ready.
    ///
    /// # Errors
    ///
    /// The store's error if the state cannot be read.
    pub fn prepared(store: &Store, cloud: &str) -> Result<StatusCache, StoreError> {
        let mut document = None;
        // Nothing writes yet, so the state is read on every core.
        let latest = bring_forward_and_render(&mut document, store, cloud, None, cores::count())?;
        Ok(StatusCache {
            document: Arc::new(Mutex::new(document)),
            latest: Mutex::new(Some(latest)),
            ..StatusCache::default()
        })
    }

    /// The revision of the newest rendering kept, if any.
    pub fn rendered_revision(&self) -> Option<i64> {
        lock(&self.latest).as_ref().map(|(revision, _)| *revision)
    }

    /// The status JSON as of the store's head (or later), in segments.
    ///
    /// # Errors
    ///
    /// The store's error if the state cannot be read.
    pub async fn get(&self, store: &Store, cloud: &str) -> Result<Arc<Rendering>, StoreError> {
        Ok(self.rendered(store, cloud).await?.1)
    }

    /// The status JSON as of the store's head (or later), as one gzip
    /// member (in pieces).
    ///
    /// # Errors
    ///
    /// The store's error if the state cannot be read.
    pub async fn get_gzip(&self, store: &Store, cloud: &str) -> Result<Gzipped, StoreError> {
        self.gzip_wanted.store(true, Ordering::Relaxed);
        if let Some((_, member)) = kept_at_least(&self.gzipped, store.revision()) {
            return Ok(member);
        }
        let (revision, body) = self.rendered(store, cloud).await?;
        let _compressing = self.compressing.lock().await;
        // Someone may have compressed this rendering while we waited.
        if let Some((_, member)) = kept_at_least(&self.gzipped, revision) {
            return Ok(member);
        }
        // As with the rendering: an older member goes first.
        lock(&self.gzipped).take();
        let member = cores::aside(move || {
            let started = Instant::now();
            let member = body.gzip(cores::count());
            log::debug!(
                "status at revision {revision}: gzipped in {:.1} ms",
                started.elapsed().as_secs_f64() * 1e3
            );
            Ok(Gzipped::from(member))
        })
        .await?;
        keep_newer(&self.gzipped, revision, &member);
        Ok(member)
    }

    /// The newest rendering, at the store's head or later: the one kept,
    /// or one made now (once, for every request waiting on it).
    async fn rendered(
        &self,
        store: &Store,
        cloud: &str,
    ) -> Result<(i64, Arc<Rendering>), StoreError> {
        let wanted = store.revision();
        if let Some(kept) = kept_at_least(&self.latest, wanted) {
            return Ok(kept);
        }
        let _updating = self.updating.lock().await;
        // Someone may have rendered what we need while we waited.
        if let Some(kept) = kept_at_least(&self.latest, wanted) {
            return Ok(kept);
        }
        // What is kept is older than any request from now on wants: the
        // new rendering shares what of it comes out the same, and it goes
        // once that is made. (Responses still sending it hold their own
        // reference.)
        let previous = lock(&self.latest).take().map(|(_, rendering)| rendering);
        let document = Arc::clone(&self.document);
        let store = store.clone();
        let cloud = cloud.to_string();
        let (revision, body) = cores::aside(move || {
            bring_forward_and_render(&mut lock(&document), &store, &cloud, previous, 1)
        })
        .await?;
        keep_newer(&self.latest, revision, &body);
        Ok((revision, body))
    }

    /// The part of the status `filter` selects, as of the store's head (or
    /// later): rendered from the document for each request (a part is not
    /// kept), at a cost in proportion to what it shows.
    ///
    /// # Errors
    ///
    /// The store's error if the state cannot be read; inside it, the
    /// filter's when it names what the model does not have.
    pub async fn get_filtered(
        &self,
        store: &Store,
        cloud: &str,
        filter: StatusFilter,
    ) -> Result<Result<Bytes, FilterError>, StoreError> {
        self.read_fresh(store, cloud, move |document| {
            document.render_filtered(&filter).map(Bytes::from)
        })
        .await
    }

    /// How many machines are in each state and what they cost, as of the
    /// store's head (or later): read from the document, so a scrape costs
    /// what changed since the last one, not a count of every machine.
    ///
    /// # Errors
    ///
    /// The store's error if the state cannot be read.
    pub async fn machines_by_state(
        &self,
        store: &Store,
        cloud: &str,
    ) -> Result<MachineFigures, StoreError> {
        self.read_fresh(store, cloud, |document| MachineFigures {
            by_state: MachineState::ALL
                .iter()
                .map(|state| (*state, document.machines_in(*state)))
                .collect(),
            hourly_cost: document.hourly_cost(),
        })
        .await
    }

    /// `read` of the document brought up to the store's head, on a
    /// blocking thread, while no one else brings it forward.
    async fn read_fresh<T: Send + 'static>(
        &self,
        store: &Store,
        cloud: &str,
        read: impl FnOnce(&StatusDocument) -> T + Send + 'static,
    ) -> Result<T, StoreError> {
        let _updating = self.updating.lock().await;
        let document = Arc::clone(&self.document);
        let store = store.clone();
        let cloud = cloud.to_string();
        cores::aside(move || {
            let mut document = lock(&document);
            bring_forward(&mut document, &store, &cloud, 1)?;
            let current = document
                .as_ref()
                .ok_or_else(|| StoreError::Invariant("no status document".into()))?;
            Ok(read(current))
        })
        .await
    }

    /// Brings the document up to the store's head without rendering it
    /// (reading it whole the first time). A failure is logged; the next
    /// request or refresh reads again.
    pub async fn refresh(&self, store: &Store, cloud: &str) {
        let _updating = self.updating.lock().await;
        let document = Arc::clone(&self.document);
        let reader = store.clone();
        let cloud = cloud.to_string();
        let refreshed =
            cores::aside(move || bring_forward(&mut lock(&document), &reader, &cloud, 1)).await;
        if let Err(e) = refreshed {
            log::warn!("cannot bring the status document forward: {e}");
        }
    }
}

/// What `kept` holds if it reflects `revision` or a later one.
fn kept_at_least<T: Clone>(kept: &Mutex<Option<(i64, T)>>, revision: i64) -> Option<(i64, T)> {
    lock(kept)
        .as_ref()
        .filter(|(at, _)| *at >= revision)
        .cloned()
}

/// Keeps `body` of `revision` in `kept` unless it holds a later one.
fn keep_newer<T: Clone>(kept: &Mutex<Option<(i64, T)>>, revision: i64, body: &T) {
    let mut kept = lock(kept);
    if kept.as_ref().is_none_or(|(at, _)| *at < revision) {
        *kept = Some((revision, body.clone()));
    }
}

/// What `/metrics` shows of the machines: how many are in each state, and
/// what their instances cost an hour together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineFigures {
    pub by_state: Vec<(MachineState, usize)>,
    pub hourly_cost: HourlyPrice,
}

/// What [`keep_fresh`] needs of the server's shared state: the cache, the
/// store it reads and the cloud it names.
pub struct Fresh<'a> {
    pub cache: &'a StatusCache,
    pub store: &'a Store,
    pub cloud: &'a str,
}

/// Keeps `shared`'s status document fresh: reads it at once, brings it
/// forward a moment after the change log grows (at most once a second
/// while it keeps growing), and renders it (and gzips it, once a client
/// has asked for that) once the log has been quiet for that moment, so
/// that the next request finds it ready. While the log keeps growing and
/// clients take gzip, it also renders and gzips every
/// `BUSY_RENDER_EVERY` or so, so that the rendering after a long burst
/// shares most of its segments with one already compressed. `parts` says
/// where in `shared` the cache, store and cloud are.
/// Ends when the server has let go of `shared` or the store has stopped.
pub async fn keep_fresh<S>(shared: Weak<S>, parts: fn(&S) -> Fresh<'_>) {
    let Some(mut head) = shared.upgrade().map(|s| parts(&s).store.watch_revision()) else {
        return;
    };
    let mut rendered_at = Instant::now();
    let mut render_took = Duration::ZERO;
    let mut refreshed_at: Option<Instant> = None;
    loop {
        let Some(current) = shared.upgrade() else {
            return;
        };
        let Fresh {
            cache,
            store,
            cloud,
        } = parts(&current);
        if refreshed_at.is_none_or(|at| at.elapsed() >= BUSY_REFRESH_EVERY) {
            cache.refresh(store, cloud).await;
            refreshed_at = Some(Instant::now());
        }
        let quiet = tokio::time::timeout(SETTLE, head.changed()).await;
        let gzip_wanted = cache.gzip_wanted.load(Ordering::Relaxed);
        match quiet {
            Ok(Err(_)) => return,
            Ok(Ok(())) => {
                // A long burst of writes (a large deploy): a gzipped
                // rendering now and then, so that the one after the burst
                // compresses only what changed since, not the whole.
                if gzip_wanted && rendered_at.elapsed() >= BUSY_RENDER_EVERY.max(render_took * 10) {
                    let started = Instant::now();
                    if let Err(e) = cache.get_gzip(store, cloud).await {
                        log::warn!("cannot render the status: {e}");
                    }
                    rendered_at = Instant::now();
                    render_took = rendered_at - started;
                    // The rendering brought the document forward too.
                    refreshed_at = Some(rendered_at);
                }
            }
            Err(_) => {
                let rendered = if gzip_wanted {
                    cache.get_gzip(store, cloud).await.map(drop)
                } else {
                    cache.get(store, cloud).await.map(drop)
                };
                if let Err(e) = rendered {
                    log::warn!("cannot render the status: {e}");
                }
                rendered_at = Instant::now();
                refreshed_at = None;
                drop(current);
                if head.changed().await.is_err() {
                    return;
                }
            }
        }
        tokio::time::sleep(SETTLE).await;
        head.mark_unchanged();
    }
}
