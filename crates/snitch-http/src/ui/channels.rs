//! The Channels page: the case's alert channels (Slack, PagerDuty, ntfy, …) added, listed
//! with their secrets masked, changed, tested and removed through the same service (and
//! validation) as `/v1/channels`; and `/alerts/<channel>/<reference>`, where the links of
//! channel messages lead (a reference, never a snitch's token). Signed webhooks keep their
//! own page.

use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use maud::{html, Markup};
use snitch_core::service::{ChannelInput, ListedChannel};
use snitch_core::{
    ChannelConfig, ChannelKind, ServiceError, SettingSpec, SettingValue, Validations,
};

use super::auth::{SignedForm, SignedIn};
use super::pages::{field_problem, layout, notice, problem_for, problems, time, Frame, Nav};
use super::{done_of, Form, UiState};
use crate::api::channels::{send_test, shown_settings};

/// The events a channel can want, as the API names them.
const EVENTS: [&str; 4] = ["missing", "errored", "reporting", "paused"];
/// The events checked on a new channel's form (the service's default).
const DEFAULT_EVENTS: [&str; 3] = ["missing", "errored", "reporting"];

/// The kinds added here: every kind but `webhook`, which has its own page.
fn addable_kinds() -> impl Iterator<Item = ChannelKind> {
    ChannelKind::ALL
        .into_iter()
        .filter(|k| *k != ChannelKind::Webhook)
}

fn addable_kind(raw: &str) -> Option<ChannelKind> {
    ChannelKind::parse(raw.trim()).filter(|k| *k != ChannelKind::Webhook)
}

/// The form field of a setting.
fn setting_field(name: &str) -> String {
    format!("s_{name}")
}

/// What the add or edit form holds, as typed.
pub(crate) struct ChannelForm {
    kind: ChannelKind,
    name: String,
    /// Each setting of the kind, in its documented order.
    settings: Vec<(&'static SettingSpec, String)>,
    events: Vec<String>,
    tags: String,
}

impl ChannelForm {
    fn new(kind: ChannelKind) -> Self {
        ChannelForm {
            kind,
            name: String::new(),
            settings: kind.settings().iter().map(|s| (s, String::new())).collect(),
            events: DEFAULT_EVENTS.iter().map(|e| (*e).to_owned()).collect(),
            tags: String::new(),
        }
    }

    /// A channel's form: secrets empty (left empty, they stay), the rest as shown.
    fn of(c: &ChannelConfig) -> Self {
        let shown = shown_settings(c);
        ChannelForm {
            kind: c.kind(),
            name: c.name.clone().unwrap_or_default(),
            settings: c
                .kind()
                .settings()
                .iter()
                .map(|spec| {
                    let value = if spec.secret {
                        String::new()
                    } else {
                        shown
                            .iter()
                            .find(|(n, _)| *n == spec.name)
                            .map(|(_, v)| v.clone())
                            .unwrap_or_default()
                    };
                    (spec, value)
                })
                .collect(),
            events: c.events.names().iter().map(|e| (*e).to_owned()).collect(),
            tags: tags_text(c),
        }
    }

    fn posted(kind: ChannelKind, form: &Form) -> Self {
        ChannelForm {
            kind,
            name: form.get("name").to_owned(),
            settings: kind
                .settings()
                .iter()
                .map(|spec| (spec, form.get(&setting_field(spec.name)).to_owned()))
                .collect(),
            events: EVENTS
                .iter()
                .filter(|e| !form.get(&format!("event_{e}")).is_empty())
                .map(|e| (*e).to_owned())
                .collect(),
            tags: form.get("tags").to_owned(),
        }
    }

    /// The service's input: every field given; settings only when typed.
    fn input(&self, with_kind: bool) -> ChannelInput {
        ChannelInput {
            kind: with_kind.then(|| self.kind.as_str().to_owned()),
            name: Some(self.name.clone()),
            settings: self
                .settings
                .iter()
                .filter(|(_, v)| !v.trim().is_empty())
                .map(|(spec, v)| (spec.name.to_owned(), v.clone()))
                .collect(),
            events: Some(self.events.clone()),
            tags: Some(
                self.tags
                    .split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned)
                    .collect(),
            ),
        }
    }
}

fn tags_text(c: &ChannelConfig) -> String {
    c.tags
        .iter()
        .map(|t| t.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a test notification gave, shown on the list.
pub(crate) struct TestResult {
    channel_id: String,
    ok: bool,
    detail: String,
}

// ---------------------------------------------------------------------------------------
// Handlers
// ---------------------------------------------------------------------------------------

fn not_found(ui: &UiState, signed: &SignedIn) -> Response {
    ui.error_page(
        Some(signed),
        StatusCode::NOT_FOUND,
        "Not found",
        "There is no such channel in this case.",
    )
}

/// The service's error, a missing channel named as such.
fn channel_error(ui: &UiState, signed: &SignedIn, err: ServiceError) -> Response {
    match err {
        ServiceError::NotFound => not_found(ui, signed),
        e => ui.service_error(signed, e),
    }
}

/// One of the case's channels (never a webhook: those have their own page).
async fn load(ui: &UiState, signed: &SignedIn, id: &str) -> Result<ChannelConfig, Response> {
    match ui.service().channel(&signed.case, id).await {
        Ok(ListedChannel::Channel(c)) => Ok(c),
        Ok(ListedChannel::Webhook(_)) | Err(ServiceError::NotFound) => Err(not_found(ui, signed)),
        Err(e) => Err(ui.service_error(signed, e)),
    }
}

pub(crate) async fn channels(
    State(ui): State<UiState>,
    signed: SignedIn,
    RawQuery(query): RawQuery,
) -> Response {
    let done = done_of(query.as_deref());
    list_page(&ui, &signed, done.as_deref(), None).await
}

async fn list_page(
    ui: &UiState,
    signed: &SignedIn,
    done: Option<&str>,
    tested: Option<&TestResult>,
) -> Response {
    match ui.service().channels(&signed.case).await {
        Ok(all) => {
            let channels: Vec<ChannelConfig> = all
                .into_iter()
                .filter_map(|c| match c {
                    ListedChannel::Channel(c) => Some(c),
                    ListedChannel::Webhook(_) => None,
                })
                .collect();
            let frame = ui.frame(Some(signed));
            ui.page(StatusCode::OK, list_markup(&frame, &channels, done, tested))
        }
        Err(e) => ui.service_error(signed, e),
    }
}

pub(crate) async fn new_channel(
    State(ui): State<UiState>,
    signed: SignedIn,
    RawQuery(query): RawQuery,
) -> Response {
    let kind = form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes())
        .find(|(k, _)| k == "kind")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    let frame = ui.frame(Some(&signed));
    match addable_kind(&kind) {
        Some(kind) => ui.page(
            StatusCode::OK,
            form_markup(&frame, None, &ChannelForm::new(kind), None),
        ),
        None => {
            let errors = (!kind.is_empty())
                .then(|| Validations::single("kind", "is not a kind of channel added here"));
            let status = if errors.is_some() {
                StatusCode::UNPROCESSABLE_ENTITY
            } else {
                StatusCode::OK
            };
            ui.page(status, choose_kind_markup(&frame, errors.as_ref()))
        }
    }
}

pub(crate) async fn add_channel(
    State(ui): State<UiState>,
    SignedForm { signed, form }: SignedForm,
) -> Response {
    let frame = ui.frame(Some(&signed));
    let Some(kind) = addable_kind(form.get("kind")) else {
        let errors = Validations::single("kind", "is not a kind of channel added here");
        return ui.page(
            StatusCode::UNPROCESSABLE_ENTITY,
            choose_kind_markup(&frame, Some(&errors)),
        );
    };
    let typed = ChannelForm::posted(kind, &form);
    match ui
        .service()
        .create_channel(&signed.case, &typed.input(true))
        .await
    {
        Ok(c) => ui.see_other(&format!("/channels?done=channel-added#{}", c.id())),
        Err(ServiceError::Invalid(v)) => ui.page(
            StatusCode::UNPROCESSABLE_ENTITY,
            form_markup(&frame, None, &typed, Some(&v)),
        ),
        Err(e) => ui.service_error(&signed, e),
    }
}

pub(crate) async fn edit_channel_form(
    State(ui): State<UiState>,
    signed: SignedIn,
    Path(id): Path<String>,
) -> Response {
    match load(&ui, &signed, &id).await {
        Ok(c) => {
            let frame = ui.frame(Some(&signed));
            ui.page(
                StatusCode::OK,
                form_markup(&frame, Some(&c), &ChannelForm::of(&c), None),
            )
        }
        Err(r) => r,
    }
}

pub(crate) async fn update_channel(
    State(ui): State<UiState>,
    Path(id): Path<String>,
    SignedForm { signed, form }: SignedForm,
) -> Response {
    let current = match load(&ui, &signed, &id).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let typed = ChannelForm::posted(current.kind(), &form);
    let mut input = typed.input(false);
    // Left empty, or sent back as shown (masked): the setting stays as it is.
    input.settings.retain(|(_, value)| !value.trim().is_empty());
    crate::api::channels::drop_settings_as_shown(&mut input, &current);
    match ui.service().update_channel(&signed.case, &id, &input).await {
        Ok(c) => ui.see_other(&format!("/channels?done=channel-updated#{}", c.id())),
        Err(ServiceError::Invalid(v)) => {
            let frame = ui.frame(Some(&signed));
            ui.page(
                StatusCode::UNPROCESSABLE_ENTITY,
                form_markup(&frame, Some(&current), &typed, Some(&v)),
            )
        }
        Err(e) => channel_error(&ui, &signed, e),
    }
}

pub(crate) async fn test_channel(
    State(ui): State<UiState>,
    Path(id): Path<String>,
    SignedForm { signed, .. }: SignedForm,
) -> Response {
    let channel = match load(&ui, &signed, &id).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let tester = ui.api.inner.channel_tester.as_deref();
    let result = if channel.kind() == ChannelKind::Email {
        TestResult {
            channel_id: id,
            ok: false,
            detail: "e-mail channels have no test notification; alerts show in the events".into(),
        }
    } else if tester.is_none() {
        TestResult {
            channel_id: id,
            ok: false,
            detail: "this server sends no channel notifications".into(),
        }
    } else {
        match send_test(tester, &ListedChannel::Channel(channel)).await {
            Ok(v) => TestResult {
                channel_id: id,
                ok: v["ok"].as_bool().unwrap_or(false),
                detail: v["detail"].as_str().unwrap_or("").to_owned(),
            },
            Err(_) => TestResult {
                channel_id: id,
                ok: false,
                detail: "the test could not be sent".into(),
            },
        }
    };
    list_page(&ui, &signed, None, Some(&result)).await
}

pub(crate) async fn delete_channel(
    State(ui): State<UiState>,
    Path(id): Path<String>,
    SignedForm { signed, .. }: SignedForm,
) -> Response {
    if let Err(r) = load(&ui, &signed, &id).await {
        return r;
    }
    match ui.service().delete_channel(&signed.case, &id).await {
        Ok(()) => ui.see_other("/channels?done=channel-removed"),
        Err(e) => channel_error(&ui, &signed, e),
    }
}

/// `/alerts/<channel>/<reference>`: the snitch of the case whose reference for that
/// channel ([`snitch_core::derived::derived_ref`]) is `reference`.
pub(crate) async fn alert(
    State(ui): State<UiState>,
    signed: SignedIn,
    Path((channel_id, reference)): Path<(String, String)>,
) -> Response {
    let channel = match load(&ui, &signed, &channel_id).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let snitches = match ui.service().list(&signed.case, &[]).await {
        Ok(s) => s,
        Err(e) => return ui.service_error(&signed, e),
    };
    let found = snitches
        .iter()
        .find(|s| snitch_core::derived::derived_ref(&channel.key, s.token().as_str()) == reference);
    match found {
        Some(s) => ui.see_other(&format!("/snitches/{}", s.token().as_str())),
        None => ui.error_page(
            Some(&signed),
            StatusCode::NOT_FOUND,
            "Not found",
            "No snitch of this case matches that alert; it may have been deleted.",
        ),
    }
}

// ---------------------------------------------------------------------------------------
// Pages
// ---------------------------------------------------------------------------------------

fn channel_title(c: &ChannelConfig) -> String {
    match &c.name {
        Some(n) => format!("{n} ({})", c.kind().as_str()),
        None => c.kind().as_str().to_owned(),
    }
}

fn list_markup(
    frame: &Frame,
    channels: &[ChannelConfig],
    done: Option<&str>,
    tested: Option<&TestResult>,
) -> Markup {
    let base = frame.base;
    let csrf = frame.signed_in.as_ref().map_or("", |s| s.csrf);
    let body = html! {
        h1 { "Channels" }
        (notice(done))
        @if let Some(t) = tested {
            @let name = channels.iter().find(|c| c.id == t.channel_id).map(channel_title).unwrap_or_default();
            @if t.ok {
                div.notice.test-result role="status" {
                    p { strong { "Test sent to " (name) "." } }
                    p { "Answer: " span.test-detail { (t.detail) } }
                }
            } @else {
                div.problems.test-result role="alert" {
                    p { strong { "The test to " (name) " failed." } }
                    p { "Answer: " span.test-detail { (t.detail) } }
                }
            }
        }
        p { "Alerts of the case's snitches go to each channel that wants the event (and, when it has tags, only for snitches with one of them). Signed webhooks are on the " a href={ (base) "/webhooks" } { "Webhooks" } " page." }
        @if channels.is_empty() {
            p { "No channels." }
        } @else {
            div.scroll {
                table {
                    thead {
                        tr {
                            th scope="col" { "Kind" }
                            th scope="col" { "Name" }
                            th scope="col" { "Settings" }
                            th scope="col" { "Events" }
                            th scope="col" { "Tags" }
                            th scope="col" { "Added" }
                            th scope="col" { span.visually-hidden { "Actions" } }
                        }
                    }
                    tbody {
                        @for c in channels {
                            @let title = channel_title(c);
                            tr id=(c.id) {
                                td { (c.kind().as_str()) }
                                td { (c.name.as_deref().unwrap_or("")) }
                                td {
                                    ul.settings {
                                        @for (name, shown) in shown_settings(c) {
                                            li { (name) ": " code { (shown) } }
                                        }
                                    }
                                }
                                td { (c.events.names().join(", ")) }
                                td {
                                    @if c.tags.is_empty() { span.muted { "every snitch" } }
                                    @else { (tags_text(c)) }
                                }
                                td { (time(c.created_at)) }
                                td {
                                    div.row {
                                        a href={ (base) "/channels/" (c.id) "/edit" } aria-label={ "Edit " (title) } { "Edit" }
                                        @if c.kind() != ChannelKind::Email {
                                            form.inline method="post" action={ (base) "/channels/" (c.id) "/test" } {
                                                input type="hidden" name="csrf" value=(csrf);
                                                button type="submit" aria-label={ "Send a test to " (title) } { "Send test" }
                                            }
                                        }
                                        form.inline method="post" action={ (base) "/channels/" (c.id) "/delete" } {
                                            input type="hidden" name="csrf" value=(csrf);
                                            button.danger type="submit" aria-label={ "Remove " (title) } { "Remove" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Add a channel" }
        (kind_chooser(base, None))
    };
    layout(frame, Nav::Channels, "Channels", body)
}

/// A GET form choosing the kind of a new channel (`/channels/new?kind=…`).
fn kind_chooser(base: &str, chosen: Option<ChannelKind>) -> Markup {
    html! {
        form.row method="get" action={ (base) "/channels/new" } {
            label for="kind" { "Kind" }
            select #kind name="kind" {
                @for k in addable_kinds() {
                    option value=(k.as_str()) selected[chosen == Some(k)] { (k.as_str()) }
                }
            }
            button type="submit" { "Choose kind" }
        }
    }
}

fn choose_kind_markup(frame: &Frame, errors: Option<&Validations>) -> Markup {
    let body = html! {
        h1 { "Add a channel" }
        (problems(errors))
        (kind_chooser(frame.base, None))
        p { a href={ (frame.base) "/channels" } { "Back to the channels" } }
    };
    layout(frame, Nav::Channels, "Add a channel", body)
}

/// What a setting's label says besides its name.
fn setting_hint(spec: &SettingSpec, editing: bool) -> String {
    let mut hint = if spec.required {
        "required".to_owned()
    } else {
        match spec.default {
            Some(d) => format!("optional; default {d}"),
            None => "optional".to_owned(),
        }
    };
    match spec.value {
        SettingValue::Url => hint.push_str("; a URL"),
        SettingValue::Choice(words) => {
            hint.push_str("; one of ");
            hint.push_str(&words.join(", "));
        }
        SettingValue::Emails => hint.push_str("; e-mail addresses, comma-separated"),
        _ => {}
    }
    if spec.secret && editing {
        hint.push_str("; secret: leave empty to keep");
    } else if spec.secret {
        hint.push_str("; secret");
    }
    hint
}

/// The add form (`current` `None`) or the edit form of a channel.
fn form_markup(
    frame: &Frame,
    current: Option<&ChannelConfig>,
    form: &ChannelForm,
    errors: Option<&Validations>,
) -> Markup {
    let base = frame.base;
    let csrf = frame.signed_in.as_ref().map_or("", |s| s.csrf);
    let kind = form.kind.as_str();
    let (title, action) = match current {
        None => (format!("Add a {kind} channel"), format!("{base}/channels")),
        Some(c) => (
            format!("Edit the {kind} channel"),
            format!("{base}/channels/{}/edit", c.id),
        ),
    };
    let p = |a: &str| problem_for(errors, a);
    let described = |a: &str| p(a).map(|_| format!("{a}-problem"));
    let body = html! {
        h1 { (title) }
        @if current.is_none() {
            (kind_chooser(base, Some(form.kind)))
        }
        (problems(errors))
        form.stack method="post" action=(action) {
            input type="hidden" name="csrf" value=(csrf);
            @if current.is_none() {
                input type="hidden" name="kind" value=(kind);
            }
            (field_problem("kind", p("kind")))
            label for="name" { "Name (optional)" }
            input #name type="text" name="name" value=(form.name) maxlength="100"
                aria-invalid=[p("name").map(|_| "true")] aria-describedby=[described("name")];
            (field_problem("name", p("name")))
            @for (spec, value) in &form.settings {
                @let id = setting_field(spec.name);
                @let problem = p(spec.name);
                label for=(id) { (spec.name) " (" (setting_hint(spec, current.is_some())) ")" }
                @if spec.secret {
                    input id=(id) type="password" name=(id) autocomplete="off"
                        required[spec.required && current.is_none()]
                        aria-invalid=[problem.map(|_| "true")]
                        aria-describedby=[problem.map(|_| format!("{}-problem", spec.name))];
                } @else {
                    input id=(id) type="text" name=(id) value=(value)
                        required[spec.required && current.is_none()]
                        aria-invalid=[problem.map(|_| "true")]
                        aria-describedby=[problem.map(|_| format!("{}-problem", spec.name))];
                }
                (field_problem(spec.name, problem))
            }
            fieldset {
                legend { "Events" }
                @for e in EVENTS {
                    label.choice {
                        input type="checkbox" name={ "event_" (e) } value="on" checked[form.events.iter().any(|x| x == e)];
                        " " (e)
                    }
                }
            }
            (field_problem("events", p("events")))
            label for="tags" { "Tags (comma-separated; empty: every snitch)" }
            input #tags type="text" name="tags" value=(form.tags) aria-describedby=[described("tags")];
            (field_problem("tags", p("tags")))
            div.row {
                button type="submit" { @if current.is_some() { "Save" } @else { "Add channel" } }
                a href={ (base) "/channels" } { "Cancel" }
            }
        }
    };
    layout(frame, Nav::Channels, &title, body)
}
