//! The API's handlers, one per operation; each one's `#[utoipa::path]` is its entry in
//! the OpenAPI document.

use std::collections::HashMap;

use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, Uri};
use axum::Json;
use snitch_core::{ServiceError, SnitchService, Validation, Validations};

use crate::wire::{self, SnitchJson};
use crate::{openapi, ApiError};

use super::{ApiState, Authed, JsonBody};

/// The tag filter of a list: `tags=a,b` as DMS documents it, and the array forms of PHP
/// and Rails clients (`tags[]=a&tags[]=b`, `tags[0]=a`), all one AND filter.
pub(crate) fn list_tag_filter(query: Option<&str>) -> String {
    let mut parts: Vec<String> = Vec::new();
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let is_tags = key == "tags"
            || key
                .strip_prefix("tags[")
                .and_then(|k| k.strip_suffix(']'))
                .is_some_and(|index| index.bytes().all(|b| b.is_ascii_digit()));
        if is_tags && !value.is_empty() {
            parts.push(value.into_owned());
        }
    }
    parts.join(",")
}

/// Lists the case's snitches.
#[utoipa::path(
    get,
    path = "/v1/snitches",
    tag = "snitches",
    params(("tags" = Option<String>, Query, description = "Comma-separated tags; only snitches with every one")),
    responses(
        (status = 200, description = "The case's snitches, oldest first", body = Vec<wire::SnitchJson>),
        openapi::KeyedCall,
        (status = 422, response = openapi::Invalid),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn list_snitches(
    State(state): State<ApiState>,
    Authed(case): Authed,
    RawQuery(query): RawQuery,
) -> Result<Json<Vec<SnitchJson>>, ApiError> {
    // Decoded by hand: every form of the filter, and never a bare 400.
    let filter = SnitchService::parse_tag_filter(&list_tag_filter(query.as_deref()))?;
    let snitches = state.inner.service.list(&case, &filter).await?;
    Ok(Json(snitches.iter().map(|s| state.json(s)).collect()))
}

/// One snitch.
#[utoipa::path(
    get,
    path = "/v1/snitches/{token}",
    tag = "snitches",
    params(("token" = String, Path, description = "The snitch's token")),
    responses(
        (status = 200, description = "The snitch", body = wire::SnitchJson),
        openapi::KeyedCall,
        (status = 404, response = openapi::NotFound),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn get_snitch(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
) -> Result<Json<SnitchJson>, ApiError> {
    let snitch = state.inner.service.get(&case, &token).await?;
    Ok(Json(state.json(&snitch)))
}

/// Makes a snitch.
#[utoipa::path(
    post,
    path = "/v1/snitches",
    tag = "snitches",
    request_body(content = openapi::NewSnitchRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The new snitch (200, not 201: compat)", body = wire::SnitchJson),
        openapi::KeyedCall,
        (status = 400, response = openapi::Malformed),
        (status = 413, response = openapi::TooLarge),
        (status = 422, response = openapi::Invalid),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn create_snitch(
    State(state): State<ApiState>,
    Authed(case): Authed,
    JsonBody(body): JsonBody,
) -> Result<Json<SnitchJson>, ApiError> {
    let fields = wire::snitch_fields(body.as_ref()).map_err(ApiError::invalid)?;
    let snitch = state.inner.service.create(&case, &fields).await?;
    // Compat: 200, not 201.
    Ok(Json(state.json(&snitch)))
}

/// Changes the attributes given.
#[utoipa::path(
    patch,
    path = "/v1/snitches/{token}",
    tag = "snitches",
    params(("token" = String, Path, description = "The snitch's token")),
    request_body(content = openapi::SnitchRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The snitch as updated", body = wire::SnitchJson),
        openapi::KeyedCall,
        (status = 404, response = openapi::NotFound),
        (status = 400, response = openapi::Malformed),
        (status = 413, response = openapi::TooLarge),
        (status = 422, response = openapi::Invalid),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn update_snitch(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<SnitchJson>, ApiError> {
    let fields = wire::snitch_fields(body.as_ref()).map_err(ApiError::invalid)?;
    let snitch = state.inner.service.update(&case, &token, &fields).await?;
    Ok(Json(state.json(&snitch)))
}

/// Deletes a snitch with its history.
#[utoipa::path(
    delete,
    path = "/v1/snitches/{token}",
    tag = "snitches",
    params(("token" = String, Path, description = "The snitch's token")),
    responses(
        (status = 204, description = "Deleted"),
        openapi::KeyedCall,
        (status = 404, response = openapi::NotFound),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn delete_snitch(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.inner.service.delete(&case, &token).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Adds tags.
#[utoipa::path(
    post,
    path = "/v1/snitches/{token}/tags",
    tag = "snitches",
    params(("token" = String, Path, description = "The snitch's token")),
    request_body(content = Vec<openapi::TagName>, content_type = "application/json"),
    responses(
        (status = 200, description = "Every tag of the snitch", body = Vec<String>),
        openapi::KeyedCall,
        (status = 404, response = openapi::NotFound),
        (status = 400, response = openapi::Malformed),
        (status = 413, response = openapi::TooLarge),
        (status = 422, response = openapi::Invalid),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn add_tags(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<Vec<String>>, ApiError> {
    let mut problems = Validations::new();
    let tags = match &body {
        Some(value) => wire::strings(value, "tags", &mut problems),
        None => Some(Vec::new()),
    };
    problems.into_result().map_err(ApiError::invalid)?;
    let tags = state
        .inner
        .service
        .add_tags(&case, &token, &tags.unwrap_or_default())
        .await?;
    Ok(Json(wire::tag_names(tags.as_slice())))
}

/// Removes a tag.
#[utoipa::path(
    delete,
    path = "/v1/snitches/{token}/tags/{tag}",
    tag = "snitches",
    params(("token" = String, Path, description = "The snitch's token"), ("tag" = String, Path, description = "The tag, percent-encoded (`+` is a space)")),
    responses(
        (status = 200, description = "The tags left", body = Vec<String>),
        openapi::KeyedCall,
        (status = 404, response = openapi::NotFound),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn remove_tag(
    State(state): State<ApiState>,
    Authed(case): Authed,
    uri: Uri,
) -> Result<Json<Vec<String>>, ApiError> {
    // The raw segments of `…/<token>/tags/<tag>`, decoded exactly once here: axum's path
    // parameters are already percent-decoded, and decoding those again would turn a
    // form-encoded literal plus (`%2B`) into a space.
    let path = uri.path();
    let path = path.strip_suffix('/').unwrap_or(path);
    let mut segments = path.rsplitn(4, '/');
    let (Some(tag), Some("tags"), Some(token)) =
        (segments.next(), segments.next(), segments.next())
    else {
        return Err(ApiError::not_found());
    };
    let (token, tag) = (decode_path_segment(token), decode_path_segment(tag));
    let tags = state.inner.service.remove_tag(&case, &token, &tag).await?;
    Ok(Json(wire::tag_names(tags.as_slice())))
}

/// Percent-decodes a path segment with `+` as a space (compat: clients form-encode tags).
pub(crate) fn decode_path_segment(raw: &str) -> String {
    let spaced = raw.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}

/// Pauses a snitch.
#[utoipa::path(
    post,
    path = "/v1/snitches/{token}/pause",
    tag = "snitches",
    params(("token" = String, Path, description = "The snitch's token")),
    request_body(content = openapi::PauseRequest, content_type = "application/json"),
    responses(
        (status = 204, description = "Paused"),
        openapi::KeyedCall,
        (status = 404, response = openapi::NotFound),
        (status = 400, response = openapi::Malformed),
        (status = 413, response = openapi::TooLarge),
        (status = 422, response = openapi::Invalid),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn pause(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<StatusCode, ApiError> {
    let until = wire::pause_until(body.as_ref()).map_err(ApiError::invalid)?;
    state
        .inner
        .service
        .pause(&case, &token, until.as_deref())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Unpauses a snitch.
#[utoipa::path(
    post,
    path = "/v1/snitches/{token}/unpause",
    tag = "snitches",
    params(("token" = String, Path, description = "The snitch's token")),
    responses(
        (status = 204, description = "Unpaused"),
        openapi::KeyedCall,
        (status = 404, response = openapi::NotFound),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn unpause(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.inner.service.unpause(&case, &token).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// How many recent events the events endpoint shows.
pub(crate) const EVENTS_SHOWN: usize = 100;

/// Recent events with their deliveries.
#[utoipa::path(
    get,
    path = "/v1/snitches/{token}/events",
    tag = "extensions",
    params(("token" = String, Path, description = "The snitch's token")),
    responses(
        (status = 200, description = "The snitch's recent events (at most 100), newest first, each with its deliveries and their attempts", body = Vec<wire::EventJson>),
        openapi::KeyedCall,
        (status = 404, response = openapi::NotFound),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn list_events(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(token): Path<String>,
) -> Result<Json<Vec<wire::EventJson>>, ApiError> {
    let events = state
        .inner
        .service
        .events_with_deliveries(&case, &token, EVENTS_SHOWN)
        .await?;
    Ok(Json(
        events
            .iter()
            .map(|(e, d)| wire::EventJson::new(e, d))
            .collect(),
    ))
}

/// The most expected times a schedule preview lists.
pub(crate) const PREVIEW_MAX: usize = 100;
/// How many it lists when `count` is absent.
pub(crate) const PREVIEW_DEFAULT: usize = 5;

/// The next expected times of a cron expression in a time zone, before saving it.
#[utoipa::path(
    get,
    path = "/v1/schedules/preview",
    tag = "extensions",
    params(
        ("schedule" = String, Query, description = "A 5-field cron expression or a macro such as @daily"),
        ("timezone" = Option<String>, Query, description = "An IANA time zone (default UTC; `tz` is accepted too)"),
        ("after" = Option<String>, Query, description = "ISO 8601; the times listed are strictly after it (default now)"),
        ("count" = Option<u32>, Query, description = "How many times, 1 to 100 (default 5)"),
    ),
    responses(
        (status = 200, description = "The next expected times", body = wire::SchedulePreviewJson),
        openapi::KeyedCall,
        (status = 422, response = openapi::Invalid),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn preview_schedule(
    State(state): State<ApiState>,
    Authed(case): Authed,
    RawQuery(query): RawQuery,
) -> Result<Json<wire::SchedulePreviewJson>, ApiError> {
    if case.on_hold {
        return Err(ServiceError::AccountOnHold.into());
    }
    let now = state.inner.service.clock().now();
    schedule_preview(query.as_deref(), now).map(Json)
}

/// The preview a query asks for (`schedule`, `timezone` or `tz`, `after`, `count`), `now`
/// standing for an absent `after`; each bad parameter a problem naming it. The API's
/// and the dashboard's (as the user types a schedule).
pub(crate) fn schedule_preview(
    query: Option<&str>,
    now: snitch_core::Timestamp,
) -> Result<wire::SchedulePreviewJson, ApiError> {
    let mut params: HashMap<String, String> = HashMap::new();
    for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        params
            .entry(key.into_owned())
            .or_insert_with(|| value.into_owned());
    }
    let text = |key: &str| params.get(key).map(String::as_str);
    let mut problems = Validations::new();
    let expression = text("schedule").unwrap_or("");
    let timezone = text("timezone")
        .or_else(|| text("tz"))
        .filter(|tz| !tz.trim().is_empty())
        .unwrap_or(snitch_core::schedule::DEFAULT_TIMEZONE);
    let schedule = problems
        .check(snitch_core::CronSchedule::parse(expression, timezone).map_err(Validation::from));
    let after = match text("after").filter(|a| !a.is_empty()) {
        None => Some(now),
        Some(raw) => problems.check(
            chrono::DateTime::parse_from_rfc3339(raw)
                .map(|t| t.to_utc())
                .map_err(|_| Validation::new("after", "must be an ISO 8601 time")),
        ),
    };
    let count = match text("count").filter(|c| !c.is_empty()) {
        None => Some(PREVIEW_DEFAULT),
        Some(raw) => problems.check(
            raw.trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=PREVIEW_MAX).contains(n))
                .ok_or_else(|| {
                    Validation::new(
                        "count",
                        format!("must be a whole number from 1 to {PREVIEW_MAX}"),
                    )
                }),
        ),
    };
    problems.into_result().map_err(ApiError::invalid)?;
    let (Some(schedule), Some(after), Some(count)) = (schedule, after, count) else {
        return Err(ApiError::invalid_attribute("schedule", "is invalid"));
    };
    let times: Vec<_> = schedule.times_after(after).take(count).collect();
    Ok(wire::SchedulePreviewJson {
        times: times.iter().map(|t| wire::format_time(*t)).collect(),
        local: times.iter().map(|t| schedule.to_local_iso(*t)).collect(),
        warnings: schedule.notes_on(&times),
    })
}

/// How many recent outages `GET /v1/outages` shows.
pub(crate) const OUTAGES_SHOWN: usize = 100;

/// Our own recent outages.
#[utoipa::path(
    get,
    path = "/v1/outages",
    tag = "extensions",
    responses(
        (status = 200, description = "Recent outages (at most 100), newest first", body = Vec<wire::OutageJson>),
        openapi::KeyedCall,
    ),
    security(("api_key" = []))
)]
pub(crate) async fn list_outages(
    State(state): State<ApiState>,
    Authed(case): Authed,
) -> Result<Json<Vec<wire::OutageJson>>, ApiError> {
    let outages = state.inner.service.outages(&case, OUTAGES_SHOWN).await?;
    Ok(Json(outages.iter().map(wire::OutageJson::new).collect()))
}

/// The case's webhooks.
#[utoipa::path(
    get,
    path = "/v1/webhooks",
    tag = "extensions",
    responses(
        (status = 200, description = "The case's webhooks, oldest first", body = Vec<wire::WebhookJson>),
        openapi::KeyedCall,
    ),
    security(("api_key" = []))
)]
pub(crate) async fn list_webhooks(
    State(state): State<ApiState>,
    Authed(case): Authed,
) -> Result<Json<Vec<wire::WebhookJson>>, ApiError> {
    let hooks = state.inner.service.webhooks(&case).await?;
    Ok(Json(hooks.iter().map(wire::WebhookJson::new).collect()))
}

/// Registers a webhook.
#[utoipa::path(
    post,
    path = "/v1/webhooks",
    tag = "extensions",
    request_body(content = openapi::WebhookRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The new webhook", body = wire::WebhookJson),
        openapi::KeyedCall,
        (status = 400, response = openapi::Malformed),
        (status = 413, response = openapi::TooLarge),
        (status = 422, response = openapi::Invalid),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn create_webhook(
    State(state): State<ApiState>,
    Authed(case): Authed,
    JsonBody(body): JsonBody,
) -> Result<Json<wire::WebhookJson>, ApiError> {
    let (url, secret) = wire::webhook_fields(body.as_ref()).map_err(ApiError::invalid)?;
    let hook = state
        .inner
        .service
        .create_webhook(&case, &url, secret.as_deref())
        .await?;
    Ok(Json(wire::WebhookJson::new(&hook)))
}

/// Removes a webhook.
#[utoipa::path(
    delete,
    path = "/v1/webhooks/{id}",
    tag = "extensions",
    params(("id" = String, Path, description = "The webhook's id")),
    responses(
        (status = 204, description = "Deleted"),
        openapi::KeyedCall,
        (status = 404, response = openapi::NotFound),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn delete_webhook(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.inner.service.delete_webhook(&case, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
