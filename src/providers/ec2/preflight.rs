//! What an EC2 instance needs from berth before one is worth launching,
//! checked when the controller starts (a failure stops the start) and
//! again before the provider's first launch (a failure there is a
//! provisioning error on the machine, not a launch that can only time
//! out):
//!
//! - **A controller URL instances can reach.** Judged by its form only,
//!   never by connecting (the instances connect, not the controller): not
//!   a loopback or unspecified address, not `localhost`.
//! - **An agent binary.** Either `agent_binary_url`, which must answer a
//!   `HEAD` request with a success, or `image_has_agent = true`, the
//!   operator's word that the images already carry `/usr/local/bin/berth`.
//!
//! The credentials and the region are checked by opening the provider,
//! which reads the region's zones and instance types (one cheap call
//! each).

use std::net::IpAddr;
use std::time::Duration;

use crate::contracts::addresses::{is_localhost_name, url_host};
use crate::providers::ec2::config::Ec2Config;

/// How long the agent binary's URL has to answer.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// Why instances launched now could not work.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PreflightError {
    #[error("controller_url is not set, so instances would be told to reach the controller at its listen address {0}, which they cannot reach: set controller_url to an address of this controller that the instances can reach, such as https://controller.example.com:17070")]
    NoControllerUrl(String),
    #[error("controller_url {url:?} names {why}, which an instance cannot reach: set controller_url to an address of this controller that the instances can reach")]
    UnreachableControllerUrl { url: String, why: &'static str },
    #[error("controller_url {0:?} is not a URL: expected http://host:port or https://host:port")]
    BadControllerUrl(String),
    #[error("instances would have no berth agent: stock images do not carry it; set provider.ec2.agent_binary_url to where instances can download the berth binary, or provider.ec2.image_has_agent = true if your images have /usr/local/bin/berth")]
    NoAgentBinary,
    #[error("provider.ec2.agent_binary_url {url:?} cannot be used: {why}; instances could not download the berth agent")]
    AgentBinaryUnavailable {
        url: String,
        why: String,
        /// Its server could not be reached or failed (a 5xx): the check
        /// may pass if tried again, where a 4xx or a bad URL will not.
        for_now: bool,
    },
}

impl PreflightError {
    /// Whether the check may pass if tried again shortly: the launches it
    /// held back wait and retry rather than fail for good.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            PreflightError::AgentBinaryUnavailable { for_now: true, .. }
        )
    }
}

/// Checks `controller_url` (or, when it is not set, the `listen` address
/// the controller would tell instances instead) by its form alone.
///
/// # Errors
///
/// [`PreflightError`] naming `controller_url` and why instances could not
/// reach it.
pub fn check_controller_url(
    controller_url: Option<&str>,
    listen: &str,
) -> Result<(), PreflightError> {
    let Some(url) = controller_url else {
        return Err(PreflightError::NoControllerUrl(listen.to_string()));
    };
    let host = Some(url)
        .filter(|url| url.starts_with("http://") || url.starts_with("https://"))
        .and_then(url_host)
        .ok_or_else(|| PreflightError::BadControllerUrl(url.to_string()))?;
    let unreachable = |why| {
        Err(PreflightError::UnreachableControllerUrl {
            url: url.to_string(),
            why,
        })
    };
    if is_localhost_name(host) {
        return unreachable("localhost");
    }
    match host.parse::<IpAddr>() {
        Ok(ip) if ip.is_loopback() => unreachable("a loopback address"),
        Ok(ip) if ip.is_unspecified() => unreachable("the unspecified address"),
        _ => Ok(()),
    }
}

/// Checks that instances will have an agent: the image carries it, or
/// `agent_binary_url` answers a `HEAD` request with a success.
///
/// # Errors
///
/// [`PreflightError::NoAgentBinary`], or
/// [`PreflightError::AgentBinaryUnavailable`] with the answer or the
/// failure.
pub async fn check_agent_binary(config: &Ec2Config) -> Result<(), PreflightError> {
    let Some(url) = config.agent_binary_url.clone() else {
        return if config.image_has_agent {
            Ok(())
        } else {
            Err(PreflightError::NoAgentBinary)
        };
    };
    let unavailable = |why: String, for_now: bool| PreflightError::AgentBinaryUnavailable {
        url: url.clone(),
        why,
        for_now,
    };
    let target = url.clone();
    // The status it answered, or why there was no answer.
    let answer = tokio::task::spawn_blocking(move || {
        match ureq::AgentBuilder::new()
            .timeout(HEAD_TIMEOUT)
            .build()
            .head(&target)
            .call()
        {
            Ok(response) => Ok(response.status()),
            Err(ureq::Error::Status(status, _)) => Ok(status),
            Err(ureq::Error::Transport(transport)) => {
                // No answer for now (the name, the connection or the
                // link failed), rather than a URL that cannot work.
                let for_now = matches!(
                    transport.kind(),
                    ureq::ErrorKind::Dns | ureq::ErrorKind::ConnectionFailed | ureq::ErrorKind::Io
                );
                Err((transport.to_string(), for_now))
            }
        }
    })
    .await
    .map_err(|e| unavailable(e.to_string(), true))?;
    match answer {
        Ok(status) if (200..300).contains(&status) => Ok(()),
        // A server failing, overloaded (429) or timed out (408) for now.
        Ok(status) => Err(unavailable(
            format!("it answered {status}"),
            status >= 500 || status == 429 || status == 408,
        )),
        Err((why, for_now)) => Err(unavailable(why, for_now)),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    #[test]
    fn a_reachable_controller_url_passes() {
        for url in [
            "https://controller.invalid:17070",
            "http://203.0.113.7:17070",
            "https://[2001:db8::1]:17070/",
            "http://user@controller.invalid",
        ] {
            assert_eq!(
                check_controller_url(Some(url), "127.0.0.1:17070"),
                Ok(()),
                "{url}"
            );
        }
    }

    #[test]
    fn loopback_unspecified_and_localhost_controller_urls_are_refused_by_name() {
        for (url, why) in [
            ("http://127.0.0.1:17070", "a loopback address"),
            ("http://127.8.9.10", "a loopback address"),
            ("https://[::1]:17070", "a loopback address"),
            ("http://0.0.0.0:17070", "the unspecified address"),
            ("http://[::]:17070", "the unspecified address"),
            ("http://localhost:17070", "localhost"),
            ("http://LOCALHOST", "localhost"),
            ("http://berth.localhost:1", "localhost"),
        ] {
            let e = check_controller_url(Some(url), "127.0.0.1:17070").unwrap_err();
            assert_eq!(
                e,
                PreflightError::UnreachableControllerUrl {
                    url: url.to_string(),
                    why
                }
            );
            assert!(e.to_string().starts_with("controller_url"), "{e}");
        }
    }

    #[test]
    fn a_missing_or_malformed_controller_url_is_refused_by_name() {
        let e = check_controller_url(None, "127.0.0.1:17070").unwrap_err();
        assert!(e.to_string().contains("controller_url is not set"), "{e}");
        assert!(e.to_string().contains("127.0.0.1:17070"), "{e}");
        for bad in [
            "controller.invalid:17070",
            "ftp://x",
            "http://",
            "http://[::1",
            "http:// x",
        ] {
            assert_eq!(
                check_controller_url(Some(bad), "x"),
                Err(PreflightError::BadControllerUrl(bad.to_string())),
                "{bad}"
            );
        }
    }

    /// A one-shot HTTP server on loopback answering every request with
    /// `status`; returns its URL.
    fn answering(status: u16) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/berth", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for stream in listener.incoming().take(1) {
                let mut stream = stream.unwrap();
                let mut request = [0u8; 1024];
                let _ = stream.read(&mut request);
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
            }
        });
        url
    }

    fn with_url(url: Option<String>, image_has_agent: bool) -> Ec2Config {
        Ec2Config {
            agent_binary_url: url,
            image_has_agent,
            ..Ec2Config::for_region("us-east-1")
        }
    }

    #[tokio::test]
    async fn an_agent_binary_must_be_downloadable_or_in_the_image() {
        assert_eq!(check_agent_binary(&with_url(None, true)).await, Ok(()));
        assert_eq!(
            check_agent_binary(&with_url(None, false)).await,
            Err(PreflightError::NoAgentBinary)
        );
        assert_eq!(
            check_agent_binary(&with_url(Some(answering(200)), false)).await,
            Ok(())
        );
        let missing = answering(404);
        let e = check_agent_binary(&with_url(Some(missing.clone()), true))
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("provider.ec2.agent_binary_url {missing:?} cannot be used: it answered 404; instances could not download the berth agent")
        );
        assert!(!e.is_transient(), "a URL that is not there stays so");
        // A server that fails for now: launches wait and try again.
        for status in [503, 429, 408] {
            let failing = check_agent_binary(&with_url(Some(answering(status)), true))
                .await
                .unwrap_err();
            assert!(failing.is_transient(), "{status}: {failing}");
        }
        // Nothing listens there any more.
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("http://{}/berth", listener.local_addr().unwrap())
        };
        let e = check_agent_binary(&with_url(Some(closed), false))
            .await
            .unwrap_err();
        assert!(
            matches!(e, PreflightError::AgentBinaryUnavailable { .. }),
            "{e}"
        );
        assert!(e.is_transient(), "nothing answers now: {e}");
    }

    #[tokio::test]
    async fn an_https_agent_binary_url_is_checked_over_tls() {
        // A listener that reads the first byte a client sends, then hangs
        // up: a TLS client's first byte is a handshake record's (0x16).
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("https://{}/berth", listener.local_addr().unwrap());
        let (first_byte, received) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            if let Ok((mut stream, _)) = listener.accept() {
                let mut byte = [0u8; 1];
                let _ = stream.read_exact(&mut byte);
                let _ = first_byte.send(byte[0]);
            }
        });
        let e = check_agent_binary(&with_url(Some(url), false))
            .await
            .unwrap_err();
        assert!(
            matches!(e, PreflightError::AgentBinaryUnavailable { .. }),
            "{e}"
        );
        assert!(!e.to_string().contains("Unknown Scheme"), "{e}");
        assert_eq!(
            received.recv_timeout(std::time::Duration::from_secs(5)),
            Ok(0x16)
        );
    }
}
