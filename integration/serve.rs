//! `berth serve` end to end: the whole controller (store, engine, simulated
//! cloud, API) on a random port and a temporary data directory, driven over
//! HTTP.

use std::path::PathBuf;
use std::time::Duration;

use berth::app::{Application, ADMIN_TOKEN_FILE};
use berth::config::Config;
use reqwest::Response;
use serde_json::{json, Value};

use crate::support::app::{config_for, spawn_app_with, Backend, Launch, Options, Site, TestApp};
use crate::support::{eventually, PATIENCE};

/// A whole controller, started as `berth serve` starts it.
async fn spawn_controller() -> TestApp {
    spawn_app_with(Options {
        launch: Launch::Application,
        ..Options::default()
    })
    .await
}

/// The status code and the JSON answer (null when there is none).
async fn answer(response: Response) -> (u16, Value) {
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Waits until the status over HTTP satisfies `done`.
async fn status_until(c: &TestApp, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    eventually(what, PATIENCE, || async {
        let status = c.status_json().await;
        if done(&status) {
            Ok(status)
        } else {
            Err(status)
        }
    })
    .await
}

/// Waits until every one of `count` machines shows `started`.
async fn all_started(c: &TestApp, count: usize) -> Value {
    status_until(c, &format!("{count} machines started"), |status| {
        let machines = status["machines"].as_object().cloned().unwrap_or_default();
        machines.len() == count
            && machines
                .values()
                .all(|m| m["juju-status"]["current"] == "started")
    })
    .await
}

#[actix_web::test]
async fn the_seed_scenario_gives_one_2g_machine_and_two_3g_machines_all_started() {
    let c = spawn_controller().await;
    let (code, body) = answer(
        c.deploy(&json!({"charm": "wordpress", "constraints": "mem=2G"}))
            .await,
    )
    .await;
    assert!((200..300).contains(&code), "{code} {body}");
    let (code, body) = answer(c.set_application_constraints("wordpress", "mem=3G").await).await;
    assert!((200..300).contains(&code), "{code} {body}");
    let (code, body) = answer(c.add_units("wordpress", &json!({"num_units": 2})).await).await;
    assert!((200..300).contains(&code), "{code} {body}");
    let status = all_started(&c, 3).await;
    let mut constraints: Vec<String> = status["machines"]
        .as_object()
        .unwrap()
        .values()
        .map(|m| m["constraints"].as_str().unwrap().to_string())
        .collect();
    constraints.sort();
    assert_eq!(constraints, vec!["mem=2048M", "mem=3072M", "mem=3072M"]);
    let machine = &status["machines"]["0"];
    assert_eq!(machine["machine-status"]["current"], "running");
    assert!(machine["instance-id"].as_str().unwrap().starts_with("i-"));
    let hardware = machine["hardware"].as_str().unwrap();
    assert!(
        hardware.contains("mem=2048M") && hardware.contains("availability-zone=sim-"),
        "{hardware}"
    );
    assert_eq!(
        status["applications"]["wordpress"]["units"]["wordpress/0"]["machine"],
        "0"
    );

    // Where each machine is (the simulated cloud's documentation-range
    // addresses) and since when it has been started; the units since
    // their machine started.
    let now_ms = crate::support::app::now_secs() * 1000;
    let since = |info: &Value| {
        let text = info["since"].as_str().expect("since");
        let ms = berth::api::webhooks::parse_rfc3339_ms(text).expect("RFC 3339");
        assert!((now_ms - 120_000..=now_ms + 1000).contains(&ms), "{text}");
        ms
    };
    for (id, machine) in status["machines"].as_object().unwrap() {
        let dns = machine["dns-name"].as_str().expect("dns-name");
        assert!(dns.starts_with("192.0.2."), "machine {id}: {dns}");
        let addresses = machine["ip-addresses"].as_array().unwrap();
        assert_eq!(addresses[0], dns);
        assert!(addresses[1].as_str().unwrap().starts_with("2001:db8:"));
        assert_eq!(
            since(&machine["juju-status"]),
            since(&machine["machine-status"])
        );
    }
    let unit = &status["applications"]["wordpress"]["units"]["wordpress/1"];
    let host = &status["machines"][unit["machine"].as_str().unwrap()];
    assert!(since(&unit["juju-status"]) >= since(&host["juju-status"]));
    since(&status["applications"]["wordpress"]["application-status"]);
}

#[actix_web::test]
async fn the_admin_token_file_is_private_and_kept_across_restarts() {
    let c = spawn_controller().await;
    let path = c.site.dir().join(ADMIN_TOKEN_FILE);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let again = Application::build(config_for(&c.site));
    // The first controller still holds the simulated cloud's ledger; a
    // second one on the same directory must say so, not corrupt it.
    assert!(again.await.is_err());
    let token = std::fs::read_to_string(&path).unwrap();
    assert_eq!(token.trim(), c.token);
}

#[actix_web::test]
async fn a_request_without_the_token_is_refused() {
    let c = spawn_controller().await;
    let response = c.client.get(c.url("/v1/status")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 401);
    assert_eq!(c.healthz().await.status().as_u16(), 200);
}

#[actix_web::test]
async fn unsatisfiable_constraints_show_a_provisioning_error_and_retry_fixes_it() {
    let c = spawn_controller().await;
    let (code, body) = answer(
        c.deploy(&json!({"charm": "wordpress", "constraints": "mem=100000G"}))
            .await,
    )
    .await;
    assert!((200..300).contains(&code), "{code} {body}");
    let status = status_until(&c, "machine 0 in provisioning error", |status| {
        status["machines"]["0"]["machine-status"]["current"] == "provisioning error"
    })
    .await;
    let machine = &status["machines"]["0"];
    assert_eq!(machine["juju-status"]["current"], "error");
    assert!(machine["machine-status"]["message"]
        .as_str()
        .unwrap()
        .contains("no instance type satisfies"));
    // Like juju, status shows "pending" where there is no instance id.
    assert_eq!(machine["instance-id"], "pending", "{machine}");
    let (code, body) = answer(
        c.retry(&json!({"machines": ["0"], "constraints": "mem=2G"}))
            .await,
    )
    .await;
    assert!((200..300).contains(&code), "{code} {body}");
    all_started(&c, 1).await;
}

#[actix_web::test]
async fn status_always_shows_the_callers_own_writes_even_when_kept_between_requests() {
    let c = spawn_controller().await;
    for n in 1..=5 {
        let (code, body) = answer(c.add_machines(&json!({"count": 1})).await).await;
        assert!((200..300).contains(&code), "{code} {body}");
        let status = c.status_json().await;
        assert_eq!(
            status["machines"].as_object().map(|m| m.len()),
            Some(n),
            "{status}"
        );
    }
    // Concurrent readers with no write between them see one revision.
    // The engine writes as it starts the machines, so wait until it is
    // done.
    all_started(&c, 5).await;
    let reads = futures_util::future::join_all((0..8).map(|_| c.status_json())).await;
    let revisions: std::collections::BTreeSet<i64> = reads
        .iter()
        .map(|s| s["model"]["revision"].as_i64().unwrap())
        .collect();
    assert!(revisions.len() <= 2, "{revisions:?}");
}

/// A controller whose `[provider.ec2]` has `table`.
fn ec2_config_for(site: &Site, table: &str) -> Config {
    let mut config = config_for(site);
    config.provider.kind = berth::config::ProviderKind::Ec2;
    config.provider.ec2 = Some(table.parse().unwrap());
    config
}

#[cfg(feature = "ec2")]
#[actix_web::test]
async fn an_ec2_controller_with_a_misspelt_setting_refuses_to_start_and_names_it() {
    let site = Site::new(Backend::Sqlite);
    let config = ec2_config_for(&site, "region = \"us-east-1\"\nsubnet = \"subnet-1\"");
    let error = Application::build(config).await.err().unwrap().to_string();
    assert!(
        error.starts_with(
            "cannot start the ec2 provider: invalid [provider.ec2] section: unknown field `subnet`"
        ),
        "{error}"
    );
}

/// A loopback HTTP server that answers every request with `status`, as a
/// download server for the agent binary; returns its URL.
#[cfg(feature = "ec2")]
fn download_server(status: u16) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/berth", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut request = [0u8; 2048];
            let _ = stream.read(&mut request);
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
    });
    url
}

#[cfg(feature = "ec2")]
#[actix_web::test]
async fn an_ec2_controller_that_instances_could_not_use_refuses_to_start_and_names_the_setting() {
    let missing_binary = download_server(404);
    let cases: [(Option<&str>, String, &str); 5] = [
        (
            Some("http://127.0.0.1:17070"),
            "image_has_agent = true".into(),
            "cannot start the ec2 provider: controller_url \"http://127.0.0.1:17070\" names a loopback address",
        ),
        (
            Some("https://0.0.0.0:17070"),
            "image_has_agent = true".into(),
            "cannot start the ec2 provider: controller_url \"https://0.0.0.0:17070\" names the unspecified address",
        ),
        (
            None,
            "image_has_agent = true".into(),
            "cannot start the ec2 provider: controller_url is not set",
        ),
        (
            Some("https://controller.invalid:17070"),
            String::new(),
            "cannot start the ec2 provider: instances would have no berth agent: stock images do not carry it; set provider.ec2.agent_binary_url",
        ),
        (
            Some("https://controller.invalid:17070"),
            format!("agent_binary_url = \"{missing_binary}\""),
            "cannot start the ec2 provider: provider.ec2.agent_binary_url",
        ),
    ];
    for (controller_url, extra, expected) in cases {
        let site = Site::new(Backend::Sqlite);
        // The endpoint is a closed loopback port: the checks must fail
        // before anything calls EC2.
        let mut config = ec2_config_for(
            &site,
            &format!("region = \"us-east-1\"\nendpoint_url = \"http://127.0.0.1:9\"\n{extra}"),
        );
        config.controller_url = controller_url.map(str::to_string);
        let error = Application::build(config).await.err().unwrap().to_string();
        assert!(
            error.starts_with(expected),
            "{controller_url:?} {extra:?}: {error}"
        );
        if extra.contains("agent_binary_url") {
            assert!(error.contains("it answered 404"), "{error}");
        }
    }
}

#[cfg(not(feature = "ec2"))]
#[actix_web::test]
async fn without_the_ec2_feature_an_ec2_controller_refuses_to_start_and_says_why() {
    let site = Site::new(Backend::Sqlite);
    let config = ec2_config_for(&site, "region = \"us-east-1\"");
    let error = Application::build(config).await.err().unwrap().to_string();
    assert_eq!(
        error,
        "cannot start the ec2 provider: this berth was built without the EC2 provider (cargo feature `ec2`)"
    );
}

/// The send buffers (`SO_SNDBUF`) of this process's connected TCP sockets
/// whose local port is `port`: the server's side of its connections, when
/// the server runs in this process.
fn send_buffers_of_connections_to(port: u16) -> Vec<usize> {
    server_sides_of_connections_to(port)
        .into_iter()
        .map(|side| side.send_buffer)
        .collect()
}

/// The server's side of one connection: its peer's port and its send
/// buffer.
#[derive(Debug)]
struct ServerSide {
    peer_port: u16,
    send_buffer: usize,
}

/// The socket descriptors of `process` (`self`, or a pid), each with its
/// inode, from `/proc/<process>/fd`.
fn sockets_of(process: &str) -> std::io::Result<Vec<(i32, String)>> {
    Ok(std::fs::read_dir(format!("/proc/{process}/fd"))?
        .flatten()
        .filter_map(|entry| {
            let fd = entry.file_name().to_str()?.parse().ok()?;
            let target = std::fs::read_link(entry.path()).ok()?;
            let inode = target
                .to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?;
            Some((fd, inode.to_string()))
        })
        .collect())
}

/// This process's connected TCP sockets whose local port is `port`.
fn server_sides_of_connections_to(port: u16) -> Vec<ServerSide> {
    let mut sides = Vec::new();
    for (fd, _) in sockets_of("self").expect("own descriptors") {
        // SAFETY: plain reads of a socket's names and options into values
        // of the lengths given; a descriptor closed meanwhile only makes
        // a call fail.
        unsafe {
            let mut local: libc::sockaddr_in = std::mem::zeroed();
            let mut length = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            if libc::getsockname(fd, std::ptr::from_mut(&mut local).cast(), &mut length) != 0
                || i32::from(local.sin_family) != libc::AF_INET
                || u16::from_be(local.sin_port) != port
            {
                continue;
            }
            let mut peer: libc::sockaddr_in = std::mem::zeroed();
            let mut length = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            if libc::getpeername(fd, std::ptr::from_mut(&mut peer).cast(), &mut length) != 0 {
                continue; // the listener
            }
            let mut buffer: libc::c_int = 0;
            let mut length = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            if libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                std::ptr::from_mut(&mut buffer).cast(),
                &mut length,
            ) == 0
            {
                sides.push(ServerSide {
                    peer_port: u16::from_be(peer.sin_port),
                    send_buffer: usize::try_from(buffer).unwrap_or(0),
                });
            }
        }
    }
    sides
}

/// The local ports of process `pid`'s TCP sockets over IPv4, from its
/// descriptors' socket inodes and its `/proc/<pid>/net/tcp` table.
fn local_tcp_ports_of(pid: u32) -> Vec<u16> {
    let inodes: std::collections::HashSet<String> = sockets_of(&pid.to_string())
        .unwrap_or_default()
        .into_iter()
        .map(|(_, inode)| inode)
        .collect();
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, inode) = (fields.get(1)?, fields.get(9)?);
            if !inodes.contains(*inode) {
                return None;
            }
            u16::from_str_radix(local.rsplit(':').next()?, 16).ok()
        })
        .collect()
}

/// Opens an event stream to the controller at `url` (listening on `port`)
/// with the command line's client, then reads the status on a connection
/// of its own, and checks that the stream's connection, and it alone, has
/// the bounded send buffer.
async fn only_the_streams_connection_is_bounded(
    url: String,
    token: String,
    ca: Option<PathBuf>,
    port: u16,
) {
    use berth::cli::client::{Client, TrustedCa};
    tokio::task::spawn_blocking(move || {
        let ca = ca.map(|path| TrustedCa::read(&path, "test").expect("the CA"));
        let client = Client::with_ca(&url, Some(token.clone()), ca.as_ref()).expect("client");
        // The response has begun once `events` returns: the handler has run.
        let stream = client
            .events(0, Some(Duration::from_secs(30)))
            .expect("event stream");
        let with_stream = send_buffers_of_connections_to(port);
        let reader = Client::with_ca(&url, Some(token), ca.as_ref()).expect("client");
        let _: Value = reader.get("/v1/status").expect("status");
        let with_status_too = send_buffers_of_connections_to(port);
        drop(stream);
        assert_eq!(bounded(&with_stream), 1, "{with_stream:?}");
        assert_eq!(
            with_status_too.len(),
            with_stream.len() + 1,
            "{with_status_too:?}"
        );
        assert_eq!(bounded(&with_status_too), 1, "{with_status_too:?}");
    })
    .await
    .expect("the client's thread");
}

/// How many of `buffers` are an event stream's bounded send buffer (Linux
/// keeps twice the size asked for).
fn bounded(buffers: &[usize]) -> usize {
    use berth::api::observe::EVENT_STREAM_SEND_BUFFER;
    buffers
        .iter()
        .filter(|b| **b == 2 * EVENT_STREAM_SEND_BUFFER)
        .count()
}

#[actix_web::test]
async fn an_event_streams_connection_keeps_a_bounded_send_buffer_and_others_do_not() {
    let c = spawn_controller().await;
    let port = c.address.rsplit(':').next().unwrap().parse().unwrap();
    only_the_streams_connection_is_bounded(c.address.clone(), c.token.clone(), None, port).await;
}

/// A controller serving HTTPS with its own CA, in this process: its site
/// (the CA is in its directory), its port and its task.
async fn tls_controller() -> (Site, u16, actix_web::rt::task::JoinHandle<()>) {
    let site = Site::new(Backend::Sqlite);
    let mut config = config_for(&site);
    config.tls.enabled = Some(true);
    let app = Application::build(config).await.expect("controller starts");
    let port = app.port();
    let task = actix_web::rt::spawn(async move {
        let _ = app.run_until_stopped().await;
    });
    (site, port, task)
}

fn admin_token(site: &Site) -> String {
    std::fs::read_to_string(site.dir().join(ADMIN_TOKEN_FILE))
        .expect("token")
        .trim()
        .to_string()
}

#[actix_web::test]
async fn over_https_too_an_event_streams_connection_keeps_a_bounded_send_buffer() {
    let (site, port, task) = tls_controller().await;
    only_the_streams_connection_is_bounded(
        format!("https://127.0.0.1:{port}"),
        admin_token(&site),
        Some(site.dir().join(berth::tls::CA_CERT_FILE)),
        port,
    )
    .await;
    task.abort();
}

#[actix_web::test]
async fn an_event_stream_over_http2_leaves_the_connection_it_shares_as_it_is() {
    use std::io::BufRead;
    let (site, port, task) = tls_controller().await;
    // curl negotiates HTTP/2 over TLS, as browsers do.
    let mut curl = std::process::Command::new("curl")
        .args(["-sS", "-N", "--http2", "--max-time", "60", "-H"])
        .arg(format!("Authorization: Bearer {}", admin_token(&site)))
        .arg("--cacert")
        .arg(site.dir().join(berth::tls::CA_CERT_FILE))
        .arg(format!("https://127.0.0.1:{port}/v1/events?since=0"))
        .stdout(std::process::Stdio::piped())
        // It complains of its output closing when the test is done.
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("curl runs");
    let stdout = curl.stdout.take().expect("curl's output");
    // The stream's first line has come: the handler has run. Its output is
    // kept open to the end: curl ends, and its connection with it, when it
    // cannot write what comes next.
    let (first, _curls_output) = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        let mut output = std::io::BufReader::new(stdout);
        output.read_line(&mut line).expect("read");
        (line, output)
    })
    .await
    .expect("reader");
    assert!(
        first.starts_with(": berth change log after revision 0"),
        "{first:?}"
    );
    // The server's side of curl's own connection: other tests in this
    // process open and close sockets meanwhile, and one of an earlier
    // server may still hold this port number.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let (curls_ports, curls_connection) = loop {
        let curls_ports = local_tcp_ports_of(curl.id());
        let sides: Vec<ServerSide> = server_sides_of_connections_to(port)
            .into_iter()
            .filter(|side| curls_ports.contains(&side.peer_port))
            .collect();
        if !sides.is_empty() || std::time::Instant::now() > deadline {
            break (curls_ports, sides);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let curl_ended = curl.try_wait();
    let _ = curl.kill();
    let _ = curl.wait();
    task.abort();
    assert_eq!(
        curls_connection.len(),
        1,
        "curl's ports {curls_ports:?}, its end {curl_ended:?}, the server's sides {:?}",
        server_sides_of_connections_to(port)
    );
    let buffers: Vec<usize> = curls_connection.iter().map(|c| c.send_buffer).collect();
    assert_eq!(bounded(&buffers), 0, "{buffers:?}");
}
