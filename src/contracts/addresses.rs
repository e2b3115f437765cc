//! The host a URL names, and whether a host is this machine's own: what
//! the checks of the controller's address (the EC2 preflight, the SSH
//! enlistment) and the TLS certificate's names read from a URL.

use std::net::IpAddr;

/// The host of `[scheme://][user@]host[:port][/path][?query][#fragment]`
/// (an IPv6 address without its brackets), or `None` if `url` names none,
/// or one with whitespace or control characters in it.
pub fn url_host(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']')?.0,
        None => authority.split(':').next()?,
    };
    (!host.is_empty() && !host.chars().any(|c| c.is_whitespace() || c.is_control())).then_some(host)
}

/// Whether `host`, a name or an address, is a loopback one: `localhost`,
/// a name under `.localhost`, or a loopback address.
pub fn is_loopback(host: &str) -> bool {
    is_localhost_name(host) || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether `host` is `localhost` or a name under `.localhost`.
pub fn is_localhost_name(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost") || host.to_ascii_lowercase().ends_with(".localhost")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_of_a_url_is_its_authority_without_user_port_or_brackets() {
        assert_eq!(url_host("https://[::1]:17070/x"), Some("::1"));
        assert_eq!(url_host("http://user@localhost"), Some("localhost"));
        assert_eq!(
            url_host("http://user@host.invalid:80/x"),
            Some("host.invalid")
        );
        assert_eq!(url_host("https://host.invalid?x#y"), Some("host.invalid"));
        assert_eq!(url_host("host.invalid:17070"), Some("host.invalid"));
        assert_eq!(url_host("http://"), None);
        assert_eq!(url_host("https://"), None);
        assert_eq!(url_host("http://bad host"), None);
    }

    #[test]
    fn hosts_are_loopback_by_name_or_address() {
        for host in [
            "localhost",
            "LocalHost",
            "db.localhost",
            "127.0.0.1",
            "127.8.9.10",
            "::1",
        ] {
            assert!(is_loopback(host), "{host}");
        }
        for host in [
            "db1.example.com",
            "10.0.0.3",
            "0.0.0.0",
            "::",
            "localhost.example.com",
        ] {
            assert!(!is_loopback(host), "{host}");
        }
    }
}
