//! The command line's side of berth's HTTP API: a small blocking client
//! that sends JSON, reads JSON back, turns error bodies into
//! [`CliError::Api`] with the server's message, and follows the change log
//! (`/v1/events`, Server-Sent Events).
//!
//! A URL may name several controllers of one model, separated by commas
//! (`https://a:17070,https://b:17070`): a request goes to the one that last
//! answered, and to the next when one cannot be connected to (nothing was
//! sent, so nothing is done twice). Any other failure is the answer.
//!
//! `http://` and `https://` URLs are spoken. An `https://` controller is
//! verified with the CA certificate given ([`TrustedCa`]: `--ca-cert`, a
//! saved controller's, or for a controller not saved the data directory's
//! `ca.crt`), else with the public roots; a certificate that does not
//! verify ends the command.

use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::errors::ErrorBody;
use crate::api::observe::ChangeEvent;
use crate::cli::error::CliError;

/// How long connecting may take: the controller is usually on this
/// machine, so a slow connect means something is wrong.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one request may wait for the controller's answer. Every route
/// answers after one store transaction; deploying a large local charm
/// reads it from disk first.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// How long an event stream may stay silent before it is taken for dead.
/// The controller sends a keep-alive comment every 15 seconds.
pub const STREAM_IDLE_LIMIT: Duration = Duration::from_secs(60);

/// The most an answer body is read: far more than any status.
const MAX_BODY_BYTES: u64 = 64 * 1024 * 1024;

/// Who a request is from.
#[derive(Clone, Copy, Debug)]
pub enum Auth<'a> {
    /// No `Authorization` header (agent check-in).
    None,
    /// `Authorization: Bearer <token>`: the admin token, or a machine
    /// agent's credential.
    Bearer(&'a str),
}

/// CA certificates (PEM) trusted for an `https://` controller, and where
/// they came from (named in errors).
#[derive(Clone, PartialEq, Eq)]
pub struct TrustedCa {
    pub pem: Vec<u8>,
    pub origin: String,
}

impl std::fmt::Debug for TrustedCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrustedCa")
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl TrustedCa {
    /// The CA certificates in the file at `path`.
    ///
    /// # Errors
    ///
    /// [`CliError::File`] when it cannot be read.
    pub fn read(path: &std::path::Path, origin: &str) -> Result<TrustedCa, CliError> {
        let pem = std::fs::read(path).map_err(|e| {
            CliError::File(format!(
                "cannot read the CA certificate {}: {e}",
                path.display()
            ))
        })?;
        Ok(TrustedCa {
            pem,
            origin: format!("{origin} {}", path.display()),
        })
    }
}

/// A client of one controller.
#[derive(Clone)]
pub struct Client {
    /// `http://host:port` or `https://host:port`, without a trailing
    /// slash: the controllers, in the order given.
    bases: Vec<String>,
    /// Which of `bases` answered last: requests go there first. Shared by
    /// clones.
    current: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// The admin token, for the routes that need it; `None` for a client
    /// that only makes agent calls.
    token: Option<String>,
    agent: ureq::Agent,
    /// For event streams: no overall deadline, but a read limit, so a dead
    /// connection is noticed.
    stream_agent: ureq::Agent,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a secret: never printed.
        f.debug_struct("Client")
            .field("bases", &self.bases)
            .finish()
    }
}

impl Client {
    /// A client of the controller at `url`, verifying an `https://`
    /// controller with the public roots.
    ///
    /// # Errors
    ///
    /// As [`Client::with_ca`].
    pub fn new(url: &str, token: Option<String>) -> Result<Client, CliError> {
        Client::with_ca(url, token, None)
    }

    /// A client of the controller at `url`, verifying an `https://`
    /// controller with `ca` (else the public roots).
    ///
    /// # Errors
    ///
    /// [`CliError::Usage`] for a URL that is not `http[s]://host[:port]`
    /// or a CA file with no certificate in it.
    pub fn with_ca(
        url: &str,
        token: Option<String>,
        ca: Option<&TrustedCa>,
    ) -> Result<Client, CliError> {
        let bases = url
            .split(',')
            .map(|one| controller_base(url, one))
            .collect::<Result<Vec<_>, _>>()?;
        let tls = match ca {
            Some(ca) if bases.iter().any(|b| b.starts_with("https://")) => Some(
                crate::tls::client_config(&ca.pem, &ca.origin)
                    .map_err(|e| CliError::Usage(format!("cannot use {}: {e}", ca.origin)))?,
            ),
            _ => None,
        };
        let builder = || {
            let builder = ureq::AgentBuilder::new().timeout_connect(CONNECT_TIMEOUT);
            match &tls {
                Some(config) => builder.tls_config(config.clone()),
                None => builder,
            }
        };
        let agent = builder().timeout(REQUEST_TIMEOUT).build();
        let stream_agent = builder().timeout_read(STREAM_IDLE_LIMIT).build();
        Ok(Client {
            bases,
            current: std::sync::Arc::default(),
            token,
            agent,
            stream_agent,
        })
    }

    /// The URL of the controller that answered last (the first given,
    /// before any answered), without a trailing slash.
    pub fn url(&self) -> &str {
        &self.bases[self.current_index()]
    }

    /// Every controller's URL, in the order given.
    pub fn urls(&self) -> &[String] {
        &self.bases
    }

    fn current_index(&self) -> usize {
        self.current.load(std::sync::atomic::Ordering::Relaxed) % self.bases.len()
    }

    /// Runs `attempt` against the controller that answered last, then
    /// against each of the others while none can be connected to.
    fn with_failover<T>(
        &self,
        mut attempt: impl FnMut(&str) -> Result<T, CliError>,
    ) -> Result<T, CliError> {
        let first = self.current_index();
        let count = self.bases.len();
        for step in 0..count {
            let index = (first + step) % count;
            match attempt(&self.bases[index]) {
                // Nothing was sent to it: the next may take the request.
                Err(CliError::Unreachable { .. } | CliError::Unresolved { .. }) if count > 1 => {
                    log::debug!("{} does not answer; trying the next", self.bases[index]);
                }
                answered => {
                    self.current
                        .store(index, std::sync::atomic::Ordering::Relaxed);
                    return answered;
                }
            }
        }
        Err(CliError::Unreachable {
            url: self.bases.join(", "),
        })
    }

    fn admin(&self) -> Auth<'_> {
        match &self.token {
            Some(token) => Auth::Bearer(token),
            None => Auth::None,
        }
    }

    /// `GET path` with the admin token, decoding the JSON answer.
    ///
    /// # Errors
    ///
    /// See [`Client::send`].
    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, CliError> {
        self.get_within(path, None)
    }

    /// `GET path` with the admin token, as [`Client::get`], giving up
    /// after `limit` (else after [`REQUEST_TIMEOUT`]): a command with a
    /// deadline of its own does not wait past it for an answer.
    ///
    /// # Errors
    ///
    /// See [`Client::send`]; [`CliError::Transport`] or
    /// [`CliError::Unreachable`] when `limit` passes first.
    pub fn get_within<T: DeserializeOwned>(
        &self,
        path: &str,
        limit: Option<Duration>,
    ) -> Result<T, CliError> {
        let text = self.send_within("GET", path, None, self.admin(), limit)?;
        self.decode(path, &text)
    }

    /// `POST path` with a JSON body and the admin token.
    ///
    /// # Errors
    ///
    /// See [`Client::send`].
    pub fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, CliError> {
        self.post_as(path, body, self.admin())
    }

    /// `POST path` with a JSON body, as `auth`.
    ///
    /// # Errors
    ///
    /// See [`Client::send`].
    pub fn post_as<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        auth: Auth<'_>,
    ) -> Result<T, CliError> {
        let body = self.encode(path, body)?;
        let text = self.send("POST", path, Some(&body), auth)?;
        self.decode(path, &text)
    }

    /// `POST path` without a body, as `auth`, decoding the JSON answer.
    ///
    /// # Errors
    ///
    /// See [`Client::send`].
    pub fn post_bare_as<T: DeserializeOwned>(
        &self,
        path: &str,
        auth: Auth<'_>,
    ) -> Result<T, CliError> {
        let text = self.send("POST", path, None, auth)?;
        self.decode(path, &text)
    }

    /// `POST path` with a JSON body, for routes that answer 204.
    ///
    /// # Errors
    ///
    /// See [`Client::send`].
    pub fn post_no_content<B: Serialize>(&self, path: &str, body: &B) -> Result<(), CliError> {
        let body = self.encode(path, body)?;
        self.send("POST", path, Some(&body), self.admin()).map(drop)
    }

    /// `POST path` with a binary body of `content_type` and the admin
    /// token, decoding the JSON answer.
    ///
    /// # Errors
    ///
    /// As [`Client::send`].
    pub fn post_bytes<T: DeserializeOwned>(
        &self,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> Result<T, CliError> {
        let text = self.with_failover(|base| {
            let mut request = self.agent.post(&format!("{base}{path}"));
            if let Auth::Bearer(token) = self.admin() {
                request = request.set("Authorization", &format!("Bearer {token}"));
            }
            let response = request
                .set("Content-Type", content_type)
                .send_bytes(body)
                .map_err(|e| failure(base, e))?;
            read_body(response).map_err(|e| transport(base, &e.to_string()))
        })?;
        self.decode(path, &text)
    }

    /// `PUT path` with a JSON body and the admin token.
    ///
    /// # Errors
    ///
    /// See [`Client::send`].
    pub fn put<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, CliError> {
        let body = self.encode(path, body)?;
        let text = self.send("PUT", path, Some(&body), self.admin())?;
        self.decode(path, &text)
    }

    /// `DELETE path` with the admin token.
    ///
    /// # Errors
    ///
    /// See [`Client::send`].
    pub fn delete(&self, path: &str) -> Result<(), CliError> {
        self.send("DELETE", path, None, self.admin()).map(drop)
    }

    /// `DELETE path` with the admin token, reading the answer.
    ///
    /// # Errors
    ///
    /// See [`Client::send`].
    pub fn delete_as<T: DeserializeOwned>(&self, path: &str) -> Result<T, CliError> {
        let text = self.send("DELETE", path, None, self.admin())?;
        self.decode(path, &text)
    }

    /// Sends one request and returns the answer's body.
    ///
    /// # Errors
    ///
    /// [`CliError::Api`] with the server's message for an error status;
    /// [`CliError::Unreachable`] when nothing listens at the URL;
    /// [`CliError::Unresolved`] when its host name does not resolve;
    /// [`CliError::Transport`] for other connection failures.
    pub fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        auth: Auth<'_>,
    ) -> Result<String, CliError> {
        self.send_within(method, path, body, auth, None)
    }

    /// [`Client::send`], waiting at most `limit` (else
    /// [`REQUEST_TIMEOUT`]) for each controller's answer.
    fn send_within(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        auth: Auth<'_>,
        limit: Option<Duration>,
    ) -> Result<String, CliError> {
        self.with_failover(|base| {
            let mut request = self.agent.request(method, &format!("{base}{path}"));
            if let Auth::Bearer(token) = auth {
                request = request.set("Authorization", &format!("Bearer {token}"));
            }
            if let Some(limit) = limit {
                request = request.timeout(limit);
            }
            let result = match body {
                Some(body) => request
                    .set("Content-Type", "application/json")
                    .send_string(body),
                None => request.call(),
            };
            let response = result.map_err(|e| failure(base, e))?;
            read_body(response).map_err(|e| transport(base, &e.to_string()))
        })
    }

    /// Opens the change log after `since`. With a `deadline`, reading the
    /// stream fails once that much time has passed.
    ///
    /// # Errors
    ///
    /// As [`Client::send`]; 503 when the controller has too many streams
    /// open.
    pub fn events(&self, since: i64, deadline: Option<Duration>) -> Result<EventStream, CliError> {
        let path = format!("/v1/events?since={since}");
        self.with_failover(|base| {
            let mut request = self.stream_agent.get(&format!("{base}{path}"));
            if let Auth::Bearer(token) = self.admin() {
                request = request.set("Authorization", &format!("Bearer {token}"));
            }
            if let Some(deadline) = deadline {
                request = request.timeout(deadline);
            }
            let response = request.call().map_err(|e| failure(base, e))?;
            Ok(EventStream::new(BufReader::new(response.into_reader())))
        })
    }

    fn endpoint(&self, path: &str) -> String {
        format!("{}{path}", self.url())
    }

    fn encode<B: Serialize>(&self, path: &str, body: &B) -> Result<String, CliError> {
        serde_json::to_string(body).map_err(|e| CliError::Protocol {
            url: self.endpoint(path),
            reason: format!("cannot encode the request: {e}"),
        })
    }

    fn decode<T: DeserializeOwned>(&self, path: &str, text: &str) -> Result<T, CliError> {
        serde_json::from_str(text).map_err(|e| CliError::Protocol {
            url: self.endpoint(path),
            reason: format!("{e} in {}", excerpt(text)),
        })
    }
}

/// Checks a `--url` (one URL, or several separated by commas) as
/// [`Client::with_ca`] reads it, so that a bad one is refused before
/// anything else is looked for.
///
/// # Errors
///
/// [`CliError::Usage`] naming `url` and what was expected.
pub fn check_url(url: &str) -> Result<(), CliError> {
    url.split(',')
        .try_for_each(|one| controller_base(url, one).map(drop))
}

/// One controller's base URL from `one`, a part of the `--url` the user
/// gave (`given`, named in the error).
fn controller_base(given: &str, one: &str) -> Result<String, CliError> {
    let base = one.trim().trim_end_matches('/').to_string();
    let malformed = || {
        CliError::Usage(format!(
            "invalid controller URL {given:?}: expected http://host[:port] or https://host[:port], such as \
             http://127.0.0.1:17070, or several separated by commas"
        ))
    };
    let rest = base
        .strip_prefix("http://")
        .or_else(|| base.strip_prefix("https://"))
        .ok_or_else(malformed)?;
    if rest.is_empty() || rest.contains('/') {
        return Err(malformed());
    }
    Ok(base)
}

fn transport(base: &str, reason: &str) -> CliError {
    CliError::Transport {
        url: base.to_string(),
        reason: reason.to_string(),
    }
}

/// What a failed request to the controller at `base` means.
fn failure(base: &str, error: ureq::Error) -> CliError {
    match error {
        ureq::Error::Status(status, response) => {
            let text = read_body(response).unwrap_or_default();
            api_error(status, &text)
        }
        ureq::Error::Transport(transport_error) => {
            if let Some(tls) = tls_error(&transport_error) {
                return match tls {
                    rustls::Error::InvalidCertificate(_)
                    | rustls::Error::NoCertificatesPresented => CliError::Untrusted {
                        url: base.to_string(),
                        reason: tls.to_string(),
                    },
                    _ => transport(
                        base,
                        &format!("TLS: {tls} (is it serving plain HTTP? then use an http:// URL)"),
                    ),
                };
            }
            if transport_error.kind() == ureq::ErrorKind::ConnectionFailed {
                return CliError::Unreachable {
                    url: base.to_string(),
                };
            }
            if transport_error.kind() == ureq::ErrorKind::Dns {
                return CliError::Unresolved {
                    url: base.to_string(),
                    reason: transport_error.message().map_or_else(
                        || "its host name does not resolve".to_string(),
                        str::to_string,
                    ),
                };
            }
            let mut reason = transport_error.kind().to_string();
            if let Some(message) = transport_error.message() {
                reason.push_str(": ");
                reason.push_str(message);
            }
            if let Some(source) = std::error::Error::source(&transport_error) {
                reason.push_str(": ");
                reason.push_str(&source.to_string());
            }
            transport(base, &reason)
        }
    }
}

/// The TLS error under a transport error, if it is one.
fn tls_error(error: &ureq::Transport) -> Option<&rustls::Error> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(error);
    while let Some(e) = current {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(tls) = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(tls);
        }
        current = e.source();
    }
    None
}

fn read_body(response: ureq::Response) -> std::io::Result<String> {
    let mut text = String::new();
    response
        .into_reader()
        .take(MAX_BODY_BYTES)
        .read_to_string(&mut text)?;
    Ok(text)
}

/// The error an error response means: the message of berth's JSON error
/// body, or (from something that is not berth) the status and the body.
pub fn api_error(status: u16, body: &str) -> CliError {
    let message = match serde_json::from_str::<ErrorBody>(body) {
        Ok(parsed) => parsed.error.message,
        Err(_) if body.trim().is_empty() => format!("HTTP {status} with no message"),
        Err(_) => format!("HTTP {status}: {}", excerpt(body)),
    };
    CliError::Api { status, message }
}

/// The start of a body, for messages.
fn excerpt(text: &str) -> String {
    const LIMIT: usize = 200;
    let text = text.trim();
    match text.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_string(),
    }
}

/// Percent-encodes one path segment (a zone name, an application name).
/// Machine ids keep their slashes: the API takes them whole.
pub fn segment(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for byte in raw.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The change log as it arrives: `text/event-stream` frames, each a
/// [`ChangeEvent`].
pub struct EventStream {
    reader: Box<dyn BufRead + Send>,
}

impl EventStream {
    /// A stream over any reader (tests give it text).
    pub fn new(reader: impl BufRead + Send + 'static) -> EventStream {
        EventStream {
            reader: Box::new(reader),
        }
    }

    /// The next change, or `None` when the stream ends. Comments
    /// (keep-alives) and events of other types are skipped.
    ///
    /// # Errors
    ///
    /// The read's error (a timeout, a reset connection), or
    /// [`std::io::ErrorKind::InvalidData`] for a `change` event whose data
    /// is not a [`ChangeEvent`].
    pub fn next_event(&mut self) -> std::io::Result<Option<ChangeEvent>> {
        let mut data = String::new();
        let mut kind = String::new();
        let mut line = String::new();
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 {
                return Ok(None);
            }
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                let is_change = kind.is_empty() || kind == "change";
                if is_change && !data.is_empty() {
                    let event = serde_json::from_str(&data).map_err(|e| {
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("bad change event {data:?}: {e}"),
                        )
                    })?;
                    return Ok(Some(event));
                }
                data.clear();
                kind.clear();
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "data" => {
                    if !data.is_empty() {
                        data.push('\n');
                    }
                    data.push_str(value);
                }
                "event" => kind = value.to_string(),
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(text: &'static str) -> EventStream {
        EventStream::new(std::io::Cursor::new(text.as_bytes()))
    }

    #[test]
    fn a_controller_whose_name_does_not_resolve_is_passed_over_like_one_that_does_not_answer() {
        let client = Client::new("http://a.invalid:1,http://b.invalid:2", None).unwrap();
        let mut tried = Vec::new();
        let answered = client.with_failover(|base| {
            tried.push(base.to_string());
            if base == "http://a.invalid:1" {
                Err(CliError::Unresolved {
                    url: base.to_string(),
                    reason: "no such name".into(),
                })
            } else {
                Ok(base.to_string())
            }
        });
        assert_eq!(answered.unwrap(), "http://b.invalid:2");
        assert_eq!(tried, ["http://a.invalid:1", "http://b.invalid:2"]);
        // The next request starts at the one that answered.
        assert_eq!(
            client.with_failover(|base| Ok(base.to_string())).unwrap(),
            "http://b.invalid:2"
        );
        // A failure after the request may have been sent is not passed over:
        // the request is not sent twice.
        let mut tried = 0;
        let broken = client.with_failover(|base| -> Result<(), CliError> {
            tried += 1;
            Err(CliError::Transport {
                url: base.to_string(),
                reason: "connection reset".into(),
            })
        });
        assert!(matches!(broken, Err(CliError::Transport { .. })));
        assert_eq!(tried, 1);
    }

    #[test]
    fn a_url_must_be_http_or_https_with_a_host() {
        assert_eq!(
            Client::new("http://127.0.0.1:17070/", None).unwrap().url(),
            "http://127.0.0.1:17070"
        );
        assert_eq!(
            Client::new("https://controller.invalid:17070", None)
                .unwrap()
                .url(),
            "https://controller.invalid:17070"
        );
        for bad in [
            "127.0.0.1:17070",
            "http://",
            "https://",
            "ftp://x",
            "http://host/path",
            "http://a:1,ftp://b",
            "http://a:1,",
            ",http://a:1",
        ] {
            let e = Client::new(bad, None).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
            // Given with --url, BERTH_URL or to login: named as what it is.
            assert!(
                e.to_string().starts_with(&format!(
                    "invalid controller URL {bad:?}: expected http://host[:port]"
                )),
                "{e}"
            );
        }
        let several = Client::new(" http://a.invalid:1/ , https://b.invalid:2", None).unwrap();
        assert_eq!(
            several.urls(),
            ["http://a.invalid:1", "https://b.invalid:2"]
        );
        assert_eq!(several.url(), "http://a.invalid:1");
    }

    /// A port on loopback that nothing listens on.
    fn closed_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    }

    /// A one-route HTTP server on loopback answering `{"answered":true}`
    /// to each of `requests` connections, and the requests' first lines.
    fn answering_server(requests: usize) -> (u16, std::thread::JoinHandle<Vec<String>>) {
        use std::io::Write;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = std::thread::spawn(move || {
            let mut lines = Vec::new();
            for _ in 0..requests {
                let (stream, _) = listener.accept().unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut first = String::new();
                reader.read_line(&mut first).unwrap();
                lines.push(first.trim().to_string());
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap() > 2 {
                    line.clear();
                }
                let body = r#"{"answered":true}"#;
                write!(
                    &stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
                .unwrap();
            }
            lines
        });
        (port, served)
    }

    #[test]
    fn a_request_goes_to_the_next_controller_when_one_cannot_be_connected_to() {
        let down = closed_port();
        let (up, served) = answering_server(2);
        let client = Client::new(
            &format!("http://127.0.0.1:{down},http://127.0.0.1:{up}"),
            Some("t".into()),
        )
        .unwrap();
        let answer: serde_json::Value = client.get("/v1/status").unwrap();
        assert_eq!(answer["answered"], true);
        assert_eq!(client.url(), format!("http://127.0.0.1:{up}"));
        // The next request goes straight to the one that answered.
        let _: serde_json::Value = client.get("/v1/machines").unwrap();
        assert_eq!(
            served.join().unwrap(),
            ["GET /v1/status HTTP/1.1", "GET /v1/machines HTTP/1.1"]
        );
    }

    #[test]
    fn when_no_controller_can_be_connected_to_the_error_names_them_all() {
        let (a, b) = (closed_port(), closed_port());
        let client =
            Client::new(&format!("http://127.0.0.1:{a},http://127.0.0.1:{b}"), None).unwrap();
        let e = client.get::<serde_json::Value>("/v1/status").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cannot reach the berth controller at http://127.0.0.1:{a}, http://127.0.0.1:{b}: is 'berth serve' running?"
            )
        );
    }

    #[test]
    fn a_ca_file_without_a_certificate_is_refused_before_anything_is_sent() {
        let ca = TrustedCa {
            pem: b"not a certificate".to_vec(),
            origin: "--ca-cert /tmp/x.pem".into(),
        };
        let e = Client::with_ca("https://controller.invalid:1", None, Some(&ca)).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string()
                .contains("--ca-cert /tmp/x.pem holds no PEM certificate"),
            "{e}"
        );
        // Plain HTTP has no use for it.
        assert!(Client::with_ca("http://127.0.0.1:1", None, Some(&ca)).is_ok());
    }

    #[test]
    fn the_token_is_not_printed_in_debug_output() {
        let client = Client::new("http://localhost:1", Some("s3cret".into())).unwrap();
        assert!(!format!("{client:?}").contains("s3cret"));
    }

    #[test]
    fn an_error_body_gives_the_servers_message_as_it_is() {
        let body =
            r#"{"error":{"code":"conflict","message":"machine 1 is not in provisioning error"}}"#;
        match api_error(409, body) {
            CliError::Api { status, message } => {
                assert_eq!(status, 409);
                assert_eq!(message, "machine 1 is not in provisioning error");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_error_from_something_else_shows_the_status_and_body() {
        assert_eq!(
            api_error(502, "<html>Bad Gateway</html>").to_string(),
            "HTTP 502: <html>Bad Gateway</html>"
        );
        assert_eq!(api_error(500, "").to_string(), "HTTP 500 with no message");
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(segment("us-east-1a"), "us-east-1a");
        assert_eq!(segment("a b/c"), "a%20b%2Fc");
    }

    #[test]
    fn change_events_are_read_and_comments_skipped() {
        let mut events = stream(
            ": berth change log after revision 4\n\n\
             id: 5\nevent: change\ndata: {\"revision\":5,\"entity\":\"machine\",\"id\":\"0\",\"change\":\"created\",\"detail\":\"\",\"origin\":\"user\",\"at_ms\":1}\n\n\
             : keep-alive\n\n\
             id: 6\r\nevent: change\r\ndata: {\"revision\":6,\"entity\":\"unit\",\"id\":\"a/0\",\"change\":\"removed\",\"detail\":\"\",\"origin\":\"user\",\"at_ms\":2}\r\n\r\n",
        );
        let first = events.next_event().unwrap().unwrap();
        assert_eq!((first.revision, first.entity.as_str()), (5, "machine"));
        let second = events.next_event().unwrap().unwrap();
        assert_eq!((second.revision, second.id.as_str()), (6, "a/0"));
        assert!(events.next_event().unwrap().is_none());
    }

    #[test]
    fn events_of_other_types_are_skipped() {
        let mut events = stream("event: hello\ndata: {}\n\n");
        assert!(events.next_event().unwrap().is_none());
    }

    #[test]
    fn a_change_event_that_does_not_parse_is_invalid_data() {
        let mut events = stream("event: change\ndata: {\"revision\": \"x\"}\n\n");
        let e = events.next_event().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    }
}
