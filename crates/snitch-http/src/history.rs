//! `GET /v1/snitches/<token>/check_ins` (an extension): a snitch's recent check-ins, newest
//! first, with their message and exit status. Same authentication and errors as the rest
//! of the API.

use axum::extract::{Path, RawQuery, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use snitch_core::CheckIn;
use utoipa::ToSchema;

use crate::api::Authed;
use crate::wire::format_time;
use crate::{ApiError, ApiState};

/// One check-in as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CheckInJson {
    /// Its number among the snitch's check-ins (the id of its output,
    /// `GET /v1/snitches/<token>/check_ins/<id>/body`); `null` for one recorded before
    /// numbers were kept.
    #[schema(example = 42)]
    pub id: Option<u64>,
    /// `success`, `error` (a run that ended, or a plain check-in), `start` (a run
    /// started) or `log` (output only).
    #[schema(value_type = String, pattern = "^(success|error|start|log)$", example = "success")]
    pub kind: &'static str,
    /// The run id the client gave (`rid`).
    #[schema(example = "5b7c1d2e-8f0a-4a53-9d2e-0c1b2a3d4e5f")]
    pub run_id: Option<String>,
    /// The duration the client reported (`duration`), in milliseconds.
    pub duration_ms: Option<u64>,
    /// Whether output was kept with it (see `id`).
    pub has_body: bool,
    /// When it arrived (ISO 8601, milliseconds, UTC).
    #[schema(example = "2026-11-23T03:00:04.120Z")]
    pub at: String,
    /// `success` (no exit status, empty or `0`) or `error` (any other exit status).
    #[schema(value_type = String, pattern = "^(success|error)$", example = "error")]
    pub status: &'static str,
    /// The exit status the job sent (`s`), cut to 64 characters; `null` for a success.
    #[schema(example = "2")]
    pub exit_status: Option<String>,
    /// The message the job sent (`m`), cut to 256 characters; `null` when none.
    #[schema(example = "disk full")]
    pub message: Option<String>,
}

impl CheckInJson {
    /// The check-in as the API shows it.
    pub fn new(c: &CheckIn) -> Self {
        let status = if c.outcome.is_success() {
            "success"
        } else {
            "error"
        };
        let exit_status = c.outcome.exit_status().map(str::to_owned);
        CheckInJson {
            id: (c.number > 0).then_some(c.number),
            kind: c.kind.name(&c.outcome),
            run_id: c.run_id.as_ref().map(|r| r.as_str().to_owned()),
            duration_ms: c.duration_ms,
            has_body: c.body.is_some(),
            at: format_time(c.at),
            status,
            exit_status,
            message: c.message.as_ref().map(|m| m.as_str().to_owned()),
        }
    }
}

/// How many check-ins are shown when `limit` is not given (at most the kept history).
pub const DEFAULT_LIMIT: usize = 100;

/// The query of the check-ins endpoint.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryQuery {
    /// How many check-ins to show, newest first: 1 to the server's `check_in_history`
    /// (default 100 or the whole history, whichever is less).
    #[param(minimum = 1, value_type = Option<u32>)]
    pub limit: Option<String>,
}

/// `limit` from the raw query: absent is the default, anything but a whole number from 1
/// to `history` is a 422 naming `limit`.
pub fn parse_limit(query: Option<&str>, history: usize) -> Result<usize, ApiError> {
    let invalid = || {
        ApiError::invalid_attribute(
            "limit",
            &format!("must be a whole number from 1 to {history}"),
        )
    };
    let parsed: HistoryQuery =
        serde_urlencoded::from_str(query.unwrap_or("")).map_err(|_| invalid())?;
    match parsed.limit {
        None => Ok(DEFAULT_LIMIT.min(history)),
        Some(raw) => match raw.trim().parse::<usize>() {
            Ok(n) if (1..=history).contains(&n) => Ok(n),
            _ => Err(invalid()),
        },
    }
}

/// The snitch's recent check-ins, newest first.
#[utoipa::path(
    get,
    path = "/v1/snitches/{token}/check_ins",
    tag = "extensions",
    params(("token" = String, Path, description = "The snitch's token"), HistoryQuery),
    responses(
        (status = 200, description = "The recent check-ins, newest first", body = Vec<CheckInJson>),
        (status = 401, response = crate::openapi::Unauthorized),
        (status = 404, response = crate::openapi::NotFound),
        (status = 422, response = crate::openapi::Invalid),
        (status = 429, response = crate::openapi::TooMany),
        (status = 503, response = crate::openapi::Unavailable),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn list_check_ins(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<CheckInJson>>, ApiError> {
    let service = &state.inner.service;
    let limit = parse_limit(query.as_deref(), service.check_in_history())?;
    let check_ins = service.check_ins(&case, &token, limit).await?;
    Ok(Json(check_ins.iter().map(CheckInJson::new).collect()))
}

/// The output kept with one check-in, as plain text (UTF-8; what the job printed, cut to
/// the server's `ping_body_limit`). A check-in that kept none, or one the history no
/// longer keeps, is not found.
#[utoipa::path(
    get,
    path = "/v1/snitches/{token}/check_ins/{id}/body",
    tag = "extensions",
    params(
        ("token" = String, Path, description = "The snitch's token"),
        ("id" = u64, Path, description = "The check-in's id (its `id` in the history)"),
    ),
    responses(
        (status = 200, description = "The output, as it was kept", body = String, content_type = "text/plain"),
        (status = 401, response = crate::openapi::Unauthorized),
        (status = 404, response = crate::openapi::NotFound),
        (status = 429, response = crate::openapi::TooMany),
        (status = 503, response = crate::openapi::Unavailable),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn check_in_body(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path((token, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    // Any id that is not a whole number is no check-in's.
    let number = id
        .parse::<u64>()
        .map_err(|_| ApiError::from(snitch_core::ServiceError::NotFound))?;
    let body = state
        .inner
        .service
        .check_in_body(&case, &token, number)
        .await?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            // What a job printed is shown as text, never run as a page.
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CONTENT_DISPOSITION, "inline"),
        ],
        body.as_str().to_owned(),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use snitch_core::{CheckInMessage, Outcome};

    #[test]
    fn check_ins_show_status_exit_status_and_message() {
        let at = DateTime::from_timestamp_millis(1_700_000_000_123).expect("valid");
        let ok = CheckIn::new(at, Outcome::Success, None);
        let json = serde_json::to_value(CheckInJson::new(&ok)).expect("JSON");
        assert_eq!(
            json,
            serde_json::json!({"at": "2023-11-14T22:13:20.123Z", "status": "success",
                               "exit_status": null, "message": null, "id": null,
                               "kind": "success", "run_id": null, "duration_ms": null,
                               "has_body": false})
        );
        let failed = CheckIn::new(
            at,
            Outcome::from_exit_status(Some("127")),
            CheckInMessage::truncating("not found"),
        );
        let json = serde_json::to_value(CheckInJson::new(&failed)).expect("JSON");
        assert_eq!(json["status"], "error");
        assert_eq!(json["exit_status"], "127");
        assert_eq!(json["message"], "not found");
    }

    #[test]
    fn limit_is_a_whole_number_within_the_history() {
        assert_eq!(parse_limit(None, 100).ok(), Some(100));
        assert_eq!(parse_limit(None, 30).ok(), Some(30));
        assert_eq!(parse_limit(Some("limit=5"), 100).ok(), Some(5));
        assert_eq!(parse_limit(Some("other=x&limit=100"), 100).ok(), Some(100));
        assert_eq!(parse_limit(Some("limit=500"), 1000).ok(), Some(500));
        for bad in [
            "limit=0",
            "limit=101",
            "limit=-1",
            "limit=abc",
            "limit=",
            "limit=1e3",
            "limit=%00",
            "limit=99999999999999999999999",
        ] {
            let err = parse_limit(Some(bad), 100).expect_err(bad);
            let status = axum::response::IntoResponse::into_response(err).status();
            assert_eq!(
                status,
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                "{bad}"
            );
        }
    }
}
