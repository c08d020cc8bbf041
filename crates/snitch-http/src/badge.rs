//! Badges (docs/rules.md#badges): `GET /badge/<badge key>/<subject>.svg` (or `.json`, in
//! Shields.io's endpoint format), where the subject is `all`, a tag, or `s/<ref>` for one
//! snitch; and `GET /v1/badges`, the case's badge URLs. A badge key reads badges and
//! nothing else; a badge shows its label and state and nothing more.

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use snitch_core::{badge_state, BadgeState, ServiceError, Snitch};

use crate::api::{ApiState, Authed};
use crate::{openapi, ApiError};

/// Everything but unreserved characters: a tag made one path segment of a badge URL.
const PATH_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// How long a badge may be cached: a state change shows within about this long.
pub const BADGE_MAX_AGE_SECS: u32 = 30;

/// A badge's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Svg,
    Json,
}

/// The reference of one snitch in its badge URL: the HMAC-SHA256 of its token under the
/// badge key, 16 hex digits. It names the snitch to the badge route and cannot check in.
pub fn snitch_badge_ref(badge_key: &str, token: &str) -> String {
    snitch_core::derived::keyed_hex(badge_key.as_bytes(), token.as_bytes(), 8)
}

fn split_format(file: &str) -> Option<(&str, Format)> {
    if let Some(subject) = file.strip_suffix(".svg") {
        Some((subject, Format::Svg))
    } else {
        file.strip_suffix(".json").map(|s| (s, Format::Json))
    }
}

/// A badge of the case's snitches, or of those with one tag (`all` for every snitch).
#[utoipa::path(
    get,
    path = "/badge/{key}/{file}",
    tag = "operations",
    params(
        ("key" = String, Path, description = "The case's badge key"),
        ("file" = String, Path, description = "`all`, or a tag, then `.svg` or `.json`"),
    ),
    responses(
        (status = 200, description = "The badge: SVG, or Shields.io endpoint JSON", body = String, content_type = "image/svg+xml"),
        (status = 404, response = openapi::NotFound),
    )
)]
pub(crate) async fn badge(
    State(state): State<ApiState>,
    Path((key, file)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (subject, format) = split_format(&file).ok_or_else(ApiError::not_found)?;
    let snitches = badge_snitches(&state, &key).await?;
    let now = state.inner.service.now();
    let chosen: Vec<&Snitch> = if subject == "all" {
        snitches.iter().collect()
    } else {
        snitches
            .iter()
            .filter(|s| s.tags().iter().any(|t| t.as_str() == subject))
            .collect()
    };
    if chosen.is_empty() && subject != "all" {
        return Err(ApiError::not_found());
    }
    Ok(render(subject, badge_state(chosen, now), format))
}

/// The badge of one snitch, named by its reference ([`snitch_badge_ref`]).
#[utoipa::path(
    get,
    path = "/badge/{key}/s/{file}",
    tag = "operations",
    params(
        ("key" = String, Path, description = "The case's badge key"),
        ("file" = String, Path, description = "The snitch's badge reference, then `.svg` or `.json`"),
    ),
    responses(
        (status = 200, description = "The badge: SVG, or Shields.io endpoint JSON", body = String, content_type = "image/svg+xml"),
        (status = 404, response = openapi::NotFound),
    )
)]
pub(crate) async fn snitch_badge(
    State(state): State<ApiState>,
    Path((key, file)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let (reference, format) = split_format(&file).ok_or_else(ApiError::not_found)?;
    let snitches = badge_snitches(&state, &key).await?;
    let snitch = snitches
        .iter()
        .find(|s| snitch_badge_ref(&key, s.token().as_str()) == reference)
        .ok_or_else(ApiError::not_found)?;
    let now = state.inner.service.now();
    Ok(render(
        snitch.name().as_str(),
        badge_state([snitch], now),
        format,
    ))
}

async fn badge_snitches(state: &ApiState, key: &str) -> Result<Vec<Snitch>, ApiError> {
    match state.inner.service.badge_snitches(key).await {
        Ok(s) => Ok(s),
        Err(ServiceError::NotFound) => Err(ApiError::not_found()),
        Err(e) => Err(e.into()),
    }
}

/// The case's badge URLs, one per tag and one for `all`, each as SVG and JSON, and one
/// per snitch.
#[utoipa::path(
    get,
    path = "/v1/badges",
    tag = "extensions",
    responses(
        (status = 200, description = "The case's badge URLs", body = Object),
        openapi::KeyedCall,
    ),
    security(("api_key" = []))
)]
pub(crate) async fn list_badges(
    State(state): State<ApiState>,
    Authed(case): Authed,
) -> Result<Json<Value>, ApiError> {
    let key = state.inner.service.badge_key(&case).await?;
    Ok(Json(badge_urls(&state, &case, &key).await?))
}

/// Gives the case a new badge key: the old badge URLs stop working.
#[utoipa::path(
    post,
    path = "/v1/badges/rotate",
    tag = "extensions",
    responses(
        (status = 200, description = "The case's badge URLs under the new key", body = Object),
        openapi::KeyedCall,
    ),
    security(("api_key" = []))
)]
pub(crate) async fn rotate_badges(
    State(state): State<ApiState>,
    Authed(case): Authed,
) -> Result<Json<Value>, ApiError> {
    let key = state.inner.service.rotate_badge_key(&case).await?;
    Ok(Json(badge_urls(&state, &case, &key).await?))
}

/// `{"badges": {"all": {"svg", "json"}, "<tag>": …}, "snitches": [{"name", "svg",
/// "json"}]}`, paths under the server's public URL when it is known.
pub(crate) async fn badge_urls(
    state: &ApiState,
    case: &snitch_core::Case,
    key: &str,
) -> Result<Value, ApiError> {
    let snitches = state.inner.service.list(case, &[]).await?;
    let base = state.inner.public_base.as_deref().unwrap_or("");
    let both = |path: String| json!({"svg": format!("{base}{path}.svg"), "json": format!("{base}{path}.json")});
    let mut tags: Vec<&str> = snitches
        .iter()
        .flat_map(|s| s.tags().iter().map(|t| t.as_str()))
        .collect();
    tags.sort_unstable();
    tags.dedup();
    let mut badges = serde_json::Map::new();
    badges.insert("all".into(), both(format!("/badge/{key}/all")));
    for tag in tags {
        let encoded: String = percent_encoding::utf8_percent_encode(tag, PATH_SEGMENT).collect();
        badges.insert(tag.into(), both(format!("/badge/{key}/{encoded}")));
    }
    let per_snitch: Vec<Value> = snitches
        .iter()
        .map(|s| {
            let mut urls = both(format!(
                "/badge/{key}/s/{}",
                snitch_badge_ref(key, s.token().as_str())
            ));
            urls["name"] = json!(s.name().as_str());
            urls
        })
        .collect();
    Ok(json!({"badges": badges, "snitches": per_snitch}))
}

fn render(label: &str, state: BadgeState, format: Format) -> Response {
    let (colour, hex) = match state {
        BadgeState::Up => ("brightgreen", "#4c1"),
        BadgeState::Late => ("orange", "#fe7d37"),
        BadgeState::Down => ("red", "#e05d44"),
    };
    let cache = HeaderValue::from_str(&format!("public, max-age={BADGE_MAX_AGE_SECS}"))
        .unwrap_or_else(|_| HeaderValue::from_static("no-cache"));
    match format {
        Format::Json => {
            let body = json!({
                "schemaVersion": 1,
                "label": label,
                "message": state.as_str(),
                "color": colour,
            });
            (StatusCode::OK, [(header::CACHE_CONTROL, cache)], Json(body)).into_response()
        }
        Format::Svg => (
            StatusCode::OK,
            [
                (
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("image/svg+xml; charset=utf-8"),
                ),
                (header::CACHE_CONTROL, cache),
                (
                    header::CONTENT_SECURITY_POLICY,
                    HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'"),
                ),
                (
                    header::X_CONTENT_TYPE_OPTIONS,
                    HeaderValue::from_static("nosniff"),
                ),
            ],
            svg(label, state.as_str(), hex),
        )
            .into_response(),
    }
}

/// A flat badge, Shields' layout: the label on grey, the state on its colour. Widths
/// are estimated at 7 px a character (Verdana 11 px), which is close enough for a badge.
fn svg(label: &str, message: &str, colour: &str) -> String {
    let label: String = label.chars().take(60).collect();
    let width = |text: &str| 10 + 7 * text.chars().count();
    let (lw, mw) = (width(&label), width(message));
    let total = lw + mw;
    let (lx, mx) = (lw * 5, lw * 10 + mw * 5);
    let label = xml_escape(&label);
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{total}\" height=\"20\" role=\"img\" \
         aria-label=\"{label}: {message}\"><title>{label}: {message}</title>\
         <linearGradient id=\"s\" x2=\"0\" y2=\"100%\"><stop offset=\"0\" stop-color=\"#bbb\" \
         stop-opacity=\".1\"/><stop offset=\"1\" stop-opacity=\".1\"/></linearGradient>\
         <clipPath id=\"r\"><rect width=\"{total}\" height=\"20\" rx=\"3\" fill=\"#fff\"/></clipPath>\
         <g clip-path=\"url(#r)\"><rect width=\"{lw}\" height=\"20\" fill=\"#555\"/>\
         <rect x=\"{lw}\" width=\"{mw}\" height=\"20\" fill=\"{colour}\"/>\
         <rect width=\"{total}\" height=\"20\" fill=\"url(#s)\"/></g>\
         <g fill=\"#fff\" text-anchor=\"middle\" font-family=\"Verdana,Geneva,DejaVu Sans,sans-serif\" \
         font-size=\"110\"><text x=\"{lx}\" y=\"140\" transform=\"scale(.1)\">{label}</text>\
         <text x=\"{mx}\" y=\"140\" transform=\"scale(.1)\">{message}</text></g></svg>"
    )
}

fn xml_escape(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control())
        .map(|c| match c {
            '&' => "&amp;".to_owned(),
            '<' => "&lt;".to_owned(),
            '>' => "&gt;".to_owned(),
            '"' => "&quot;".to_owned(),
            '\'' => "&apos;".to_owned(),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svg_labels_are_text_and_refs_hide_the_token() {
        let out = svg("<script>alert(1)</script>", "down", "#e05d44");
        assert!(!out.contains("<script>"));
        assert!(out.contains("&lt;script&gt;"));
        let reference = snitch_badge_ref("badgekey0000000000001", "tok00000000000000001");
        assert_eq!(reference.len(), 16);
        assert!(!reference.contains("tok"));
        assert_ne!(
            reference,
            snitch_badge_ref("badgekey0000000000002", "tok00000000000000001")
        );
    }
}
