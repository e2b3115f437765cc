//! A real PostgreSQL server for the tests, started once per test process.
//!
//! With `BERTH_TEST_POSTGRES_URL` set (a URL of a role that may create
//! databases), that server is used. Otherwise the server binaries from
//! `BERTH_PG_BIN`, or the newest `/usr/lib/postgresql/*/bin`, are used to
//! `initdb` a temporary directory and start a server on a free loopback
//! port. PostgreSQL refuses to run as root, so as root the server runs as
//! the `postgres` user. A small shell keeps the server tied to this
//! process: it waits on a pipe from us, and when this process exits (however
//! it exits) the pipe closes and the shell stops the server and removes its
//! directory.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use diesel::{Connection, PgConnection, RunQueryDsl};

/// How long a fresh server may take to accept connections.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

struct Server {
    /// `postgres://berth@127.0.0.1:PORT`, without a database name.
    base_url: String,
    /// Held open for the life of this process; closing it stops the server.
    _lifeline: Mutex<(Child, ChildStdin)>,
}

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
static NEXT_DATABASE: AtomicU32 = AtomicU32::new(0);

/// A URL of a new, empty database on the test server.
///
/// # Panics
///
/// If no server can be had: the tests need one, and say why.
pub fn fresh_database() -> String {
    if let Ok(url) = std::env::var("BERTH_TEST_POSTGRES_URL") {
        return create_database(&url);
    }
    let server = SERVER
        .get_or_init(start)
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"));
    create_database(&format!("{}/postgres", server.base_url))
}

fn create_database(admin_url: &str) -> String {
    let name = format!(
        "berth_test_{}_{}",
        std::process::id(),
        NEXT_DATABASE.fetch_add(1, Ordering::SeqCst)
    );
    let mut conn = PgConnection::establish(admin_url)
        .unwrap_or_else(|e| panic!("connect to {admin_url}: {e}"));
    diesel::sql_query(format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .unwrap_or_else(|e| panic!("create database {name}: {e}"));
    let base = admin_url
        .rsplit_once('/')
        .map_or(admin_url, |(base, _)| base);
    format!("{base}/{name}")
}

fn bin_dir() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("BERTH_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("no PostgreSQL server found in /usr/lib/postgresql ({e}); install postgresql or set BERTH_PG_BIN"))?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).ok_or_else(|| {
        "no initdb under /usr/lib/postgresql/*/bin; install postgresql or set BERTH_PG_BIN"
            .to_string()
    })
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A command that runs as the unprivileged `postgres` user when we are root.
fn as_server_user(program: &Path, root: bool) -> Command {
    if root {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=postgres", "--regid=postgres", "--clear-groups"])
            .arg(program);
        cmd
    } else {
        Command::new(program)
    }
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

fn start() -> Result<Server, String> {
    let bin = bin_dir()?;
    let root = running_as_root();
    let dir = tempfile::Builder::new()
        .prefix("berth-pg-")
        .tempdir()
        .map_err(|e| format!("temporary directory: {e}"))?
        .keep();
    if root {
        let status = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .status()
            .map_err(|e| format!("chown: {e}"))?;
        if !status.success() {
            return Err(format!("chown {} to postgres failed", dir.display()));
        }
    }
    let data = dir.join("data");
    let init = as_server_user(&bin.join("initdb"), root)
        .arg("-D")
        .arg(&data)
        .args(["-U", "berth", "-A", "trust", "-E", "UTF8", "--no-sync"])
        .output()
        .map_err(|e| format!("initdb: {e}"))?;
    if !init.status.success() {
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&init.stderr)
        ));
    }
    let port = free_port()?;
    let script = format!(
        "{postgres} -D {data} -p {port} -k {dir} -c listen_addresses=127.0.0.1 -c fsync=off \
         -c synchronous_commit=off -c full_page_writes=off -c max_connections=400 >{dir}/server.log 2>&1 &
         pid=$!
         read _ignored
         kill -INT $pid
         wait $pid
         rm -rf {dir}",
        postgres = bin.join("postgres").display(),
        data = data.display(),
        dir = dir.display(),
    );
    let mut child = as_server_user(Path::new("sh"), root)
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("start postgres: {e}"))?;
    let stdin = child.stdin.take().ok_or("no pipe to the server's shell")?;
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    let base_url = format!("postgres://berth@127.0.0.1:{port}");
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok()
            && PgConnection::establish(&format!("{base_url}/postgres")).is_ok()
        {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
            return Err(format!(
                "postgres exited ({status}) before accepting connections:\n{log}"
            ));
        }
        if Instant::now() > deadline {
            let mut stdin = stdin;
            let _ = stdin.write_all(b"stop\n");
            return Err(format!(
                "postgres did not accept connections within {STARTUP_TIMEOUT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Server {
        base_url,
        _lifeline: Mutex::new((child, stdin)),
    })
}

/// A PostgreSQL server of one test's own, which the test may stop and
/// start again (the shared server above must never stop). Stopped and
/// removed when dropped.
pub struct OwnServer {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    root: bool,
}

impl OwnServer {
    /// Initialises and starts a server on a free loopback port.
    ///
    /// # Panics
    ///
    /// If no server binaries are installed or the server does not start.
    pub fn start() -> OwnServer {
        let bin = bin_dir().unwrap_or_else(|e| panic!("{e}"));
        let root = running_as_root();
        let dir = tempfile::Builder::new()
            .prefix("berth-own-pg-")
            .tempdir()
            .expect("temporary directory")
            .keep();
        if root {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .status()
                .expect("chown");
            assert!(status.success(), "chown {} failed", dir.display());
        }
        let init = as_server_user(&bin.join("initdb"), root)
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-U", "berth", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .output()
            .expect("initdb");
        assert!(
            init.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let server = OwnServer {
            bin,
            dir,
            port: free_port().expect("a free port"),
            root,
        };
        server.resume();
        let mut conn = PgConnection::establish(&format!("{}/postgres", server.base_url()))
            .expect("connect to the new server");
        diesel::sql_query("CREATE DATABASE berth")
            .execute(&mut conn)
            .expect("create database berth");
        server
    }

    fn base_url(&self) -> String {
        format!("postgres://berth@127.0.0.1:{}", self.port)
    }

    /// The URL of its `berth` database.
    pub fn url(&self) -> String {
        format!("{}/berth", self.base_url())
    }

    fn pg_ctl(&self, args: &[&str]) -> std::process::Output {
        as_server_user(&self.bin.join("pg_ctl"), self.root)
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run pg_ctl")
    }

    /// Stops the server at once, as a crash or an operator's restart would
    /// (`-m fast`: sessions are cut off).
    pub fn stop(&self) {
        let out = self.pg_ctl(&["stop", "-m", "fast", "-w"]);
        assert!(
            out.status.success(),
            "pg_ctl stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the server again, on the same port and data.
    pub fn resume(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_connections=200",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log");
        let out = self.pg_ctl(&[
            "start",
            "-w",
            "-t",
            "60",
            "-l",
            log.to_str().unwrap(),
            "-o",
            &options,
        ]);
        assert!(
            out.status.success(),
            "pg_ctl start: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.pg_ctl(&["stop", "-m", "immediate", "-w"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
