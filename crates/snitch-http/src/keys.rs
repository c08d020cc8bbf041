//! API keys: random, shown once, kept only as SHA-256 digests, revocable.
//!
//! A presented key is hashed and its digest looked up; the key itself is never compared,
//! and the digest found is compared in constant time, so response timing can reveal
//! nothing about a valid key.
//!
//! [`ApiKeys::with_storage`] keeps keys in the store (as hex digests: the store and the
//! core never see a key nor hash one). Lookups stay in memory, on a copy of the store's
//! live keys that [`ApiKeys::run_refresh`] reloads every [`REFRESH_EVERY`]: a key revoked
//! or made by another server (or an admin command) takes effect here within that time.
//! Uses are noted in memory and written to the store with each refresh.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use sha2::{Digest, Sha256};
use snitch_core::{
    ApiKeyRecord, CaseId, Clock, RandomTokens, Storage, StorageError, Timestamp, TokenSource,
};
use subtle::ConstantTimeEq;

/// How often a store-backed [`ApiKeys`] reloads the live keys from the store.
pub const REFRESH_EVERY: Duration = Duration::from_millis(500);

/// How many characters of a key are kept in the clear, to tell keys apart in lists.
pub const PREFIX_CHARS: usize = 6;

/// The shortest key accepted in configuration.
pub const MIN_KEY_CHARS: usize = 32;

/// The SHA-256 digest of an API key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyDigest([u8; 32]);

impl KeyDigest {
    /// The digest of a plain key.
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

    /// The digest as lowercase hex, as stored.
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

/// The API keys of all cases, by digest: in memory only ([`ApiKeys::new`]) or backed by
/// the store ([`ApiKeys::with_storage`]).
#[derive(Default)]
pub struct ApiKeys {
    by_digest: RwLock<HashMap<KeyDigest, Known>>,
    store: Option<(Arc<dyn Storage>, Arc<dyn Clock>)>,
    /// Uses not yet written to the store, by key id: the latest time.
    used: Mutex<HashMap<String, Timestamp>>,
}

impl fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKeys")
            .field("backed_by_store", &self.store.is_some())
            .finish_non_exhaustive()
    }
}

/// A live key: its id in the store (none for keys kept only in memory) and its case.
#[derive(Debug, Clone)]
struct Known {
    id: Option<String>,
    case: CaseId,
}

/// A key just made: shown once, then only its record is kept.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NewKey {
    /// The plain key: shown to its owner once, never stored.
    pub key: String,
    /// What is stored: the digest, its prefix, the case and label.
    pub record: ApiKeyRecord,
}

impl ApiKeys {
    /// Keys kept in memory only: lost when the process ends.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keys kept in `storage`; `clock` stamps their creation and use. Call
    /// [`ApiKeys::refresh`] (or run [`ApiKeys::run_refresh`]) to load them.
    pub fn with_storage(storage: Arc<dyn Storage>, clock: Arc<dyn Clock>) -> Self {
        ApiKeys {
            store: Some((storage, clock)),
            ..Self::default()
        }
    }

    /// Makes a fresh key for `case` with a label and stores it (when backed by a store):
    /// the key is in the answer and nowhere else.
    pub async fn create(&self, case: &CaseId, label: &str) -> Result<NewKey, StorageError> {
        let key = random_key();
        let record = self.store_key(&key, case, label).await?;
        Ok(NewKey { key, record })
    }

    /// Adds a key given in plain text (from configuration), idempotently: stored once
    /// (when backed by a store), found again on later starts. A stored key of another
    /// case, or a short key, is an error; a key revoked in the store stays revoked.
    pub async fn ensure_plain(&self, key: &str, case: &CaseId, label: &str) -> Result<(), String> {
        if key.chars().count() < MIN_KEY_CHARS {
            return Err(format!(
                "an API key must have at least {MIN_KEY_CHARS} characters"
            ));
        }
        let Some((storage, _)) = &self.store else {
            self.add_digest(KeyDigest::of(key), case.clone());
            return Ok(());
        };
        let digest = KeyDigest::of(key).to_hex();
        let stored = storage.api_keys(None).await.map_err(|e| e.to_string())?;
        match stored.iter().find(|k| k.digest == digest) {
            Some(k) if k.case_id != *case => Err(format!(
                "a configured API key is stored for case {:?}",
                k.case_id.as_str()
            )),
            Some(_) => Ok(()),
            None => self
                .store_key(key, case, label)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
        }
    }

    async fn store_key(
        &self,
        key: &str,
        case: &CaseId,
        label: &str,
    ) -> Result<ApiKeyRecord, StorageError> {
        let digest = KeyDigest::of(key);
        let (created_at, storage) = match &self.store {
            Some((storage, clock)) => (clock.now(), Some(storage)),
            None => (snitch_core::SystemClock.now(), None),
        };
        let record = ApiKeyRecord {
            id: RandomTokens.new_token().as_str().to_owned(),
            case_id: case.clone(),
            digest: digest.to_hex(),
            prefix: key.chars().take(PREFIX_CHARS).collect(),
            label: label.to_owned(),
            created_at,
            last_used_at: None,
            revoked: false,
        };
        if let Some(storage) = storage {
            storage.insert_api_key(&record).await?;
        }
        self.write().insert(
            digest,
            Known {
                id: storage.map(|_| record.id.clone()),
                case: case.clone(),
            },
        );
        Ok(record)
    }

    /// Reloads the live (not revoked) keys from the store and writes the uses noted since
    /// the last refresh. Keys kept only in memory are left alone.
    pub async fn refresh(&self) -> Result<(), StorageError> {
        let Some((storage, _)) = &self.store else {
            return Ok(());
        };
        let used: Vec<(String, Timestamp)> =
            std::mem::take(&mut *self.used.lock().unwrap_or_else(|e| e.into_inner()))
                .into_iter()
                .collect();
        storage.record_api_key_use(&used).await?;
        let mut live = HashMap::new();
        for key in storage.api_keys(None).await? {
            if key.revoked {
                continue;
            }
            let Some(digest) = KeyDigest::from_hex(&key.digest) else {
                tracing::warn!(id = %key.id, "a stored API key has an unreadable digest");
                continue;
            };
            live.insert(
                digest,
                Known {
                    id: Some(key.id),
                    case: key.case_id,
                },
            );
        }
        let mut keys = self.write();
        keys.retain(|_, k| k.id.is_none());
        keys.extend(live);
        Ok(())
    }

    /// Refreshes every `every` until `stop` completes, then writes the last uses.
    pub async fn run_refresh(self: Arc<Self>, every: Duration, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            tokio::select! {
                () = &mut stop => break,
                () = tokio::time::sleep(every) => {}
            }
            if let Err(e) = self.refresh().await {
                tracing::warn!(error = %e, "cannot refresh the API keys from the store");
            }
        }
        if let Err(e) = self.refresh().await {
            tracing::warn!(error = %e, "cannot record the last uses of API keys");
        }
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

    /// Adds a key, by digest, to this process's memory only.
    pub fn add_digest(&self, digest: KeyDigest, case: CaseId) {
        self.write().insert(digest, Known { id: None, case });
    }

    /// Makes a fresh random key for `case`, in memory only, and returns it: the only time
    /// it is shown.
    pub fn generate(&self, case: CaseId) -> String {
        let key = random_key();
        self.add_digest(KeyDigest::of(&key), case);
        key
    }

    /// Revokes a key; `false` when it was not known.
    pub fn revoke(&self, digest: &KeyDigest) -> bool {
        self.write().remove(digest).is_some()
    }

    /// The case a presented key belongs to; a use of a stored key is noted.
    pub fn case_of(&self, key: &str) -> Option<(KeyDigest, CaseId)> {
        self.case_of_digest(&KeyDigest::of(key))
    }

    /// The case of a key known by its digest (e.g. the key a dashboard session signed in
    /// with), while the key is live: `None` once it is revoked. A use is noted.
    pub fn case_of_digest(&self, presented: &KeyDigest) -> Option<(KeyDigest, CaseId)> {
        let presented = *presented;
        let keys = self.by_digest.read().unwrap_or_else(|e| e.into_inner());
        let (stored, known) = keys.get_key_value(&presented)?;
        if !bool::from(stored.0.ct_eq(&presented.0)) {
            return None;
        }
        if let (Some(id), Some((_, clock))) = (&known.id, &self.store) {
            let now = clock.now();
            let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
            let last = used.entry(id.clone()).or_insert(now);
            *last = (*last).max(now);
        }
        Some((*stored, known.case.clone()))
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<KeyDigest, Known>> {
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

    #[tokio::test]
    async fn stored_keys_are_found_after_a_refresh_and_revoked_ones_are_dropped() {
        use snitch_core::{Case, ManualClock};
        let storage: Arc<dyn Storage> = Arc::new(snitch_store_memory::MemoryStorage::new());
        storage
            .upsert_case(&Case::new(acme()))
            .await
            .expect("upsert");
        let clock = Arc::new(ManualClock::new(
            chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("valid"),
        ));
        let keys = ApiKeys::with_storage(storage.clone(), clock.clone());
        let made = keys.create(&acme(), "ci").await.expect("create");
        assert_eq!(made.record.prefix, &made.key[..PREFIX_CHARS]);
        assert_eq!(made.record.digest, KeyDigest::of(&made.key).to_hex());

        // Another server (a second ApiKeys on the same store) sees it after a refresh.
        let other = ApiKeys::with_storage(storage.clone(), clock.clone());
        assert!(other.case_of(&made.key).is_none());
        other.refresh().await.expect("refresh");
        assert_eq!(other.case_of(&made.key).map(|(_, c)| c), Some(acme()));
        other.refresh().await.expect("refresh");
        let stored = storage.api_keys(None).await.expect("list");
        assert_eq!(
            stored[0].last_used_at,
            Some(clock.now()),
            "the use is recorded"
        );

        assert!(storage
            .revoke_api_key(&made.record.id)
            .await
            .expect("revoke"));
        assert!(keys.case_of(&made.key).is_some(), "until the refresh");
        keys.refresh().await.expect("refresh");
        assert!(keys.case_of(&made.key).is_none());
    }

    #[tokio::test]
    async fn configured_keys_are_stored_once_and_belong_to_one_case() {
        use snitch_core::{Case, ManualClock};
        let storage: Arc<dyn Storage> = Arc::new(snitch_store_memory::MemoryStorage::new());
        let beta = CaseId::parse("beta").expect("valid");
        for id in [acme(), beta.clone()] {
            storage.upsert_case(&Case::new(id)).await.expect("upsert");
        }
        let clock = Arc::new(ManualClock::new(
            chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("valid"),
        ));
        let key = "k".repeat(40);
        for _ in 0..2 {
            let keys = ApiKeys::with_storage(storage.clone(), clock.clone());
            keys.ensure_plain(&key, &acme(), "configuration")
                .await
                .expect("stored");
        }
        assert_eq!(storage.api_keys(None).await.expect("list").len(), 1);
        let keys = ApiKeys::with_storage(storage.clone(), clock);
        let err = keys.ensure_plain(&key, &beta, "configuration").await;
        assert!(err.is_err(), "another case's key");
        assert!(keys.ensure_plain("short", &acme(), "").await.is_err());
    }

    #[test]
    fn digests_round_trip_through_hex() {
        let d = KeyDigest::of("x");
        assert_eq!(KeyDigest::from_hex(&d.to_hex()), Some(d));
        assert_eq!(KeyDigest::from_hex("zz"), None);
    }
}
