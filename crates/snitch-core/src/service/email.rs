//! Check-ins by e-mail through the service (docs/rules.md#e-mail-check-ins): whether an
//! address names a snitch, and the check-in a decoded message becomes.

use super::*;
use crate::email::{email_check_in, EmailVerdict};

impl SnitchService {
    /// Whether `token` names a snitch: what an SMTP listener asks before it accepts a
    /// recipient, so that a message to no snitch is refused, not accepted and lost.
    pub async fn is_check_in_address(&self, token: &Token) -> Result<bool, ServiceError> {
        // The check-in's own read: a store with a check-in cache answers the reads of the
        // message's check-in from what this one fetched.
        Ok(self.storage.snitch_with_case(token).await?.is_some())
    }

    /// Records a check-in e-mail of the snitch `token`: `subject` is its message, `body`
    /// (already decoded to text) its output, and the snitch's e-mail keywords decide
    /// whether it is a success, a failure, a run's start or output only. Returns once it
    /// is stored, as [`SnitchService::report`] does, with what the keywords made of it.
    pub async fn email_check_in(
        &self,
        token: Token,
        subject: &str,
        body: &str,
    ) -> Result<(Snitch, EmailVerdict), ServiceError> {
        let (snitch, _) = self
            .storage
            .snitch_with_case(&token)
            .await?
            .ok_or(ServiceError::NotFound)?;
        let verdict = snitch.email_keywords().classify(subject, body);
        let report = email_check_in(verdict, subject, body, self.ping_body_limit);
        Ok((self.report(token, report).await?, verdict))
    }
}
