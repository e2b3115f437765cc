//! Secrets: the admin token, webhook secrets, agents' one-time passwords
//! and credentials. How they are made, how they are kept (only SHA-256
//! hashes are stored) and how a presented secret is checked.
//!
//! The secrets are 256-bit random values, so a fast hash is enough (there
//! is nothing to brute-force), and comparisons are made in constant time.

use std::fmt;

use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A secret that never prints.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A fresh random secret: 32 bytes, hex.
pub fn new_secret() -> Secret {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    Secret::new(to_hex(&bytes))
}

fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut hex = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        hex.push(char::from(DIGITS[usize::from(b >> 4)]));
        hex.push(char::from(DIGITS[usize::from(b & 0x0f)]));
    }
    hex
}

/// The stored form of a secret.
pub fn hash_secret(secret: &str) -> String {
    to_hex(&Sha256::digest(secret.as_bytes()))
}

/// Whether `secret` hashes to `stored_hash`, in time independent of where
/// they differ.
pub fn secret_matches(secret: &str, stored_hash: &str) -> bool {
    let given = hash_secret(secret);
    given.len() == stored_hash.len()
        && given
            .bytes()
            .zip(stored_hash.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_matches_only_its_own_hash() {
        let secret = new_secret();
        let hash = hash_secret(secret.expose());
        assert!(secret_matches(secret.expose(), &hash));
        assert!(!secret_matches("not it", &hash));
        assert!(!secret_matches(secret.expose(), "short"));
    }

    #[test]
    fn fresh_secrets_are_64_hex_digits_and_differ() {
        let (a, b) = (new_secret(), new_secret());
        assert_eq!(a.expose().len(), 64);
        assert!(a.expose().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn secrets_never_print() {
        assert_eq!(format!("{:?}", new_secret()), "Secret(***)");
    }
}
