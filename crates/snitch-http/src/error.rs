//! API errors and their bodies: `{type, error[, validations]}` (docs/api.md#errors).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use snitch_core::{ServiceError, Validations};

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
    /// The stable type of a service error, or `None` for an internal failure (500).
    pub fn of(error: &ServiceError) -> Option<ErrorType> {
        match error {
            ServiceError::NotFound => Some(ErrorType::ResourceNotFound),
            ServiceError::Invalid(_) => Some(ErrorType::ResourceInvalid),
            ServiceError::PlanLimitReached { .. } => Some(ErrorType::PlanLimitReached),
            ServiceError::AccountOnHold => Some(ErrorType::AccountOnHold),
            ServiceError::Storage(e) if e.is_transient() || e.is_outcome_unknown() => {
                Some(ErrorType::ServiceUnavailable)
            }
            // A kind newer than this mapping, or a permanent store failure.
            _ => None,
        }
    }

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

/// An error the API answers with.
#[derive(Debug)]
#[non_exhaustive]
pub enum ApiError {
    /// A typed error (docs/api.md#errors; `kind` is its stable `type`), among them the
    /// protocol errors Dead Man's Snitch does not list: `method_not_allowed` (405),
    /// `payload_too_large` (413), `request_timeout` (408).
    Typed {
        /// The HTTP status.
        status: StatusCode,
        /// The stable `type` of the body.
        kind: &'static str,
        /// The `error` text of the body.
        message: String,
        /// The `validations` of a `validation_failed`, if any.
        validations: Option<Validations>,
        /// `Retry-After` in seconds, for a 429.
        retry_after_secs: Option<u64>,
    },
    /// Malformed JSON: 400 with an empty body.
    MalformedJson,
    /// An unexpected failure: 500 with an empty body; the cause is logged, not shown.
    Internal(String),
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    error: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    validations: Option<Vec<ValidationBody<'a>>>,
}

#[derive(Serialize)]
struct ValidationBody<'a> {
    attribute: &'a str,
    message: &'a str,
}

impl ApiError {
    fn typed(status: StatusCode, kind: ErrorType, message: impl Into<String>) -> Self {
        Self::protocol(status, kind.as_str(), message)
    }

    /// 401 `api_key_invalid`: no key, or not a valid one.
    pub fn api_key_invalid() -> Self {
        Self::typed(
            StatusCode::UNAUTHORIZED,
            ErrorType::ApiKeyInvalid,
            "The API key is missing or invalid",
        )
    }

    /// 404 `resource_not_found`.
    pub fn not_found() -> Self {
        Self::typed(
            StatusCode::NOT_FOUND,
            ErrorType::ResourceNotFound,
            "The resource was not found",
        )
    }

    /// 429 `rate_limited`, to be retried after `retry_after_secs`.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        ApiError::Typed {
            status: StatusCode::TOO_MANY_REQUESTS,
            kind: ErrorType::RateLimited.as_str(),
            message: "Too many requests with this API key; retry later".into(),
            validations: None,
            retry_after_secs: Some(retry_after_secs),
        }
    }

    /// Too many failed authentications from the client's address.
    pub fn too_many_failures(retry_after_secs: u64) -> Self {
        ApiError::Typed {
            status: StatusCode::TOO_MANY_REQUESTS,
            kind: ErrorType::RateLimited.as_str(),
            message: "Too many failed authentication attempts from this address; retry later"
                .into(),
            validations: None,
            retry_after_secs: Some(retry_after_secs),
        }
    }

    /// 503 `service_unavailable` (maintenance mode, or a store that is down).
    pub fn service_unavailable() -> Self {
        Self::typed(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorType::ServiceUnavailable,
            "The API is down for maintenance; check-ins are still recorded",
        )
    }

    /// A route exists, but not for this method (the router adds the `Allow` header).
    pub fn method_not_allowed() -> Self {
        Self::protocol(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "The method is not allowed for this resource",
        )
    }

    /// A body over [`crate::MAX_BODY_BYTES`], declared or sent.
    pub fn payload_too_large() -> Self {
        Self::protocol(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "The request body is larger than {} bytes",
                crate::MAX_BODY_BYTES
            ),
        )
    }

    /// The request was not complete within the server's request timeout.
    pub fn request_timeout() -> Self {
        Self::protocol(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "The request was not complete in time",
        )
    }

    fn protocol(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError::Typed {
            status,
            kind,
            message: message.into(),
            validations: None,
            retry_after_secs: None,
        }
    }

    /// 422 `validation_failed` with these problems.
    pub fn invalid(validations: Validations) -> Self {
        ApiError::Typed {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            kind: ErrorType::ResourceInvalid.as_str(),
            message: format!("Invalid request: {validations}"),
            validations: Some(validations),
            retry_after_secs: None,
        }
    }

    /// 422 `validation_failed` with one problem: `attribute` and its `message`.
    pub fn invalid_attribute(attribute: &str, message: &str) -> Self {
        Self::invalid(Validations::single(attribute, message))
    }
}

impl From<ServiceError> for ApiError {
    fn from(err: ServiceError) -> Self {
        match err {
            ServiceError::NotFound => ApiError::not_found(),
            ServiceError::Invalid(v) => ApiError::invalid(v),
            ServiceError::PlanLimitReached { max } => ApiError::typed(
                StatusCode::PAYMENT_REQUIRED,
                ErrorType::PlanLimitReached,
                format!("The plan allows at most {max} snitches"),
            ),
            ServiceError::AccountOnHold => ApiError::typed(
                StatusCode::PAYMENT_REQUIRED,
                ErrorType::AccountOnHold,
                "The account is on hold",
            ),
            // A store that is down or kept changing under us: try again shortly (a
            // conflict left after every retry, a lost connection). The cause is logged.
            ServiceError::Storage(e) if e.is_transient() => {
                tracing::warn!(cause = %e, "storage failed; answered 503");
                ApiError::Typed {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    kind: ErrorType::ServiceUnavailable.as_str(),
                    message: "The store is unavailable for a moment; try again".into(),
                    validations: None,
                    retry_after_secs: Some(1),
                }
            }
            // The change was sent and may or may not be stored: 503 too (check-ins and
            // the API's updates are safe to repeat), with a message that says so.
            ServiceError::Storage(e) if e.is_outcome_unknown() => {
                tracing::warn!(cause = %e, "commit outcome unknown; answered 503");
                ApiError::Typed {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    kind: ErrorType::ServiceUnavailable.as_str(),
                    message: "The store failed while saving; the change may or may not be \
                              saved, so check before repeating a create"
                        .into(),
                    validations: None,
                    retry_after_secs: Some(1),
                }
            }
            ServiceError::Storage(e) => ApiError::Internal(e.to_string()),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Typed {
                status,
                kind,
                message,
                validations,
                retry_after_secs,
            } => {
                let body = ErrorBody {
                    kind,
                    error: &message,
                    validations: validations.as_ref().map(|v| {
                        v.iter()
                            .map(|v| ValidationBody {
                                attribute: &v.attribute,
                                message: &v.message,
                            })
                            .collect()
                    }),
                };
                let mut response = (status, axum::Json(body)).into_response();
                if let Some(secs) = retry_after_secs {
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
                }
                if status == StatusCode::UNAUTHORIZED {
                    response.headers_mut().insert(
                        header::WWW_AUTHENTICATE,
                        HeaderValue::from_static("Basic realm=\"Snitch\""),
                    );
                }
                response
            }
            ApiError::MalformedJson => StatusCode::BAD_REQUEST.into_response(),
            ApiError::Internal(cause) => {
                tracing::error!(%cause, "request failed");
                StatusCode::INTERNAL_SERVER_ERROR.into_response()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use snitch_core::StorageError;

    #[test]
    fn a_store_that_is_down_or_kept_changing_is_503_with_retry_after_not_500() {
        for cause in [
            StorageError::Conflict,
            StorageError::Backend("connection refused".into()),
        ] {
            let response = ApiError::from(ServiceError::Storage(cause)).into_response();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(
                response.headers().get(header::RETRY_AFTER),
                Some(&HeaderValue::from(1))
            );
        }
        let unknown = ApiError::from(ServiceError::Storage(StorageError::CommitOutcomeUnknown(
            "connection reset during COMMIT".into(),
        )))
        .into_response();
        assert_eq!(unknown.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            unknown.headers().get(header::RETRY_AFTER),
            Some(&HeaderValue::from(1))
        );
        let corrupt = ServiceError::Storage(StorageError::Corrupt("bad row".into()));
        assert_eq!(
            ApiError::from(corrupt).into_response().status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
