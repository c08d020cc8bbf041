//! Errors of the service, each with its stable `type` (docs/api.md#errors).

use crate::storage::StorageError;
use crate::validation::Validations;

/// Why an operation of the service failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    /// No such snitch or hook of the case (another case's counts as none).
    #[error("the resource was not found")]
    NotFound,
    /// The request's attributes, each problem with its attribute.
    #[error("the request is invalid: {0}")]
    Invalid(Validations),
    /// The case holds its plan's maximum of snitches.
    #[error("the plan allows at most {max} snitches")]
    PlanLimitReached {
        /// The plan's maximum.
        max: u32,
    },
    /// The case is on hold.
    #[error("the account is on hold")]
    AccountOnHold,
    /// A failure of the store: `service_unavailable` when it is transient (retry) or the
    /// outcome of a commit is unknown, no stable type (500) otherwise.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl From<Validations> for ServiceError {
    fn from(v: Validations) -> Self {
        ServiceError::Invalid(v)
    }
}
