//! moto's EC2 server for the tests, started once per test process.
//!
//! The binary is `BERTH_MOTO_SERVER`, else `.venv/bin/moto_server` in the
//! repository (`bash integration/run.sh` installs it there). It listens on
//! a free loopback port. As with the PostgreSQL harness, a small shell ties
//! the server to this process: it waits on a pipe from us, and when this
//! process exits (however it exits) the pipe closes and the shell stops
//! the server and removes its log.
//!
//! Every test shares the server; tests keep apart by their controller's
//! uuid, which berth's tags and filters carry.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a fresh server may take to answer.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

struct Server {
    /// `http://127.0.0.1:PORT`.
    url: String,
    /// Held open for the life of this process; closing it stops the server.
    _lifeline: Mutex<(Child, ChildStdin)>,
}

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();

/// The URL of the test process's moto server, started on first use.
///
/// # Panics
///
/// If the server cannot be started: the tests need it, and say how to get
/// it.
pub fn endpoint() -> String {
    SERVER
        .get_or_init(start)
        .as_ref()
        .map(|s| s.url.clone())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn binary() -> PathBuf {
    match std::env::var_os("BERTH_MOTO_SERVER") {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/moto_server"),
    }
}

fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

/// Whether something on `port` answers HTTP.
fn answers(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = "GET /moto-api/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.")
}

fn start() -> Result<Server, String> {
    let binary = binary();
    if !binary.exists() {
        return Err(format!(
            "moto_server not found at {}: run `bash integration/run.sh` (it installs moto into \
             .venv), or set BERTH_MOTO_SERVER to a moto_server binary",
            binary.display()
        ));
    }
    let port = free_port()?;
    let log = std::env::temp_dir().join(format!("berth-moto-{}.log", std::process::id()));
    let script = "\"$0\" -H 127.0.0.1 -p \"$1\" >\"$2\" 2>&1 &
         pid=$!
         read _ignored
         kill $pid
         wait $pid
         rm -f \"$2\"";
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(&binary)
        .arg(port.to_string())
        .arg(&log)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("start {}: {e}", binary.display()))?;
    let stdin = child.stdin.take().ok_or("no pipe to the server's shell")?;
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    while !answers(port) {
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(format!(
                "moto_server exited ({status}) before answering:\n{log}"
            ));
        }
        if Instant::now() > deadline {
            let mut stdin = stdin;
            let _ = stdin.write_all(b"stop\n");
            return Err(format!(
                "moto_server did not answer within {STARTUP_TIMEOUT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(Server {
        url: format!("http://127.0.0.1:{port}"),
        _lifeline: Mutex::new((child, stdin)),
    })
}
