//! Errors of the service, each with the stable `type` of api-v1.md section 7.

use crate::storage::StorageError;
use crate::validation::Validations;

/// The stable, machine-readable error types of api-v1.md section 7.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorType {
    ApiKeyInvalid,
    PlanLimitReached,
    AccountOnHold,
    ResourceNotFound,
    ResourceInvalid,
    RateLimited,
    ServiceUnavailable,
}

impl ErrorType {
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
pub enum ServiceError {
    #[error("the resource was not found")]
    NotFound,
    #[error("the request is invalid: {0}")]
    Invalid(Validations),
    #[error("the plan allows at most {max} snitches")]
    PlanLimitReached { max: u32 },
    #[error("the account is on hold")]
    AccountOnHold,
    /// An unexpected failure of the store: no stable type, the API answers 500.
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
            ServiceError::Storage(_) => None,
        }
    }
}

impl From<Validations> for ServiceError {
    fn from(v: Validations) -> Self {
        ServiceError::Invalid(v)
    }
}
