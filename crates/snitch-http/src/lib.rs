//! The HTTP side of Snitch: the v1 JSON API ([`api_router`]) and the check-in endpoint
//! ([`check_in_router`]) as mountable axum routers over a [`SnitchService`](snitch_core::SnitchService).
//!
//! The two live on separate routers because they live on separate hosts (`base_url` and
//! `check_in_base`): a host application nests or serves each wherever it likes.

#![warn(missing_docs)]

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

mod api;
mod auth_limit;
pub mod badge;
mod check_in;
mod error;
mod health;
mod history;
mod keys;
mod metrics;
mod observe;
mod openapi;
#[cfg(feature = "ui")]
pub mod ui;
mod unread_body;
mod wire;

pub use api::channels::channel_input;
pub use api::{api_router, ApiConfig, ApiState, ChannelTester, RateLimit, SharedChannelTester};
pub use auth_limit::AuthFailureLimit;
pub use check_in::{
    check_in_router, check_in_router_with_metrics, CheckInService, CHECK_IN_OUTPUT_READ_MAX,
};
pub use error::{ApiError, ErrorType};
pub use health::{health_router, Health, SweepWatch, HEALTH_PATHS, SWEEP_STALLED_AFTER};
pub use keys::{ApiKeys, KeyDigest, PREFIX_CHARS, REFRESH_EVERY};
pub use metrics::{metrics_router, Metrics, MetricsState};
pub use openapi::document as openapi_document;

/// Request bodies larger than this are refused with 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The body of a successful check-in (compat: clients look for 202).
pub const CHECK_IN_OK: &str = "Got it, thanks!\n";

/// Why a request is refused before anything else: by the API router's middleware, and
/// first thing by the check-in handlers.
pub(crate) enum Refusal {
    /// A path segment is not valid UTF-8 once percent-decoded: no resource has that name.
    NotFound,
    /// The declared `Content-Length` is over [`MAX_BODY_BYTES`]: refused at once, without
    /// reading (or waiting for) the body. A body without a declared length is cut off as
    /// it is read (`DefaultBodyLimit` on the API, the check-in handler's own limit).
    TooLarge,
}

pub(crate) fn refusal(req: &Request) -> Option<Refusal> {
    // A path without `%` is the text it decodes to (a `&str` already).
    let path = req.uri().path();
    if path.contains('%')
        && percent_encoding::percent_decode_str(path)
            .decode_utf8()
            .is_err()
    {
        return Some(Refusal::NotFound);
    }
    if declared_length(req).is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return Some(Refusal::TooLarge);
    }
    None
}

/// The body length a request declares (`Content-Length`), if it declares one.
pub(crate) fn declared_length(req: &Request) -> Option<u64> {
    req.headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
}

pub(crate) fn too_large_text() -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "The request body is too large.\n",
    )
        .into_response()
}

#[cfg(test)]
mod tests;
