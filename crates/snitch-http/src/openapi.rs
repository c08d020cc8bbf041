//! The OpenAPI 3.1 document of the API, generated from the handlers' `#[utoipa::path]`
//! attributes and the response types' `ToSchema` derives, so it follows the code. It is
//! served at `GET /v1/openapi.json` and committed as `openapi.json` at the repository root
//! (a test fails when the two differ; `SNITCH_BLESS=1` rewrites the file).
//!
//! Request bodies are read by hand (the compat rules of docs/rules.md#request-parsing:
//! `null`s, the string form of `alert_email`, `type.interval`), so their schemas are the
//! types below, which document what a client may send; every response type is the one the
//! handler serializes.
// Response and schema types that only describe the document: never built or read.
#![allow(dead_code)]

use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::RefOr;
use utoipa::{Modify, OpenApi, ToResponse, ToSchema};

/// The body of every API error (docs/api.md#errors).
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorJson {
    /// Stable: `api_key_invalid`, `resource_not_found`, `resource_invalid`,
    /// `plan_limit_reached`, `account_on_hold`, `rate_limited`, `service_unavailable`,
    /// `method_not_allowed`, `payload_too_large`, `request_timeout`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A message for people; may change.
    pub error: String,
    /// With `resource_invalid` only: every problem found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validations: Option<Vec<ValidationJson>>,
}

/// One problem of a `resource_invalid` error.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Validation)]
pub struct ValidationJson {
    /// The attribute at fault (`name`, `interval`, `limit`, …).
    pub attribute: String,
    /// What is wrong with it.
    pub message: String,
}

/// Malformed JSON in the request body (the response has no body).
#[derive(Debug, ToResponse)]
pub struct Malformed;

/// `api_key_invalid`: the key is missing or wrong.
#[derive(Debug, ToResponse)]
#[response(headers(("WWW-Authenticate" = String, description = "Basic realm")))]
pub struct Unauthorized(#[to_schema] pub ErrorJson);

/// `plan_limit_reached` (creating past the plan's maximum) or `account_on_hold`.
#[derive(Debug, ToResponse)]
pub struct PaymentRequired(#[to_schema] pub ErrorJson);

/// `resource_not_found`: no such resource, or not the caller's.
#[derive(Debug, ToResponse)]
pub struct NotFound(#[to_schema] pub ErrorJson);

/// `payload_too_large`: a body over 64 KiB.
#[derive(Debug, ToResponse)]
pub struct TooLarge(#[to_schema] pub ErrorJson);

/// `resource_invalid`, with `validations`.
#[derive(Debug, ToResponse)]
pub struct Invalid(#[to_schema] pub ErrorJson);

/// `rate_limited`: too many requests for the key, or failed authentications from the
/// address.
#[derive(Debug, ToResponse)]
#[response(headers(("Retry-After" = u64, description = "Seconds to wait")))]
pub struct TooMany(#[to_schema] pub ErrorJson);

/// `service_unavailable`: maintenance, or the store is unreachable for a moment.
#[derive(Debug, ToResponse)]
#[response(headers(("Retry-After" = u64, description = "Seconds to wait, when known")))]
pub struct Unavailable(#[to_schema] pub ErrorJson);

/// What every call with an API key may answer besides its own responses, listed once for
/// all of them: 401 (`Unauthorized`), 402 (`PaymentRequired`), 429 (`TooMany`) and 503
/// (`Unavailable`), each a reference to its component.
#[derive(Debug)]
pub struct KeyedCall;

impl utoipa::IntoResponses for KeyedCall {
    fn responses(
    ) -> std::collections::BTreeMap<String, utoipa::openapi::RefOr<utoipa::openapi::Response>> {
        [
            ("401", "Unauthorized"),
            ("402", "PaymentRequired"),
            ("429", "TooMany"),
            ("503", "Unavailable"),
        ]
        .into_iter()
        .map(|(status, name)| {
            let reference = utoipa::openapi::Ref::from_response_name(name);
            (status.to_owned(), utoipa::openapi::RefOr::Ref(reference))
        })
        .collect()
    }
}

/// The body of create and update (`PATCH`: only the attributes to change). Compat:
/// `null` clears an attribute, `alert_email` may be one comma-separated string, and
/// `type: {interval}` stands in for a missing `interval`.
#[derive(Debug, Serialize, ToSchema)]
pub struct SnitchRequest {
    /// 1 to 255 characters, not blank; required on create.
    #[schema(
        example = "Nightly backup",
        min_length = 1,
        max_length = 255,
        pattern = r"\S"
    )]
    pub name: Option<String>,
    /// Required on create (or as `type.interval`), unless `schedule` is given; not with
    /// a schedule.
    #[schema(example = "daily")]
    pub interval: Option<IntervalName>,
    /// `{"interval": …}`, read when `interval` is absent (compat).
    #[schema(value_type = Option<Object>)]
    #[serde(rename = "type")]
    pub type_: Option<serde_json::Value>,
    /// `basic` (default) or `smart` (only for intervals over 30 minutes).
    pub alert_type: Option<AlertTypeName>,
    /// Addresses that get this snitch's alerts instead of the team (at most 20; one
    /// comma-separated string is accepted too).
    #[schema(value_type = Option<Vec<String>>)]
    pub alert_email: Option<serde_json::Value>,
    /// At most 10,000 characters.
    #[schema(max_length = 10_000)]
    pub notes: Option<String>,
    /// At most 50 tags of 1 to 64 characters.
    #[schema(max_items = 50)]
    pub tags: Option<Vec<TagName>>,
    /// A schedule and its spans, and the tolerances.
    #[serde(flatten)]
    pub runs: RunSettings,
}

/// The body of create: [`SnitchRequest`] with `name` required, and `interval` or
/// `schedule`.
#[derive(Debug, Serialize, ToSchema)]
pub struct NewSnitchRequest {
    #[schema(
        example = "Nightly backup",
        min_length = 1,
        max_length = 255,
        pattern = r"\S"
    )]
    /// 1 to 255 characters, not blank.
    pub name: String,
    /// How often the job checks in; required unless `schedule` is given.
    pub interval: Option<IntervalName>,
    /// `basic` (default) or `smart` (only for intervals over 30 minutes).
    pub alert_type: Option<AlertTypeName>,
    /// Addresses that get this snitch's alerts instead of the team.
    #[schema(value_type = Option<Vec<String>>)]
    pub alert_email: Option<serde_json::Value>,
    /// At most 10,000 characters.
    #[schema(max_length = 10_000)]
    pub notes: Option<String>,
    /// At most 50 tags.
    #[schema(max_items = 50)]
    pub tags: Option<Vec<TagName>>,
    /// A schedule and its spans, and the tolerances.
    #[serde(flatten)]
    pub runs: RunSettings,
}

/// The settings of create and update beyond Dead Man's Snitch's: a cron schedule with its
/// spans (docs/rules.md#expected-runs) and the tolerances (#tolerances).
#[derive(Debug, Serialize, ToSchema)]
pub struct RunSettings {
    /// A 5-field cron expression (Debian cron semantics; `@daily` and the other macros
    /// but `@reboot`), instead of an interval: the snitch expects a run at each of its
    /// times (its `interval` reads `cron`).
    #[schema(example = "30 2 * * *", max_length = 100)]
    pub schedule: Option<String>,
    /// The schedule's IANA time zone (default `UTC`); only with a schedule.
    #[schema(example = "Europe/Riga", max_length = 64)]
    pub timezone: Option<String>,
    /// `timezone`, as healthchecks names it (read when `timezone` is absent).
    #[schema(example = "Europe/Riga", max_length = 64)]
    pub tz: Option<String>,
    /// How many seconds after an expected time a check-in still counts (60 to 31,536,000;
    /// default: an hour, or the shortest gap between runs when shorter); only with a
    /// schedule.
    #[schema(minimum = 60, maximum = 31_536_000)]
    pub grace_seconds: Option<i64>,
    /// How many seconds before an expected time a check-in already counts (0 to 3,600;
    /// default 60; never more than half the gap to the previous run); only with a
    /// schedule.
    #[schema(minimum = 0, maximum = 3_600)]
    pub early_seconds: Option<i64>,
    /// How many failed runs in a row are tolerated before the errored alert (0 to 720,
    /// default 0: the first failed run alerts).
    #[schema(minimum = 0, maximum = 720)]
    pub failure_tolerance: Option<i64>,
    /// How many missed runs in a row are tolerated before the missing alert (0 to 720,
    /// default 0).
    #[schema(minimum = 0, maximum = 720)]
    pub missed_tolerance: Option<i64>,
    /// The words that decide what a check-in e-mail means; `null` or `{}` (or every list
    /// empty): none, every e-mail is a success. An update without it keeps them.
    pub email_keywords: Option<EmailKeywordsRequest>,
}

/// E-mail keywords as create and update take them: three lists (absent or `null`:
/// empty) and where to look. Matching ignores case; failure wins over success, success
/// over start; with keywords set, an e-mail that matches none is kept as output only.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmailKeywordsRequest {
    /// Words that make an e-mail a failed run (at most 10, each 1 to 100 characters).
    #[schema(max_items = 10, example = json!(["failed", "error"]))]
    pub failure: Option<Vec<String>>,
    /// Words that make an e-mail a successful run.
    #[schema(max_items = 10, example = json!(["completed"]))]
    pub success: Option<Vec<String>>,
    /// Words that make an e-mail a run's start.
    #[schema(max_items = 10, example = json!(["starting"]))]
    pub start: Option<Vec<String>>,
    /// Where to look: `both` (default), `subject` or `body`.
    pub search: Option<KeywordSearch>,
}

/// Where e-mail keywords are looked for.
#[allow(missing_docs)]
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum KeywordSearch {
    Both,
    Subject,
    Body,
}

/// The 17 intervals (variants named as the API spells them).
#[allow(missing_docs)]
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum IntervalName {
    #[serde(rename = "1_minute")]
    Minute1,
    #[serde(rename = "2_minute")]
    Minute2,
    #[serde(rename = "3_minute")]
    Minute3,
    #[serde(rename = "5_minute")]
    Minute5,
    #[serde(rename = "10_minute")]
    Minute10,
    #[serde(rename = "15_minute")]
    Minute15,
    #[serde(rename = "30_minute")]
    Minute30,
    Hourly,
    #[serde(rename = "2_hour")]
    Hour2,
    #[serde(rename = "3_hour")]
    Hour3,
    #[serde(rename = "4_hour")]
    Hour4,
    #[serde(rename = "6_hour")]
    Hour6,
    #[serde(rename = "8_hour")]
    Hour8,
    #[serde(rename = "12_hour")]
    Hour12,
    Daily,
    Weekly,
    Monthly,
}

/// `basic` or `smart`.
#[allow(missing_docs)]
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AlertTypeName {
    Basic,
    Smart,
}

/// A tag: 1 to 64 characters, not blank.
#[derive(Debug, Serialize)]
pub struct TagName(pub String);

impl utoipa::PartialSchema for TagName {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(64))
            .pattern(Some(r"\S"))
            .description(Some("A tag: 1 to 64 characters, not blank"))
            .into()
    }
}

impl ToSchema for TagName {
    fn name() -> std::borrow::Cow<'static, str> {
        "TagName".into()
    }
}

/// The body of a pause: until the next healthy check-in (default), until unpaused, or
/// until an ISO 8601 time in the future.
#[derive(Debug, Serialize, ToSchema)]
pub struct PauseRequest {
    /// `healthy` (default), `unpaused`, or an ISO 8601 time in the future.
    #[schema(example = "healthy")]
    pub until: Option<String>,
}

/// The body of a new webhook.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookRequest {
    /// `http` or `https`; private addresses are refused unless the server allows them.
    #[schema(example = "https://hooks.example.com/snitch")]
    pub url: String,
    /// When given, requests are signed (`Snitch-Signature`).
    pub secret: Option<String>,
}

/// `GET /healthz`, `GET /readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct HealthJson {
    /// `ok`, or `unavailable` (readiness only).
    #[schema(example = "ok")]
    pub status: String,
    /// For readiness: each check's result (`ok` or why not).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub checks: Option<serde_json::Map<String, serde_json::Value>>,
}

struct BasicAuth;

impl Modify for BasicAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Basic)
                    .description(Some(
                        "HTTP Basic with the API key as the user name and an empty password",
                    ))
                    .build(),
            ),
        );
    }
}

/// The document.
#[derive(Debug, OpenApi)]
#[openapi(
    info(
        title = "Snitch API",
        description = "A Dead Man's Snitch v1 compatible API, with extensions (webhooks, events, \
check-ins, outages, health). Check-ins themselves go to the check-in host: \
`GET|POST|HEAD <check_in_base>/<token>?m=<message>&s=<exit status>` answers 202.",
        license(name = "MIT OR Apache-2.0"),
    ),
    paths(
        crate::api::handlers::list_snitches,
        crate::api::handlers::create_snitch,
        crate::api::handlers::get_snitch,
        crate::api::handlers::update_snitch,
        crate::api::handlers::delete_snitch,
        crate::api::handlers::add_tags,
        crate::api::handlers::remove_tag,
        crate::api::handlers::pause,
        crate::api::handlers::unpause,
        crate::api::handlers::list_events,
        crate::history::list_check_ins,
        crate::history::check_in_body,
        crate::api::handlers::list_webhooks,
        crate::api::handlers::create_webhook,
        crate::api::handlers::delete_webhook,
        crate::api::channels::list_channels,
        crate::api::channels::create_channel,
        crate::api::channels::get_channel,
        crate::api::channels::update_channel,
        crate::api::channels::delete_channel,
        crate::api::channels::test_channel,
        crate::badge::list_badges,
        crate::badge::rotate_badges,
        crate::badge::badge,
        crate::badge::snitch_badge,
        crate::api::handlers::list_outages,
        crate::api::handlers::preview_schedule,
        crate::health::healthz,
        crate::health::readyz,
        openapi_json,
    ),
    components(
        schemas(ErrorJson, ValidationJson),
        responses(Malformed, Unauthorized, PaymentRequired, NotFound, TooLarge, Invalid, TooMany, Unavailable)
    ),
    modifiers(&BasicAuth),
    tags(
        (name = "snitches", description = "The v1 API of Dead Man's Snitch"),
        (name = "extensions", description = "Snitch's own additions"),
        (name = "operations", description = "Health and this document; no authentication"),
    )
)]
pub struct ApiDoc;

/// The document as pretty JSON with a final newline (the form of the committed file).
pub fn document() -> String {
    let mut text = ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    text.push('\n');
    text
}

/// This document.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    tag = "operations",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API", content_type = "application/json", body = Object))
)]
pub async fn openapi_json() -> Response {
    // Built once: the document is fixed for a build, and the route is unauthenticated.
    static DOCUMENT: std::sync::LazyLock<String> = std::sync::LazyLock::new(document);
    (
        [(header::CONTENT_TYPE, "application/json")],
        DOCUMENT.as_str(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The documented intervals are exactly the core's 17.
    #[test]
    fn the_interval_names_are_the_cores() {
        let doc: serde_json::Value = serde_json::from_str(&document()).expect("JSON");
        let names: Vec<&str> = doc["components"]["schemas"]["IntervalName"]["enum"]
            .as_array()
            .expect("enum")
            .iter()
            .filter_map(|v| v.as_str())
            .collect();
        let core: Vec<&str> = snitch_core::Interval::ALL
            .iter()
            .map(|i| i.as_str())
            .collect();
        assert_eq!(names, core);
    }
}
