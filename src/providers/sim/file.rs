//! The ledger's SQLite file: its own schema (not berth's store), opened
//! by one simulated cloud at a time.
//!
//! # Guarantees
//!
//! The file is held with SQLite's exclusive locking mode from open to close,
//! so two simulated clouds can never both keep an index of the same file
//! and drift apart: a second open waits for the first to close (a cloud
//! just dropped may be finishing a write), then fails with
//! [`SimError::LedgerInUse`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::SqliteConnection;

use crate::contracts::secrets::Secret;
use crate::domain::hardware::Hardware;
use crate::domain::instance::InstanceState;
use crate::providers::sim::error::SimError;
use crate::providers::sim::records::{
    tagged_machine, AgentState, Batch, LedgerEntry, Record, RngPosition, Tags, Values,
};

diesel::table! {
    /// The instances (the shared ledger's table has a `version` column
    /// besides, see `shared`).
    sim_instances (seq) {
        seq -> BigInt,
        id -> Text,
        tags -> Text,
        zone -> Text,
        instance_type -> Text,
        state -> Text,
        hardware -> Text,
        client_token -> Nullable<Text>,
        host_instance -> Nullable<Text>,
        agent_machine -> Nullable<Text>,
        one_time_password -> Nullable<Text>,
        agent -> Text,
        launched_at_ms -> BigInt,
        changed_at_ms -> BigInt,
    }
}

diesel::table! {
    sim_meta (key) {
        key -> Text,
        value -> Text,
    }
}

/// The ledger's tables. Instance ids and client tokens are unique, but the
/// file keeps no index to say so: ids are random, so each launch would
/// change a page of such an index at random, and every commit would write
/// hundreds of them to the log. The cloud's own index refuses a second
/// instance with either ([`super::ledger::Ledger`]), and a file read back
/// with two is refused. (Ledgers made before keep their indexes.)
const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS sim_instances (
        seq INTEGER PRIMARY KEY NOT NULL,
        id TEXT NOT NULL,
        tags TEXT NOT NULL,
        zone TEXT NOT NULL,
        instance_type TEXT NOT NULL,
        state TEXT NOT NULL,
        hardware TEXT NOT NULL,
        client_token TEXT,
        host_instance TEXT,
        agent_machine TEXT,
        one_time_password TEXT,
        agent TEXT NOT NULL,
        launched_at_ms INTEGER NOT NULL,
        changed_at_ms INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS sim_meta (
        key TEXT PRIMARY KEY NOT NULL,
        value TEXT NOT NULL
    );
";

/// How many pages the ledger's write-ahead log holds before a commit
/// copies them into the file (SQLite's default is 1,000). The cloud's
/// writes come in bursts that change the same pages again and again (new
/// instances go at the end of the table, and their states change soon
/// after): a longer log copies each page once for many commits. At most
/// 32 MiB of log on disk.
const LEDGER_CHECKPOINT_PAGES: u32 = 8192;

/// The `sim_meta` key of the generator's position (`seed:word_pos`).
pub(super) const RNG_KEY: &str = "rng";

#[derive(Queryable, Selectable, Insertable)]
#[diesel(table_name = sim_instances)]
#[diesel(check_for_backend(diesel::sqlite::Sqlite, diesel::pg::Pg))]
#[diesel(treat_none_as_default_value = false)]
pub(super) struct Row {
    seq: i64,
    id: String,
    tags: String,
    zone: String,
    instance_type: String,
    state: String,
    hardware: String,
    client_token: Option<String>,
    host_instance: Option<String>,
    agent_machine: Option<String>,
    one_time_password: Option<String>,
    agent: String,
    launched_at_ms: i64,
    changed_at_ms: i64,
}

/// A ledger file as it was opened: the file, and where the generator was.
/// Its instances are read next ([`LedgerFile::read_records`]).
pub(super) struct Opened {
    pub file: LedgerFile,
    pub rng: Option<RngPosition>,
}

/// An open ledger file.
pub(super) struct LedgerFile {
    conn: SqliteConnection,
    path: PathBuf,
}

impl LedgerFile {
    /// Opens (creating if missing) the ledger at `path`, waiting up to
    /// `wait` for another simulated cloud to let go of it, and reads where
    /// the generator was.
    ///
    /// # Errors
    ///
    /// [`SimError::LedgerInUse`] if another simulated cloud holds the file;
    /// [`SimError::Ledger`] if it cannot be opened or is not a ledger.
    pub fn open(path: &Path, wait: Duration) -> Result<Opened, SimError> {
        let failed = |reason: String| SimError::Ledger {
            path: path.to_path_buf(),
            reason,
        };
        crate::store::db::configure_sqlite();
        let mut conn = SqliteConnection::establish(&path.to_string_lossy())
            .map_err(|e| failed(e.to_string()))?;
        // Exclusive locking: the lock taken by `BEGIN EXCLUSIVE` below is
        // held until the connection closes. WAL with NORMAL sync is durable
        // across process crashes and needs no fsync per commit.
        let setup = conn.batch_execute(&format!(
            "PRAGMA busy_timeout = {};
             PRAGMA locking_mode = EXCLUSIVE;
             PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             PRAGMA wal_autocheckpoint = {LEDGER_CHECKPOINT_PAGES};
             BEGIN EXCLUSIVE;
             COMMIT;",
            wait.as_millis()
        ));
        if let Err(e) = setup {
            return Err(if is_busy(&e) {
                SimError::LedgerInUse {
                    path: path.to_path_buf(),
                }
            } else {
                failed(e.to_string())
            });
        }
        conn.batch_execute(SCHEMA)
            .map_err(|e| failed(e.to_string()))?;
        let rng = sim_meta::table
            .filter(sim_meta::key.eq(RNG_KEY))
            .select(sim_meta::value)
            .first::<String>(&mut conn)
            .optional()
            .map_err(|e| failed(e.to_string()))?
            .map(|text| {
                parse_rng(&text).ok_or_else(|| failed(format!("bad rng position {text:?}")))
            })
            .transpose()?;
        Ok(Opened {
            file: LedgerFile {
                conn,
                path: path.to_path_buf(),
            },
            rng,
        })
    }

    /// Where the file is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every instance the file holds, in launch order.
    ///
    /// # Errors
    ///
    /// [`SimError::LedgerRead`] if the file cannot be read or holds a row
    /// berth cannot read.
    pub fn read_records(&mut self) -> Result<Vec<Record>, SimError> {
        let failed = |reason: String| SimError::LedgerRead {
            path: self.path.clone(),
            reason,
        };
        // Each row becomes its record as it is read, into a list of the
        // exact size, and shares its tags with the record before it: with
        // a million instances, neither the rows, nor a list grown by
        // doubling, nor each record's own copy of the tags it has in
        // common with the others (about 210 MB) are held beside the
        // records.
        let count: i64 = sim_instances::table
            .count()
            .get_result(&mut self.conn)
            .map_err(|e| failed(e.to_string()))?;
        let mut records: Vec<Record> = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
        let mut values = Values::default();
        for row in sim_instances::table
            .order(sim_instances::seq.asc())
            .select(Row::as_select())
            .load_iter::<Row, diesel::connection::DefaultLoadingMode>(&mut self.conn)
            .map_err(|e| failed(e.to_string()))?
        {
            let row = row.map_err(|e| failed(e.to_string()))?;
            let mut record = row.into_record(&mut values).map_err(&failed)?;
            if let Some(last) = records.last() {
                record.entry.tags.share_with(&last.entry.tags);
            }
            records.push(record);
        }
        Ok(records)
    }

    /// Writes `batch` in one transaction.
    ///
    /// # Errors
    ///
    /// SQLite's error; the transaction is rolled back.
    pub fn write(&mut self, batch: &Batch) -> QueryResult<()> {
        // Statements of one text each, so the connection prepares each
        // once and keeps it: a row at a time, where a multi-row insert of
        // each batch's size was parsed every time, and diesel never keeps
        // its own `UPDATE`s prepared.
        self.conn.immediate_transaction(|conn| {
            for record in &batch.inserts {
                diesel::insert_into(sim_instances::table)
                    .values(Row::from_record(record))
                    .execute(conn)?;
            }
            for change in &batch.changes {
                SetInstanceState {
                    seq: to_i64(change.seq),
                    state: change.state.as_str(),
                    agent: change.agent.as_str(),
                    changed_at_ms: change.changed_at_ms,
                }
                .execute(conn)?;
            }
            if let Some(rng) = batch.rng {
                diesel::replace_into(sim_meta::table)
                    .values((
                        sim_meta::key.eq(RNG_KEY),
                        sim_meta::value.eq(format!("{}:{}", rng.seed, rng.word_pos)),
                    ))
                    .execute(conn)?;
            }
            Ok(())
        })
    }
}

/// A change to one instance's state, agent and time: one statement of one
/// text, so the connection prepares it once and keeps it.
struct SetInstanceState<'a> {
    seq: i64,
    state: &'a str,
    agent: &'a str,
    changed_at_ms: i64,
}

impl diesel::query_builder::QueryId for SetInstanceState<'_> {
    type QueryId = SetInstanceState<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl diesel::query_builder::QueryFragment<diesel::sqlite::Sqlite> for SetInstanceState<'_> {
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, diesel::sqlite::Sqlite>,
    ) -> QueryResult<()> {
        use diesel::sql_types::{BigInt, Text};
        out.push_sql("UPDATE sim_instances SET state = ");
        out.push_bind_param::<Text, _>(self.state)?;
        out.push_sql(", agent = ");
        out.push_bind_param::<Text, _>(self.agent)?;
        out.push_sql(", changed_at_ms = ");
        out.push_bind_param::<BigInt, _>(&self.changed_at_ms)?;
        out.push_sql(" WHERE seq = ");
        out.push_bind_param::<BigInt, _>(&self.seq)?;
        Ok(())
    }
}

impl<Conn> RunQueryDsl<Conn> for SetInstanceState<'_> {}

fn is_busy(e: &diesel::result::Error) -> bool {
    let text = e.to_string();
    text.contains("database is locked") || text.contains("database is busy")
}

pub(super) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(super) fn parse_rng(text: &str) -> Option<RngPosition> {
    let (seed, word_pos) = text.split_once(':')?;
    Some(RngPosition {
        seed: seed.parse().ok()?,
        word_pos: word_pos.parse().ok()?,
    })
}

impl Row {
    pub(super) fn from_record(r: &Record) -> Row {
        let e = &r.entry;
        Row {
            seq: to_i64(r.seq),
            id: e.id.clone(),
            // Maps of strings and plain structs always serialize.
            tags: serde_json::to_string(&e.tags).unwrap_or_default(),
            zone: e.zone.to_string(),
            instance_type: e.instance_type.to_string(),
            state: e.state.as_str().to_string(),
            hardware: serde_json::to_string(&*e.hardware).unwrap_or_default(),
            client_token: e.client_token.clone(),
            host_instance: e.host_instance.clone(),
            agent_machine: r.agent_machine.map(|m| m.to_string()),
            one_time_password: r.password.as_ref().map(|p| p.expose().to_string()),
            agent: e.agent.as_str().to_string(),
            launched_at_ms: e.launched_at_ms,
            changed_at_ms: r.changed_at_ms,
        }
    }

    /// The record this row holds, with `values`' copies of its zone,
    /// instance type and hardware.
    pub(super) fn into_record(self, values: &mut Values) -> Result<Record, String> {
        let bad = |what: &str, value: &str| {
            format!("instance {}: cannot read its {what} {value:?}", self.id)
        };
        let tags: Tags = serde_json::from_str::<BTreeMap<String, String>>(&self.tags)
            .map_err(|_| bad("tags", &self.tags))?
            .into();
        let hardware: Hardware =
            serde_json::from_str(&self.hardware).map_err(|_| bad("hardware", &self.hardware))?;
        let state = InstanceState::parse(&self.state).ok_or_else(|| bad("state", &self.state))?;
        let agent =
            AgentState::parse(&self.agent).ok_or_else(|| bad("agent state", &self.agent))?;
        let agent_machine = match &self.agent_machine {
            Some(m) => Some(m.parse().map_err(|_| bad("agent's machine", m))?),
            None => None,
        };
        let seq =
            u64::try_from(self.seq).map_err(|_| bad("sequence number", &self.seq.to_string()))?;
        Ok(Record {
            seq,
            entry: LedgerEntry {
                machine: tagged_machine(&tags),
                id: self.id,
                tags,
                zone: values.name(&self.zone),
                instance_type: values.name(&self.instance_type),
                state,
                hardware: values.hardware(hardware),
                client_token: self.client_token,
                host_instance: self.host_instance,
                launched_at_ms: self.launched_at_ms,
                agent,
            },
            agent_machine,
            password: self.one_time_password.map(Secret::new),
            changed_at_ms: self.changed_at_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::instance::InstanceState;
    use crate::domain::names::MachineId;
    use crate::providers::sim::records::{assert_shared_as_a_run, Change};
    use std::sync::Arc;

    fn record(seq: u64, id: &str) -> Record {
        Record {
            seq,
            entry: LedgerEntry {
                id: id.to_string(),
                machine: Some(MachineId::new(seq)),
                tags: BTreeMap::from([("berth-machine".to_string(), seq.to_string())]).into(),
                zone: "sim-a".into(),
                instance_type: "t3.large".into(),
                state: InstanceState::Pending,
                hardware: Arc::new(Hardware {
                    cores: Some(2),
                    zone: Some("sim-a".to_string()),
                    ..Hardware::default()
                }),
                client_token: Some(format!("token-{seq}")),
                host_instance: (seq == 1).then(|| "i-0".to_string()),
                launched_at_ms: 10,
                agent: AgentState::Waiting,
            },
            agent_machine: Some(MachineId::new(seq)),
            password: Some(Secret::new(format!("otp-{seq}"))),
            changed_at_ms: 10,
        }
    }

    #[test]
    fn a_ledger_file_reads_back_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let mut opened = LedgerFile::open(&path, Duration::ZERO).unwrap();
        assert_eq!(opened.file.read_records().unwrap(), []);
        assert_eq!(opened.rng, None);
        let rng = RngPosition {
            seed: 3,
            word_pos: u128::from(u64::MAX) + 7,
        };
        opened
            .file
            .write(&Batch {
                inserts: vec![record(0, "i-0"), record(1, "i-0-lxd-0")],
                changes: vec![],
                rng: Some(rng),
            })
            .unwrap();
        opened
            .file
            .write(&Batch {
                inserts: vec![],
                changes: vec![Change {
                    seq: 0,
                    state: InstanceState::Running,
                    agent: AgentState::Connected,
                    changed_at_ms: 11,
                }],
                rng: None,
            })
            .unwrap();
        drop(opened);

        let mut reopened = LedgerFile::open(&path, Duration::ZERO).unwrap();
        let mut expected = vec![record(0, "i-0"), record(1, "i-0-lxd-0")];
        expected[0].entry.state = InstanceState::Running;
        expected[0].entry.agent = AgentState::Connected;
        expected[0].changed_at_ms = 11;
        assert_eq!(reopened.file.read_records().unwrap(), expected);
        assert_eq!(reopened.rng, Some(rng));
    }

    #[test]
    fn records_read_back_share_the_tags_they_have_in_common() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let tagged = |seq: u64, model: &str| {
            let mut r = record(seq, &format!("i-{seq}"));
            r.entry.tags = BTreeMap::from([
                ("berth-controller".to_string(), "c-1".to_string()),
                ("berth-machine".to_string(), seq.to_string()),
                ("berth-model".to_string(), model.to_string()),
            ])
            .into();
            r
        };
        let written = vec![
            tagged(0, "m-1"),
            tagged(1, "m-1"),
            tagged(2, "m-1"),
            tagged(3, "m-2"),
        ];
        let mut opened = LedgerFile::open(&path, Duration::ZERO).unwrap();
        opened
            .file
            .write(&Batch {
                inserts: written.clone(),
                ..Batch::default()
            })
            .unwrap();
        drop(opened);

        let read = LedgerFile::open(&path, Duration::ZERO)
            .unwrap()
            .file
            .read_records()
            .unwrap();
        assert_eq!(read, written);
        // As they are read, records in a row hold one copy of what they
        // have in common, not one each until the ledger takes them in.
        assert_shared_as_a_run(std::array::from_fn(|i| &read[i].entry.tags));
    }

    /// The texts the connection newly kept prepared, in order.
    fn kept_statements(file: &mut LedgerFile) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
        use diesel::connection::{Instrumentation, InstrumentationEvent};
        struct Kept(std::sync::Arc<std::sync::Mutex<Vec<String>>>);
        impl Instrumentation for Kept {
            fn on_connection_event(&mut self, event: InstrumentationEvent<'_>) {
                if let InstrumentationEvent::CacheQuery { sql, .. } = event {
                    self.0.lock().unwrap().push(sql.to_string());
                }
            }
        }
        let kept = std::sync::Arc::default();
        file.conn
            .set_instrumentation(Kept(std::sync::Arc::clone(&kept)));
        kept
    }

    #[test]
    fn a_ledger_file_prepares_each_statement_once_however_many_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let mut opened = LedgerFile::open(&path, Duration::ZERO).unwrap();
        let kept = kept_statements(&mut opened.file);
        for round in 0..3u64 {
            // Batches of different sizes, as launches and their changes come.
            let first = round * 10;
            opened
                .file
                .write(&Batch {
                    inserts: (first..first + 1 + round)
                        .map(|seq| record(seq, &format!("i-{seq}")))
                        .collect(),
                    changes: (first..first + 1 + round)
                        .map(|seq| Change {
                            seq,
                            state: InstanceState::Running,
                            agent: AgentState::Connected,
                            changed_at_ms: 11,
                        })
                        .collect(),
                    rng: None,
                })
                .unwrap();
        }
        let kept = kept.lock().unwrap();
        let kinds: Vec<&str> = kept
            .iter()
            .map(|sql| sql.split_whitespace().next().unwrap_or(""))
            .collect();
        assert_eq!(kinds, ["INSERT", "UPDATE"], "{kept:#?}");
        drop(opened);
        let records = LedgerFile::open(&path, Duration::ZERO)
            .unwrap()
            .file
            .read_records()
            .unwrap();
        assert_eq!(records.len(), 6);
        assert!(records
            .iter()
            .all(|r| r.entry.state == InstanceState::Running && r.changed_at_ms == 11));
    }

    #[test]
    fn a_failed_write_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let mut opened = LedgerFile::open(&path, Duration::ZERO).unwrap();
        opened
            .file
            .write(&Batch {
                inserts: vec![record(0, "i-0")],
                ..Batch::default()
            })
            .unwrap();
        // The second row repeats a `seq`: the whole transaction is refused.
        let err = opened.file.write(&Batch {
            inserts: vec![record(1, "i-1"), record(0, "i-2")],
            ..Batch::default()
        });
        assert!(err.is_err());
        drop(opened);
        let mut reopened = LedgerFile::open(&path, Duration::ZERO).unwrap();
        assert_eq!(reopened.file.read_records().unwrap(), [record(0, "i-0")]);
    }

    #[test]
    fn a_ledger_file_belongs_to_one_cloud_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        let _first = LedgerFile::open(&path, Duration::ZERO).unwrap();
        let err = LedgerFile::open(&path, Duration::ZERO).err().unwrap();
        assert_eq!(
            err.to_string(),
            format!(
                "the ledger {} is in use by another simulated cloud: \
                 expected one cloud per ledger file",
                path.display()
            )
        );
    }

    #[test]
    fn a_file_that_is_not_a_ledger_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.sqlite");
        std::fs::write(&path, "not a database, just text that is long enough").unwrap();
        let err = LedgerFile::open(&path, Duration::ZERO).err().unwrap();
        assert!(
            err.to_string().starts_with(&format!(
                "cannot open the simulated cloud's ledger {}: ",
                path.display()
            )),
            "{err}"
        );
    }
}
