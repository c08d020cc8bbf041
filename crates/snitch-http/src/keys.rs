//! API keys: random, shown once, kept only as SHA-256 digests, revocable.
//!
//! A presented key is hashed and its digest looked up; the key itself is never compared,
//! and the digest found is compared in constant time, so response timing can reveal
//! nothing about a valid key.

use std::collections::HashMap;
use std::fmt;
use std::sync::RwLock;

use sha2::{Digest, Sha256};
use snitch_core::{CaseId, RandomTokens, TokenSource};
use subtle::ConstantTimeEq;

/// The shortest key accepted in configuration.
pub const MIN_KEY_CHARS: usize = 32;

/// The SHA-256 digest of an API key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyDigest([u8; 32]);

impl KeyDigest {
    pub fn of(key: &str) -> Self {
        KeyDigest(Sha256::digest(key.as_bytes()).into())
    }

    /// Reads a digest written by [`KeyDigest::to_hex`].
    pub fn from_hex(hex: &str) -> Option<Self> {
        if hex.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(KeyDigest(out))
    }

    pub fn to_hex(self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only a prefix: enough to tell keys apart in logs.
        write!(f, "KeyDigest({}…)", &self.to_hex()[..8])
    }
}

/// The API keys of all cases, by digest.
#[derive(Debug, Default)]
pub struct ApiKeys {
    by_digest: RwLock<HashMap<KeyDigest, CaseId>>,
}

impl ApiKeys {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a key given in plain text (from configuration); it is hashed at once.
    pub fn add_plain(&self, key: &str, case: CaseId) -> Result<KeyDigest, String> {
        if key.chars().count() < MIN_KEY_CHARS {
            return Err(format!(
                "an API key must have at least {MIN_KEY_CHARS} characters"
            ));
        }
        let digest = KeyDigest::of(key);
        self.add_digest(digest, case);
        Ok(digest)
    }

    pub fn add_digest(&self, digest: KeyDigest, case: CaseId) {
        self.write().insert(digest, case);
    }

    /// Makes a fresh random key for `case` and returns it: the only time it is shown.
    pub fn generate(&self, case: CaseId) -> String {
        let key = random_key();
        self.add_digest(KeyDigest::of(&key), case);
        key
    }

    /// Revokes a key; `false` when it was not known.
    pub fn revoke(&self, digest: &KeyDigest) -> bool {
        self.write().remove(digest).is_some()
    }

    /// The case a presented key belongs to.
    pub fn case_of(&self, key: &str) -> Option<(KeyDigest, CaseId)> {
        let presented = KeyDigest::of(key);
        let keys = self.by_digest.read().unwrap_or_else(|e| e.into_inner());
        let (stored, case) = keys.get_key_value(&presented)?;
        bool::from(stored.0.ct_eq(&presented.0)).then(|| (*stored, case.clone()))
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<KeyDigest, CaseId>> {
        self.by_digest.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// 40 random characters from `[a-z0-9]` (about 206 bits), built from two snitch tokens
/// so that one CSPRNG serves both.
fn random_key() -> String {
    format!("{}{}", RandomTokens.new_token(), RandomTokens.new_token())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acme() -> CaseId {
        CaseId::parse("acme").expect("valid")
    }

    #[test]
    fn keys_are_found_by_digest_and_can_be_revoked() {
        let keys = ApiKeys::new();
        let key = keys.generate(acme());
        assert_eq!(key.len(), 40);
        let (digest, case) = keys.case_of(&key).expect("known key");
        assert_eq!(case, acme());
        assert!(keys
            .case_of("some other key that is long enough!!")
            .is_none());
        assert!(keys.revoke(&digest));
        assert!(keys.case_of(&key).is_none());
    }

    #[test]
    fn short_plain_keys_are_refused() {
        let keys = ApiKeys::new();
        assert!(keys.add_plain("short", acme()).is_err());
        assert!(keys.add_plain(&"k".repeat(32), acme()).is_ok());
    }

    #[test]
    fn digests_round_trip_through_hex() {
        let d = KeyDigest::of("x");
        assert_eq!(KeyDigest::from_hex(&d.to_hex()), Some(d));
        assert_eq!(KeyDigest::from_hex("zz"), None);
    }
}
