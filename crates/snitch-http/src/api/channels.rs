//! `/v1/channels`: the case's alert channels (docs/api.md#channels). Webhooks are listed
//! as channels of kind `webhook`; `/v1/webhooks` stays their own view.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::{json, Map, Value};
use snitch_core::service::{ChannelInput, ListedChannel};
use snitch_core::{ChannelConfig, Validations, Webhook};

use crate::wire::{format_time, password_masked};
use crate::{openapi, ApiError};

use super::{ApiState, Authed, JsonBody};

/// Sends a channel's test notification (the channel notifier of `snitch-notify` does, in
/// a server): `POST /v1/channels/<id>/test` and the dashboard's button.
pub use snitch_core::ChannelTester;

/// A shared tester.
pub type SharedChannelTester = Arc<dyn ChannelTester>;

/// What a masked secret is shown as.
const MASK: &str = "***";

/// A channel as the API shows it: `id`, `kind`, `name`, its settings (secrets `***`,
/// URLs with their secret parts masked), `events`, `tags`, `created_at`.
pub fn channel_json(channel: &ListedChannel) -> Value {
    match channel {
        ListedChannel::Webhook(hook) => webhook_channel_json(hook),
        ListedChannel::Channel(c) => {
            let mut out = Map::new();
            out.insert("id".into(), json!(c.id));
            out.insert("kind".into(), json!(c.kind().as_str()));
            out.insert("name".into(), json!(c.name));
            for (name, shown) in shown_settings(c) {
                out.insert(name.to_owned(), json!(shown));
            }
            out.insert("events".into(), json!(c.events.names()));
            let tags: Vec<&str> = c.tags.iter().map(|t| t.as_str()).collect();
            out.insert("tags".into(), json!(tags));
            out.insert("created_at".into(), json!(format_time(c.created_at)));
            Value::Object(out)
        }
    }
}

fn webhook_channel_json(hook: &Webhook) -> Value {
    json!({
        "id": hook.id,
        "kind": "webhook",
        "name": null,
        "url": password_masked(hook.url.as_str()),
        "signed": hook.secret.is_some(),
        "events": ["missing", "errored", "reporting", "paused"],
        "tags": [],
        "created_at": format_time(hook.created_at),
    })
}

/// Each setting as shown: secrets masked whole, URLs masked as webhook URLs are.
pub fn shown_settings(c: &ChannelConfig) -> Vec<(&'static str, String)> {
    use snitch_core::SettingValue;
    c.kind()
        .settings()
        .iter()
        .filter_map(|spec| {
            let value = c.settings.get(spec.name)?;
            let shown = match (spec.secret, spec.value) {
                (true, SettingValue::Url) => password_masked_whole_path(value),
                (true, _) => MASK.to_owned(),
                (false, SettingValue::Url) => password_masked(value),
                (false, _) => value.to_owned(),
            };
            Some((spec.name, shown))
        })
        .collect()
}

/// A chat webhook URL is the credential: only its origin is shown.
fn password_masked_whole_path(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => format!("{}/{MASK}", u.origin().ascii_serialization()),
        Err(_) => MASK.to_owned(),
    }
}

/// Drops from a change the settings sent back exactly as [`shown_settings`] shows them
/// (masked): those stay as they are, so a listed channel can be sent back.
pub(crate) fn drop_settings_as_shown(input: &mut ChannelInput, current: &ChannelConfig) {
    let shown = shown_settings(current);
    input
        .settings
        .retain(|(name, value)| !shown.iter().any(|(n, s)| n == name && s == value));
}

/// A channel body read into a [`ChannelInput`]: `kind`, `name`, `events`, `tags`, and
/// every other member a setting (texts, or numbers written as text). `id` and
/// `created_at` are ignored, so a listed channel can be sent back as it was.
pub fn channel_input(body: Option<&Value>) -> Result<ChannelInput, Validations> {
    let empty = Map::new();
    let object = match body {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(o)) => o,
        Some(_) => return Err(Validations::single("channel", "must be a JSON object")),
    };
    let mut problems = Validations::new();
    let mut input = ChannelInput::default();
    let text = |name: &str, v: &Value, problems: &mut Validations| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => None,
        _ => {
            problems.push(name, "must be a string");
            None
        }
    };
    let list = |name: &str, v: &Value, problems: &mut Validations| match v {
        Value::Array(items) => {
            let mut out = Vec::new();
            for item in items {
                match item {
                    Value::String(s) => out.push(s.clone()),
                    _ => {
                        problems.push(name, "must be a list of strings");
                        return None;
                    }
                }
            }
            Some(out)
        }
        Value::String(s) => Some(s.split(',').map(str::to_owned).collect()),
        Value::Null => None,
        _ => {
            problems.push(name, "must be a list of strings");
            None
        }
    };
    for (name, value) in object {
        match name.as_str() {
            "id" | "created_at" | "signed" => {}
            "kind" => input.kind = text(name, value, &mut problems),
            "name" => input.name = Some(text(name, value, &mut problems).unwrap_or_default()),
            "events" => input.events = list(name, value, &mut problems),
            "tags" => input.tags = Some(list(name, value, &mut problems).unwrap_or_default()),
            _ => {
                if let Some(v) = text(name, value, &mut problems) {
                    input.settings.push((name.clone(), v));
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(input)
    } else {
        Err(problems)
    }
}

/// The case's channels, webhooks included, oldest first.
#[utoipa::path(
    get,
    path = "/v1/channels",
    tag = "extensions",
    responses(
        (status = 200, description = "The case's channels, oldest first (secrets masked)", body = Vec<Object>),
        openapi::KeyedCall,
    ),
    security(("api_key" = []))
)]
pub(crate) async fn list_channels(
    State(state): State<ApiState>,
    Authed(case): Authed,
) -> Result<Json<Vec<Value>>, ApiError> {
    let channels = state.inner.service.channels(&case).await?;
    Ok(Json(channels.iter().map(channel_json).collect()))
}

/// Adds a channel.
#[utoipa::path(
    post,
    path = "/v1/channels",
    tag = "extensions",
    request_body(content = Object, content_type = "application/json",
        description = "`kind`, `name`, the kind's settings, `events`, `tags`"),
    responses(
        (status = 200, description = "The new channel", body = Object),
        openapi::KeyedCall,
        (status = 400, response = openapi::Malformed),
        (status = 413, response = openapi::TooLarge),
        (status = 422, response = openapi::Invalid),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn create_channel(
    State(state): State<ApiState>,
    Authed(case): Authed,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let input = channel_input(body.as_ref()).map_err(ApiError::invalid)?;
    let channel = state.inner.service.create_channel(&case, &input).await?;
    // 200, as every create of the extensions answers (docs/rules.md).
    Ok(Json(channel_json(&channel)))
}

/// One channel.
#[utoipa::path(
    get,
    path = "/v1/channels/{id}",
    tag = "extensions",
    params(("id" = String, Path, description = "The channel's id")),
    responses(
        (status = 200, description = "The channel (secrets masked)", body = Object),
        openapi::KeyedCall,
        (status = 404, response = openapi::NotFound),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn get_channel(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let channel = state.inner.service.channel(&case, &id).await?;
    Ok(Json(channel_json(&channel)))
}

/// Changes a channel: what the body gives replaces what it had; a setting sent back
/// masked as it was shown stays as it is.
#[utoipa::path(
    patch,
    path = "/v1/channels/{id}",
    tag = "extensions",
    params(("id" = String, Path, description = "The channel's id")),
    request_body(content = Object, content_type = "application/json"),
    responses(
        (status = 200, description = "The channel as changed", body = Object),
        openapi::KeyedCall,
        (status = 400, response = openapi::Malformed),
        (status = 404, response = openapi::NotFound),
        (status = 413, response = openapi::TooLarge),
        (status = 422, response = openapi::Invalid),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn update_channel(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(id): Path<String>,
    JsonBody(body): JsonBody,
) -> Result<Json<Value>, ApiError> {
    let mut input = channel_input(body.as_ref()).map_err(ApiError::invalid)?;
    if let ListedChannel::Channel(current) = state.inner.service.channel(&case, &id).await? {
        drop_settings_as_shown(&mut input, &current);
    }
    let channel = state
        .inner
        .service
        .update_channel(&case, &id, &input)
        .await?;
    Ok(Json(channel_json(&channel)))
}

/// Removes a channel (or webhook).
#[utoipa::path(
    delete,
    path = "/v1/channels/{id}",
    tag = "extensions",
    params(("id" = String, Path, description = "The channel's id")),
    responses(
        (status = 204, description = "Deleted"),
        openapi::KeyedCall,
        (status = 404, response = openapi::NotFound),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn delete_channel(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    state.inner.service.delete_channel(&case, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Sends a test notification through the channel now: `{"ok", "detail"}`, the vendor's
/// answer or why it failed.
#[utoipa::path(
    post,
    path = "/v1/channels/{id}/test",
    tag = "extensions",
    params(("id" = String, Path, description = "The channel's id")),
    responses(
        (status = 200, description = "What the vendor answered: `ok` and `detail`", body = Object),
        openapi::KeyedCall,
        (status = 404, response = openapi::NotFound),
        (status = 422, response = openapi::Invalid),
    ),
    security(("api_key" = []))
)]
pub(crate) async fn test_channel(
    State(state): State<ApiState>,
    Authed(case): Authed,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let channel = state.inner.service.channel(&case, &id).await?;
    let result = send_test(state.inner.channel_tester.as_deref(), &channel).await?;
    Ok(Json(result))
}

/// Tests `channel` through `tester`: `{"ok": true, "detail"}` or `{"ok": false, "detail",
/// "permanent"}`. Webhooks and e-mail channels have no test here (422).
pub(crate) async fn send_test(
    tester: Option<&dyn ChannelTester>,
    channel: &ListedChannel,
) -> Result<Value, ApiError> {
    let ListedChannel::Channel(c) = channel else {
        return Err(ApiError::invalid(Validations::single(
            "kind",
            "webhook channels are tested by their receiver, not from here",
        )));
    };
    if c.kind() == snitch_core::ChannelKind::Email {
        return Err(ApiError::invalid(Validations::single(
            "kind",
            "e-mail channels have no test notification; alerts show in the events",
        )));
    }
    let Some(tester) = tester else {
        return Err(ApiError::invalid(Validations::single(
            "kind",
            "this server sends no channel notifications",
        )));
    };
    let name = c
        .name
        .clone()
        .unwrap_or_else(|| c.kind().as_str().to_owned());
    Ok(match tester.test(c, &name).await {
        Ok(detail) => json!({"ok": true, "detail": detail}),
        Err(e) => json!({"ok": false, "detail": e.detail, "permanent": e.permanent}),
    })
}
