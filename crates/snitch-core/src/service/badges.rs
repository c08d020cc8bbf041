//! The case's badge key, and the snitches a badge key reads (docs/rules.md#badges).

use super::*;

impl SnitchService {
    /// The case's badge key, made on first use (docs/rules.md#badges): it reads badges
    /// and nothing else.
    pub async fn badge_key(&self, case: &Case) -> Result<String, ServiceError> {
        ensure_active(case)?;
        if let Some(key) = self.storage.badge_key(&case.id).await? {
            return Ok(key);
        }
        // Two first uses at once (two tabs, two servers) must not each hand out a key of
        // their own: the store keeps the first and both answer it.
        self.store_new_badge_key(|key| async move {
            self.storage.badge_key_or_insert(&case.id, &key).await
        })
        .await
    }

    /// Gives the case a new badge key: badges under the old one are gone.
    pub async fn rotate_badge_key(&self, case: &Case) -> Result<String, ServiceError> {
        ensure_active(case)?;
        self.store_new_badge_key(|key| async move {
            self.storage
                .set_badge_key(&case.id, &key)
                .await
                .map(|()| key)
        })
        .await
    }

    /// Draws a new badge key and hands it to `store`, which answers the key the case
    /// holds then; a key another case holds is drawn again.
    async fn store_new_badge_key<Store, Stored>(&self, store: Store) -> Result<String, ServiceError>
    where
        Store: Fn(String) -> Stored,
        Stored: std::future::Future<Output = Result<String, StorageError>>,
    {
        for _ in 0..TOKEN_ATTEMPTS {
            match store(self.tokens.new_token().to_string()).await {
                Ok(held) => return Ok(held),
                Err(StorageError::DuplicateToken) => continue,
                Err(other) => return Err(other.into()),
            }
        }
        Err(StorageError::DuplicateToken.into())
    }

    /// The snitches a badge key reads: every snitch of its case (a case on hold too:
    /// a badge shows health, not the account). `NotFound` for a key no case holds.
    pub async fn badge_snitches(&self, key: &str) -> Result<Vec<Snitch>, ServiceError> {
        // Keys are tokens: anything else names no case and is not handed to the store.
        if Token::parse(key).is_err() {
            return Err(ServiceError::NotFound);
        }
        let case = self
            .storage
            .case_of_badge_key(key)
            .await?
            .ok_or(ServiceError::NotFound)?;
        Ok(self.storage.snitches(&case, &[]).await?)
    }
}
