//! Connections: one diesel connection type over both backends, the r2d2
//! pool, SQLite's per-connection settings, and the embedded migrations.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::{PgConnection, SqliteConnection};
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};

use crate::store::checkpointer::WRITER_CHECKPOINT_PAGES;
use crate::store::error::StoreError;

/// How long an SQLite connection waits for another writer's lock before it
/// reports `database is locked`.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a caller waits for a pooled connection before giving up: long
/// enough to ride out a burst of readers, short enough that while the
/// database is away a request hears 503 promptly instead of hanging.
pub const POOL_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a PostgreSQL session may sit inside a transaction without
/// sending anything before the server ends it (and lets go of its locks).
/// berth's transactions send their statements back to back.
pub const POSTGRES_IDLE_IN_TRANSACTION: Duration = Duration::from_secs(5);

/// Rows per multi-row insert: well under both backends' limits on bound
/// parameters (SQLite 32,766, PostgreSQL 65,535) at a dozen columns.
pub(crate) const ROWS_PER_INSERT: usize = 1000;

const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");
const POSTGRES_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");

/// A connection to either backend. Queries written once against it run on
/// both; the few places that differ match on the variant.
#[derive(diesel::MultiConnection)]
pub enum Conn {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

impl Conn {
    /// The PostgreSQL connection, for `what` only PostgreSQL does (binding
    /// arrays).
    ///
    /// # Errors
    ///
    /// On SQLite, an invariant error: `what` is done only on PostgreSQL.
    pub(crate) fn postgres(&mut self, what: &str) -> Result<&mut PgConnection, StoreError> {
        match self {
            Conn::Postgres(conn) => Ok(conn),
            Conn::Sqlite(_) => Err(StoreError::Invariant(format!("{what} only on PostgreSQL"))),
        }
    }
}

/// Runs `$body` with `$c` bound to `$conn`'s own backend connection: for
/// the statements diesel builds per backend (multi-row inserts,
/// `RETURNING`, `ON CONFLICT`, hand-written queries).
macro_rules! per_backend {
    ($conn:expr, $c:ident => $body:expr) => {
        match $conn {
            $crate::store::db::Conn::Sqlite($c) => $body,
            $crate::store::db::Conn::Postgres($c) => $body,
        }
    };
}
pub(crate) use per_backend;

/// A statement of fixed text that SQLite prepares once per connection and
/// keeps: `batch_execute` and `sql_query` have SQLite parse their text on
/// every call, which the writer's savepoint around each operation did
/// hundreds of thousands of times in a large deploy.
macro_rules! kept_sqlite_statement {
    ($(#[$doc:meta])* $name:ident = $sql:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, diesel::query_builder::QueryId)]
        pub(crate) struct $name;

        impl diesel::query_builder::QueryFragment<diesel::sqlite::Sqlite> for $name {
            fn walk_ast<'b>(
                &'b self,
                mut out: diesel::query_builder::AstPass<'_, 'b, diesel::sqlite::Sqlite>,
            ) -> QueryResult<()> {
                out.push_sql($sql);
                Ok(())
            }
        }

        impl RunQueryDsl<SqliteConnection> for $name {}
    };
}
pub(crate) use kept_sqlite_statement;

/// The sizes of the multi-row inserts [`insert_in_kept_sizes`] makes on
/// SQLite, the largest first (then single rows).
const LARGE_INSERT: usize = 256;
const SMALL_INSERT: usize = 16;

/// Inserts `rows` into `table` on SQLite in inserts of [`LARGE_INSERT`]
/// rows, then [`SMALL_INSERT`], then one, whose statements the connection
/// keeps prepared. A multi-row insert of any other size is a statement of
/// its own, which SQLite parses afresh: the change log's rows were parsed
/// on every commit of the writer, 10 % of its time in a deploy of 100,000
/// units, 7.6 % in these sizes.
///
/// # Errors
///
/// The database's.
pub(crate) fn insert_in_kept_sizes<T, R>(
    conn: &mut SqliteConnection,
    table: T,
    rows: Vec<R>,
) -> Result<(), StoreError>
where
    T: diesel::Table + Copy,
    [R; LARGE_INSERT]: Insertable<T>,
    [R; SMALL_INSERT]: Insertable<T>,
    [R; 1]: Insertable<T>,
    diesel::query_builder::InsertStatement<T, <[R; LARGE_INSERT] as Insertable<T>>::Values>:
        diesel::query_dsl::methods::ExecuteDsl<SqliteConnection>,
    diesel::query_builder::InsertStatement<T, <[R; SMALL_INSERT] as Insertable<T>>::Values>:
        diesel::query_dsl::methods::ExecuteDsl<SqliteConnection>,
    diesel::query_builder::InsertStatement<T, <[R; 1] as Insertable<T>>::Values>:
        diesel::query_dsl::methods::ExecuteDsl<SqliteConnection>,
{
    let mut left = rows.len();
    let mut rows = rows.into_iter();
    while left > 0 {
        left -= if left >= LARGE_INSERT {
            insert_exactly::<T, R, LARGE_INSERT>(conn, table, &mut rows)?
        } else if left >= SMALL_INSERT {
            insert_exactly::<T, R, SMALL_INSERT>(conn, table, &mut rows)?
        } else {
            insert_exactly::<T, R, 1>(conn, table, &mut rows)?
        };
    }
    Ok(())
}

/// Inserts the next `N` of `rows` (there must be as many) into `table` in
/// one statement; returns `N`.
fn insert_exactly<T, R, const N: usize>(
    conn: &mut SqliteConnection,
    table: T,
    rows: &mut impl Iterator<Item = R>,
) -> Result<usize, StoreError>
where
    T: diesel::Table,
    [R; N]: Insertable<T>,
    diesel::query_builder::InsertStatement<T, <[R; N] as Insertable<T>>::Values>:
        diesel::query_dsl::methods::ExecuteDsl<SqliteConnection>,
{
    let chunk: Vec<R> = rows.take(N).collect();
    let chunk = <[R; N]>::try_from(chunk).map_err(|short| {
        StoreError::Invariant(format!("{} rows left for an insert of {N}", short.len()))
    })?;
    diesel::query_dsl::methods::ExecuteDsl::execute(
        diesel::insert_into(table).values(chunk),
        conn,
    )?;
    Ok(N)
}

/// `column IN (...)` over a list of keys, as a filter the connection keeps
/// prepared. diesel's own list (`eq_any`) is fine on PostgreSQL, where it
/// is one array bound to `= ANY(...)`; on SQLite it is one `?` per key,
/// and diesel prepares such a statement afresh on every call: a read of a
/// thousand machines parsed its statement of a thousand parameters each
/// time. Here, on SQLite, the list is bound at one of a few lengths
/// ([`padded_len`]), the last key repeated to fill it (which matches
/// nothing more), so each length is prepared once and kept. Kept
/// statements hold memory in proportion to their parameters: the engine's
/// reads of machines (lists of up to [`KEYS_PER_LIST`]) use this; the status's
/// reads by key keep diesel's lists, as keeping theirs on every reader
/// connection held about 10 MB more at 100,000 machines.
pub(crate) struct AmongKeys<'a, C: Expression<SqlType = diesel::sql_types::Text>> {
    column: C,
    keys: &'a [String],
    any: diesel::dsl::EqAny<C, &'a [String]>,
}

impl<'a, C> AmongKeys<'a, C>
where
    C: Expression<SqlType = diesel::sql_types::Text> + Copy,
{
    /// `column` is one of `keys` (at most [`KEYS_PER_LIST`] of them, and at
    /// least one).
    pub(crate) fn new(column: C, keys: &'a [String]) -> Self {
        debug_assert!(!keys.is_empty() && keys.len() <= KEYS_PER_LIST);
        AmongKeys {
            column,
            keys,
            any: column.eq_any(keys),
        }
    }
}

/// Most keys one [`AmongKeys`] list binds (SQLite's limit is 32,766
/// parameters).
pub(crate) const KEYS_PER_LIST: usize = 1024;

/// The length a list of `n` keys is bound at on SQLite: the next power of
/// four, so that a connection keeps at most six statements per query (each
/// kept statement holds memory in proportion to its parameters).
pub(crate) fn padded_len(n: usize) -> usize {
    let mut len = 1;
    while len < n {
        len *= 4;
    }
    len
}

impl<C: Expression<SqlType = diesel::sql_types::Text>> Expression for AmongKeys<'_, C> {
    type SqlType = diesel::sql_types::Bool;
}

impl<C: Expression<SqlType = diesel::sql_types::Text>, QS> diesel::AppearsOnTable<QS>
    for AmongKeys<'_, C>
where
    C: diesel::AppearsOnTable<QS>,
{
}

impl<C: Expression<SqlType = diesel::sql_types::Text>, QS> diesel::SelectableExpression<QS>
    for AmongKeys<'_, C>
where
    C: diesel::SelectableExpression<QS>,
{
}

impl<C: Expression<SqlType = diesel::sql_types::Text>> diesel::expression::ValidGrouping<()>
    for AmongKeys<'_, C>
{
    type IsAggregate = diesel::expression::is_aggregate::Never;
}

impl<C: Expression<SqlType = diesel::sql_types::Text>> diesel::query_builder::QueryId
    for AmongKeys<'_, C>
{
    type QueryId = ();
    // Keyed by its text, which varies with the list's length.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<'a, C> diesel::query_builder::QueryFragment<MultiBackend> for AmongKeys<'a, C>
where
    C: Expression<SqlType = diesel::sql_types::Text>
        + diesel::query_builder::QueryFragment<MultiBackend>,
    diesel::dsl::EqAny<C, &'a [String]>: diesel::query_builder::QueryFragment<MultiBackend>,
{
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, MultiBackend>,
    ) -> QueryResult<()> {
        if !matches!(out.backend(), MultiBackend::Sqlite(_)) {
            return self.any.walk_ast(out);
        }
        let Some(last) = self.keys.last() else {
            // Never made empty; as `eq_any` does, it matches nothing.
            out.push_sql("1=0");
            return Ok(());
        };
        self.column.walk_ast(out.reborrow())?;
        out.push_sql(" IN (");
        for i in 0..padded_len(self.keys.len()) {
            if i > 0 {
                out.push_sql(", ");
            }
            let key = self.keys.get(i).unwrap_or(last);
            out.push_bind_param::<diesel::sql_types::Text, _>(key)?;
        }
        out.push_sql(")");
        Ok(())
    }
}

/// Where the state lives, parsed from `--database-url`.
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// A SQLite file (created if missing).
    Sqlite(PathBuf),
    /// A PostgreSQL connection URL (`postgres://...`).
    Postgres(String),
}

impl DatabaseUrl {
    /// `postgres://` and `postgresql://` URLs name a PostgreSQL database;
    /// `sqlite://PATH` or a bare path names a SQLite file.
    ///
    /// # Errors
    ///
    /// [`StoreError::BadUrl`] for an empty string or another scheme.
    pub fn parse(url: &str) -> Result<DatabaseUrl, StoreError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(DatabaseUrl::Postgres(url.to_string()));
        }
        let path = url.strip_prefix("sqlite://").unwrap_or(url);
        if path.is_empty() || (path.contains("://") && !url.starts_with("sqlite://")) {
            return Err(StoreError::BadUrl(url.to_string()));
        }
        Ok(DatabaseUrl::Sqlite(PathBuf::from(path)))
    }

    pub fn is_sqlite(&self) -> bool {
        matches!(self, DatabaseUrl::Sqlite(_))
    }
}

impl fmt::Debug for DatabaseUrl {
    /// Never prints a PostgreSQL password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DatabaseUrl::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
            DatabaseUrl::Postgres(url) => f.write_str(&redact_password(url)),
        }
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) if userinfo.contains(':') => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}")
        }
        _ => url.to_string(),
    }
}

/// Sets SQLite's process-wide configuration, once, before its first
/// connection opens (SQLite takes it only before it initializes):
///
/// - multi-thread mode: no connection is used by two threads at once (a
///   connection is the writer's own, or lent by the pool to one thread),
///   so SQLite's own lock around every call on a connection (each step,
///   each bound value, each column read) guards nothing;
/// - no memory statistics, which take a process-wide lock on every
///   allocation SQLite makes.
///
/// Together these locks were about an eighth of the store writer's time
/// during a deploy. Every SQLite connection berth opens (the store's, the
/// simulated cloud's ledger) calls this first. If SQLite was already
/// initialized (by another user in the same process), it keeps its
/// settings: they are safe, only slower.
pub(crate) fn configure_sqlite() {
    static CONFIGURED: std::sync::Once = std::sync::Once::new();
    CONFIGURED.call_once(|| {
        use libsqlite3_sys::{
            sqlite3_config, SQLITE_CONFIG_MEMSTATUS, SQLITE_CONFIG_MULTITHREAD, SQLITE_OK,
        };
        let off: std::ffi::c_int = 0;
        // SAFETY: each option is given the arguments it takes (none for
        // MULTITHREAD, one int for MEMSTATUS); called after SQLite has
        // initialized, sqlite3_config changes nothing and returns
        // SQLITE_MISUSE.
        let (threads, memstatus) = unsafe {
            (
                sqlite3_config(SQLITE_CONFIG_MULTITHREAD),
                sqlite3_config(SQLITE_CONFIG_MEMSTATUS, off),
            )
        };
        if threads != SQLITE_OK || memstatus != SQLITE_OK {
            log::debug!(
                "SQLite was initialized before the store opened it: it keeps its default locking"
            );
        }
    });
}

/// Opens connections of the right backend for a [`DatabaseUrl`].
#[derive(Clone, Debug)]
pub struct Manager {
    url: DatabaseUrl,
    /// Whether the connections are the readers' (see [`Manager::readers`]).
    readers: bool,
}

impl Manager {
    /// Connections for the writer.
    pub fn new(url: DatabaseUrl) -> Manager {
        Manager {
            url,
            readers: false,
        }
    }

    /// Connections for the readers. On PostgreSQL a reader plans every
    /// statement for the values it is given and the table as it is now,
    /// never from a plan kept since the statement was first prepared: a
    /// plan made while a fresh database's `units` was small scanned the
    /// whole table for each list of machine ids, and the engine's reads of
    /// a 100,000-unit deploy took 0.5-1.8 s each until the server's next
    /// ANALYZE. The writer keeps its plans: its statements find rows by
    /// key, and it runs far more of them.
    pub fn readers(url: DatabaseUrl) -> Manager {
        Manager { url, readers: true }
    }

    /// The database these connections are to.
    pub fn url(&self) -> &DatabaseUrl {
        &self.url
    }

    /// Opens one connection, with SQLite's settings applied.
    pub fn connect(&self) -> Result<Conn, diesel::ConnectionError> {
        match &self.url {
            DatabaseUrl::Sqlite(path) => {
                configure_sqlite();
                let mut conn = SqliteConnection::establish(&path.to_string_lossy())?;
                // WAL lets readers (status) run while a writer commits;
                // NORMAL sync is durable across process crashes in WAL mode.
                conn.batch_execute(&format!(
                    "PRAGMA busy_timeout = {};
                     PRAGMA journal_mode = WAL;
                     PRAGMA synchronous = NORMAL;
                     PRAGMA foreign_keys = ON;",
                    SQLITE_BUSY_TIMEOUT.as_millis()
                ))
                .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
                if !self.readers {
                    // Every operation of a batch runs in its own savepoint,
                    // and SQLite keeps the pages a savepoint may have to
                    // restore in a statement journal that spills to a
                    // temporary file past 64 KiB: a batch of a thousand
                    // saves wrote it with a system call per page. In
                    // memory it lives only until its operation ends, and
                    // holds a copy of every page the operation changed:
                    // an operation that changes rows by the hundred
                    // thousand is split (as `Store::agents_alive` is). The
                    // log is checkpointed beside the writer, and in its
                    // commits only past a larger size (see
                    // `crate::store::checkpointer`).
                    conn.batch_execute(&format!(
                        "PRAGMA temp_store = MEMORY;
                         PRAGMA wal_autocheckpoint = {WRITER_CHECKPOINT_PAGES};"
                    ))
                    .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
                }
                Ok(Conn::Sqlite(conn))
            }
            DatabaseUrl::Postgres(url) => {
                let mut conn = PgConnection::establish(url)?;
                // A controller stopped in the middle of a transaction (a
                // paused process, a frozen VM) would hold its row locks,
                // and every other controller would wait on them: the server
                // ends such a session instead, and the controller, when it
                // wakes, connects again.
                conn.batch_execute(&format!(
                    "SET idle_in_transaction_session_timeout = {}",
                    POSTGRES_IDLE_IN_TRANSACTION.as_millis()
                ))
                .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
                if self.readers {
                    conn.batch_execute("SET plan_cache_mode = force_custom_plan")
                        .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
                }
                Ok(Conn::Postgres(conn))
            }
        }
    }
}

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = diesel::r2d2::Error;

    fn connect(&self) -> Result<Conn, Self::Error> {
        Manager::connect(self).map_err(diesel::r2d2::Error::ConnectionError)
    }

    fn is_valid(&self, conn: &mut Conn) -> Result<(), Self::Error> {
        use diesel::r2d2::R2D2Connection;
        conn.ping().map_err(diesel::r2d2::Error::QueryError)
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        use diesel::r2d2::R2D2Connection;
        conn.is_broken()
    }
}

pub type Pool = r2d2::Pool<Manager>;

/// Builds a pool of `size` connections.
pub fn pool(url: &DatabaseUrl, size: u32) -> Result<Pool, StoreError> {
    r2d2::Pool::builder()
        .max_size(size)
        .connection_timeout(POOL_TIMEOUT)
        .build(Manager::readers(url.clone()))
        .map_err(|e| StoreError::Connect(e.to_string()))
}

/// Brings the schema up to date, saying so in the log when there was
/// anything to do (a migration may rewrite a large table once).
pub fn run_migrations(conn: &mut Conn) -> Result<(), StoreError> {
    let started = std::time::Instant::now();
    let result = match conn {
        Conn::Sqlite(c) => c.run_pending_migrations(SQLITE_MIGRATIONS),
        Conn::Postgres(c) => c.run_pending_migrations(POSTGRES_MIGRATIONS),
    };
    let applied = result.map_err(|e| StoreError::Migration(e.to_string()))?;
    if let Some(last) = applied.last() {
        log::info!(
            "store: {} schema migration(s) applied in {:.1} s, up to {last}",
            applied.len(),
            started.elapsed().as_secs_f64(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::schema::changes;
    use crate::store::Store;
    use rusty_fork::rusty_fork_test;

    rusty_fork_test! {
        /// In a process of its own, so that nothing else in it has used
        /// SQLite first: SQLite takes its configuration only before it
        /// initializes.
        #[test]
        fn sqlite_is_configured_before_the_store_first_opens_it() {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(&DatabaseUrl::Sqlite(dir.path().join("berth.db"))).unwrap();
            assert!(store.machines().unwrap().is_empty());
            // SQLite counts the memory it uses only with its memory
            // statistics on; the store turned them off with multi-thread
            // mode, before SQLite's first use.
            // SAFETY: a plain read of SQLite's counter.
            let counted = unsafe { libsqlite3_sys::sqlite3_memory_used() };
            assert_eq!(counted, 0);
        }
    }

    #[test]
    fn key_lists_are_bound_at_powers_of_four_up_to_the_longest_list() {
        let lengths: Vec<usize> = [0, 1, 2, 4, 5, 17, 64, 65, 256, 257, 1000, 1024]
            .into_iter()
            .map(padded_len)
            .collect();
        assert_eq!(
            lengths,
            [1, 1, 4, 4, 16, 64, 64, 256, 256, 1024, 1024, 1024]
        );
        assert_eq!(padded_len(KEYS_PER_LIST), KEYS_PER_LIST);
    }

    /// The indexes SQLite keeps on the change log.
    fn change_log_indexes(conn: &mut SqliteConnection) -> Vec<String> {
        #[derive(QueryableByName)]
        struct Named {
            #[diesel(sql_type = diesel::sql_types::Text)]
            name: String,
        }
        diesel::sql_query(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'changes'",
        )
        .load::<Named>(conn)
        .unwrap()
        .into_iter()
        .map(|n| n.name)
        .collect()
    }

    #[test]
    fn an_sqlite_change_log_written_before_it_was_keyed_by_revision_is_kept_whole_and_in_order() {
        const KEYED: &str = "2026-11-27-000002_change_log_keyed_by_revision";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("berth.db");
        {
            // A store as the migrations before left it, with changes in it.
            let mut conn = SqliteConnection::establish(path.to_str().unwrap()).unwrap();
            while conn
                .pending_migrations(SQLITE_MIGRATIONS)
                .unwrap()
                .first()
                .is_some_and(|next| next.name().to_string() != KEYED)
            {
                conn.run_next_migration(SQLITE_MIGRATIONS).unwrap();
            }
            assert_eq!(
                change_log_indexes(&mut conn).len(),
                1,
                "the revision's own index"
            );
            conn.batch_execute(
                "INSERT INTO changes (revision, entity, entity_id, change, detail, origin, at_ms) VALUES
                     (3, 'machine', '0', 'updated', 'state=allocating', 'engine', 30),
                     (1, 'zone', 'sim-a', 'created', 'available=true', 'user', 10),
                     (2, 'machine', '0', 'created', 'state=pending', 'user', 20);
                 UPDATE log_head SET revision = 3;",
            )
            .unwrap();
        }

        let store = Store::open(&DatabaseUrl::Sqlite(path)).unwrap();
        let kept: Vec<(i64, String, String, i64)> = store
            .changes_since(0, 10)
            .unwrap()
            .into_iter()
            .map(|c| (c.revision, c.id, c.detail, c.at_ms))
            .collect();
        assert_eq!(
            kept,
            [
                (1, "sim-a".to_string(), "available=true".to_string(), 10),
                (2, "0".to_string(), "state=pending".to_string(), 20),
                (3, "0".to_string(), "state=allocating".to_string(), 30),
            ]
        );
        assert_eq!(store.changes_since(2, 10).unwrap().len(), 1);
        let (indexes, keyed_by_revision) = store
            .read(|conn| match conn {
                Conn::Sqlite(c) => {
                    let keyed: i64 = diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
                        "(SELECT count(*) FROM changes WHERE rowid = revision)",
                    ))
                    .get_result(c)?;
                    Ok((change_log_indexes(c), keyed))
                }
                Conn::Postgres(_) => unreachable!("an SQLite store"),
            })
            .unwrap();
        assert!(indexes.is_empty(), "no index beside the table: {indexes:?}");
        assert_eq!(keyed_by_revision, 3, "each change's row id is its revision");
    }

    /// A change-log row for [`insert_in_kept_sizes`]'s tests.
    fn change_row(
        revision: i64,
    ) -> (
        diesel::dsl::Eq<changes::revision, i64>,
        diesel::dsl::Eq<changes::entity_id, String>,
        diesel::dsl::Eq<changes::at_ms, i64>,
    ) {
        (
            changes::revision.eq(revision),
            changes::entity_id.eq(revision.to_string()),
            changes::at_ms.eq(revision * 10),
        )
    }

    #[test]
    fn rows_inserted_in_kept_sizes_are_every_row_once_in_order() {
        let mut conn = SqliteConnection::establish(":memory:").unwrap();
        conn.batch_execute(
            "CREATE TABLE changes (revision INTEGER PRIMARY KEY, entity TEXT NOT NULL DEFAULT 'machine', \
             entity_id TEXT NOT NULL, change TEXT NOT NULL DEFAULT 'updated', detail TEXT NOT NULL DEFAULT '', \
             origin TEXT NOT NULL DEFAULT 'user', at_ms BIGINT NOT NULL)",
        )
        .unwrap();
        let mut next = 1;
        // Around each size, and sizes that take all three.
        for count in [0, 1, 15, 16, 17, 255, 256, 257, 273, 529] {
            let rows: Vec<_> = (next..next + count).map(change_row).collect();
            insert_in_kept_sizes(&mut conn, changes::table, rows).unwrap();
            next += count;
        }
        let written: Vec<(i64, String, i64)> = changes::table
            .select((changes::revision, changes::entity_id, changes::at_ms))
            .order(changes::revision)
            .load(&mut conn)
            .unwrap();
        let expected: Vec<(i64, String, i64)> =
            (1..next).map(|r| (r, r.to_string(), r * 10)).collect();
        assert_eq!(written, expected);
    }

    #[test]
    fn an_insert_of_more_rows_than_are_left_is_refused_and_writes_nothing() {
        let mut conn = SqliteConnection::establish(":memory:").unwrap();
        conn.batch_execute(
            "CREATE TABLE changes (revision INTEGER PRIMARY KEY, entity_id TEXT NOT NULL, at_ms BIGINT NOT NULL)",
        )
        .unwrap();
        let mut three = (1..=3).map(change_row);
        let err = insert_exactly::<_, _, SMALL_INSERT>(&mut conn, changes::table, &mut three)
            .unwrap_err();
        assert!(
            err.to_string().contains("3 rows left for an insert of 16"),
            "{err}"
        );
        let written: i64 = changes::table.count().get_result(&mut conn).unwrap();
        assert_eq!(written, 0);
    }

    #[test]
    fn postgres_urls_name_postgres_and_anything_else_a_sqlite_file() {
        assert_eq!(
            DatabaseUrl::parse("postgres://u@h/db").unwrap(),
            DatabaseUrl::Postgres("postgres://u@h/db".into())
        );
        assert_eq!(
            DatabaseUrl::parse("postgresql://u@h/db").unwrap(),
            DatabaseUrl::Postgres("postgresql://u@h/db".into())
        );
        assert_eq!(
            DatabaseUrl::parse("sqlite:///tmp/x.db").unwrap(),
            DatabaseUrl::Sqlite("/tmp/x.db".into())
        );
        assert_eq!(
            DatabaseUrl::parse("berth.db").unwrap(),
            DatabaseUrl::Sqlite("berth.db".into())
        );
    }

    #[test]
    fn an_empty_or_foreign_url_is_refused() {
        assert!(DatabaseUrl::parse("").is_err());
        assert!(DatabaseUrl::parse("sqlite://").is_err());
        assert!(DatabaseUrl::parse("mysql://u@h/db").is_err());
    }

    #[test]
    fn a_postgres_password_is_never_printed() {
        let url = DatabaseUrl::parse("postgres://berth:s3cret@db:5432/berth").unwrap();
        assert_eq!(url.to_string(), "postgres://berth:***@db:5432/berth");
        assert!(!format!("{url:?}").contains("s3cret"));
    }
}
