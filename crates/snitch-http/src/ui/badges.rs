//! The Badges page: the case's badge URLs (`all`, each tag, each snitch; SVG and
//! Shields.io JSON) under its badge key, each shown as text and the SVG one also as a
//! preview, and a form giving the case a new badge key (the old URLs stop working).
//! The page shows badge URLs only: the badge key reads badges and nothing else, and a
//! snitch's badge names it by a reference, never its token.

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use maud::{html, Markup};
use serde_json::Value;

use super::auth::{SignedForm, SignedIn};
use super::pages::{layout, notice, Frame, Nav};
use super::{done_of, UiState};
use crate::ApiError;

/// One badge as the page shows it: what it is of, and its SVG and JSON URLs.
struct BadgeRow {
    label: String,
    svg: String,
    json: String,
}

impl BadgeRow {
    fn of(label: impl Into<String>, urls: &Value) -> Self {
        let text = |k: &str| urls[k].as_str().unwrap_or("").to_owned();
        BadgeRow {
            label: label.into(),
            svg: text("svg"),
            json: text("json"),
        }
    }
}

/// The badges of the case: `all` first, then each tag (sorted), then each snitch.
fn rows(urls: &Value) -> (Vec<BadgeRow>, Vec<BadgeRow>) {
    let mut groups = Vec::new();
    if let Some(badges) = urls["badges"].as_object() {
        if let Some(all) = badges.get("all") {
            groups.push(BadgeRow::of("all", all));
        }
        let mut tags: Vec<(&String, &Value)> =
            badges.iter().filter(|(name, _)| *name != "all").collect();
        tags.sort_by(|a, b| a.0.cmp(b.0));
        groups.extend(
            tags.into_iter()
                .map(|(tag, v)| BadgeRow::of(tag.as_str(), v)),
        );
    }
    let snitches = urls["snitches"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|s| BadgeRow::of(s["name"].as_str().unwrap_or(""), s))
                .collect()
        })
        .unwrap_or_default();
    (groups, snitches)
}

/// `GET /badges`: the case's badge URLs (its badge key is made on first use).
pub(crate) async fn badges(
    State(ui): State<UiState>,
    signed: SignedIn,
    RawQuery(query): RawQuery,
) -> Response {
    let key = match ui.service().badge_key(&signed.case).await {
        Ok(k) => k,
        Err(e) => return ui.service_error(&signed, e),
    };
    let urls = match crate::badge::badge_urls(&ui.api, &signed.case, &key).await {
        Ok(v) => v,
        Err(e) => return api_error(&ui, &signed, e),
    };
    let (groups, snitches) = rows(&urls);
    let done = done_of(query.as_deref());
    let frame = ui.frame(Some(&signed));
    ui.page(
        StatusCode::OK,
        page_markup(&frame, &groups, &snitches, done.as_deref()),
    )
}

/// `POST /badges/rotate`: a new badge key; badges under the old one are gone.
pub(crate) async fn rotate(
    State(ui): State<UiState>,
    SignedForm { signed, .. }: SignedForm,
) -> Response {
    match ui.service().rotate_badge_key(&signed.case).await {
        Ok(_) => ui.see_other("/badges?done=badge-key-rotated"),
        Err(e) => ui.service_error(&signed, e),
    }
}

/// The page for a failure of [`crate::badge::badge_urls`] (already logged by the
/// conversion from the service's error when it was the store's).
fn api_error(ui: &UiState, signed: &SignedIn, err: ApiError) -> Response {
    match err {
        ApiError::Typed {
            status,
            retry_after_secs,
            ..
        } if status == StatusCode::SERVICE_UNAVAILABLE => {
            let mut r = ui.error_page(
                Some(signed),
                status,
                "Try again",
                "The store is unavailable for a moment; reload the page.",
            );
            if let Some(secs) = retry_after_secs {
                r.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            r
        }
        ApiError::Typed { status, .. } if status == StatusCode::PAYMENT_REQUIRED => ui.error_page(
            Some(signed),
            status,
            "Account on hold",
            "The case is on hold; its badges cannot be shown.",
        ),
        e => {
            tracing::error!(cause = ?e, "dashboard badge URLs failed");
            ui.error_page(
                Some(signed),
                StatusCode::INTERNAL_SERVER_ERROR,
                "Something went wrong",
                "The request failed; it was logged.",
            )
        }
    }
}

fn badge_table(caption: &str, first: &str, rows: &[BadgeRow]) -> Markup {
    html! {
        div.scroll {
            table.badges {
                caption.visually-hidden { (caption) }
                thead {
                    tr {
                        th scope="col" { (first) }
                        th scope="col" { "Preview" }
                        th scope="col" { "SVG" }
                        th scope="col" { "JSON (Shields.io endpoint)" }
                    }
                }
                tbody {
                    @for row in rows {
                        tr {
                            th scope="row" { (row.label) }
                            td { img.badge src=(row.svg) alt={ "Badge of " (row.label) } height="20"; }
                            td { code { (row.svg) } }
                            td { code { (row.json) } }
                        }
                    }
                }
            }
        }
    }
}

fn page_markup(
    frame: &Frame,
    groups: &[BadgeRow],
    snitches: &[BadgeRow],
    done: Option<&str>,
) -> Markup {
    let base = frame.base;
    let csrf = frame.signed_in.as_ref().map_or("", |s| s.csrf);
    let body = html! {
        h1 { "Badges" }
        (notice(done))
        p { "A badge shows whether the case's snitches are up, late or down, and nothing else: put its URL in a README or a status page. The badge key in these URLs reads badges only; it cannot check in or change anything." }
        h2 { "The case and its tags" }
        (badge_table("Badges of the case and of each tag", "Of", groups))
        h2 { "Each snitch" }
        @if snitches.is_empty() {
            p { "No snitches." }
        } @else {
            (badge_table("Badges of each snitch", "Snitch", snitches))
        }
        h2 { "Rotate the badge key" }
        p { "A new badge key makes new URLs; every badge URL shown above stops working." }
        form.inline method="post" action={ (base) "/badges/rotate" } {
            input type="hidden" name="csrf" value=(csrf);
            button.danger type="submit" { "Rotate badge key" }
        }
    };
    layout(frame, Nav::Badges, "Badges", body)
}
