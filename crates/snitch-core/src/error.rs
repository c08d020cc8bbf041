//! Errors of the service, each with its stable `type` (docs/api.md#errors).

use crate::storage::StorageError;
use crate::validation::Validations;

/// The stable, machine-readable error types of the API (docs/api.md#errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorType {
    /// `api_key_invalid`: a missing or invalid key (401).
    ApiKeyInvalid,
    /// `plan_limit_reached`: the case holds its plan's maximum of snitches (402).
    PlanLimitReached,
    /// `account_on_hold`: the case is on hold (402).
    AccountOnHold,
    /// `resource_not_found`: no such resource of the case (404).
    ResourceNotFound,
    /// `resource_invalid`: invalid attributes, with validations (422).
    ResourceInvalid,
    /// `rate_limited`: too many requests (429).
    RateLimited,
    /// `service_unavailable`: maintenance, or a store that is down (503).
    ServiceUnavailable,
}

impl ErrorType {
    /// The `type` of the error body, e.g. `resource_not_found`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::ApiKeyInvalid => "api_key_invalid",
            ErrorType::PlanLimitReached => "plan_limit_reached",
            ErrorType::AccountOnHold => "account_on_hold",
            ErrorType::ResourceNotFound => "resource_not_found",
            ErrorType::ResourceInvalid => "resource_invalid",
            ErrorType::RateLimited => "rate_limited",
            ErrorType::ServiceUnavailable => "service_unavailable",
        }
    }
}

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

impl ServiceError {
    /// The stable type for the API, or `None` for an internal failure.
    pub fn error_type(&self) -> Option<ErrorType> {
        match self {
            ServiceError::NotFound => Some(ErrorType::ResourceNotFound),
            ServiceError::Invalid(_) => Some(ErrorType::ResourceInvalid),
            ServiceError::PlanLimitReached { .. } => Some(ErrorType::PlanLimitReached),
            ServiceError::AccountOnHold => Some(ErrorType::AccountOnHold),
            ServiceError::Storage(e) if e.is_transient() || e.is_outcome_unknown() => {
                Some(ErrorType::ServiceUnavailable)
            }
            ServiceError::Storage(_) => None,
        }
    }
}

impl From<Validations> for ServiceError {
    fn from(v: Validations) -> Self {
        ServiceError::Invalid(v)
    }
}
