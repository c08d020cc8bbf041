//! The dashboard's HTML, written with maud: every value put into a page is escaped, so
//! text a user or a job wrote (names, tags, notes, check-in messages, exit statuses, hook
//! URLs) is data, never markup. Nothing here is marked `PreEscaped` except the doctype.

use maud::{html, Markup, DOCTYPE};
use snitch_core::{
    Cadence, CheckIn, CheckInKind, Delivery, Event, EventKind, Interval, Outcome, PauseUntil,
    Snitch, Status, Timestamp, Validations, Webhook,
};

use super::timeline::Cell;
use crate::wire::{format_time, password_masked};

/// What every page needs: where the dashboard lives and, once signed in, the case and the
/// CSRF token of its forms.
pub(crate) struct Frame<'a> {
    pub base: &'a str,
    pub signed_in: Option<SignedInView<'a>>,
}

pub(crate) struct SignedInView<'a> {
    pub case: &'a str,
    pub csrf: &'a str,
}

/// Which item of the navigation is the current page.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Snitches,
    Webhooks,
    Channels,
    Badges,
    None,
}

pub(crate) fn layout(frame: &Frame, nav: Nav, title: &str, body: Markup) -> Markup {
    let base = frame.base;
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                title { (title) " · Snitch" }
                link rel="icon" href={ (base) "/assets/icon.svg" } type="image/svg+xml";
                link rel="stylesheet" href={ (base) "/assets/app.css" };
                script src={ (base) "/assets/app.js" } defer {}
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href={ (base) "/" } { "Snitch" }
                    @if let Some(user) = &frame.signed_in {
                        nav aria-label="Main" {
                            a href={ (base) "/" } aria-current=[(nav == Nav::Snitches).then_some("page")] { "Snitches" }
                            a href={ (base) "/webhooks" } aria-current=[(nav == Nav::Webhooks).then_some("page")] { "Webhooks" }
                            a href={ (base) "/channels" } aria-current=[(nav == Nav::Channels).then_some("page")] { "Channels" }
                            a href={ (base) "/badges" } aria-current=[(nav == Nav::Badges).then_some("page")] { "Badges" }
                        }
                        span.case { "Case " strong { (user.case) } }
                        form.inline method="post" action={ (base) "/logout" } {
                            input type="hidden" name="csrf" value=(user.csrf);
                            button.link type="submit" { "Sign out" }
                        }
                    }
                }
                main #main tabindex="-1" {
                    (body)
                }
            }
        }
    }
}

/// A notice after an action (`?done=…`); only fixed words, never the query's text.
pub(crate) fn notice(done: Option<&str>) -> Markup {
    let text = match done {
        Some("created") => "Snitch created.",
        Some("updated") => "Snitch saved.",
        Some("paused") => "Snitch paused.",
        Some("unpaused") => "Snitch unpaused.",
        Some("deleted") => "Snitch deleted.",
        Some("hook-added") => "Webhook added.",
        Some("hook-removed") => "Webhook removed.",
        Some("channel-added") => "Channel added.",
        Some("channel-updated") => "Channel saved.",
        Some("channel-removed") => "Channel removed.",
        Some("badge-key-rotated") => {
            "Badge key rotated: the old badge URLs stopped working; use the ones below."
        }
        Some("signed-out") => "You are signed out.",
        _ => return html! {},
    };
    html! { p.notice role="status" { (text) } }
}

/// Problems of a form, each naming its field.
pub(crate) fn problems(problems: Option<&Validations>) -> Markup {
    html! {
        @if let Some(v) = problems {
            div.problems role="alert" {
                p { strong { "Please correct:" } }
                ul {
                    @for p in v.iter() {
                        li { (field_label(&p.attribute)) " " (p.message) }
                    }
                }
            }
        }
    }
}

fn field_label(attribute: &str) -> &str {
    match attribute {
        "name" => "Name",
        "interval" => "Interval",
        "alert_type" => "Alert type",
        "alert_email" => "Alert e-mails",
        "notes" => "Notes",
        "tags" => "Tags",
        "until" => "Pause until",
        "schedule" => "Schedule",
        "timezone" => "Time zone",
        "grace_seconds" => "Grace",
        "early_seconds" => "Early",
        "max_runtime_seconds" => "Longest run",
        "failure_tolerance" => "Failed runs tolerated",
        "missed_tolerance" => "Missed runs tolerated",
        "status" => "Status",
        "url" => "URL",
        "secret" => "Secret",
        "kind" => "Kind",
        "events" => "Events",
        "email_keywords" => "E-mail keywords",
        other => other,
    }
}

pub(crate) fn problem_for<'a>(
    problems: Option<&'a Validations>,
    attribute: &str,
) -> Option<&'a str> {
    problems?
        .iter()
        .find(|p| p.attribute == attribute)
        .map(|p| p.message.as_str())
}

/// `2026-11-23 03:50 UTC`, the text shown before (and without) the browser's own zone.
fn utc_text(t: Timestamp) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// An instant: UTC in the page, shown in the viewer's zone by app.js, UTC on hover.
pub(crate) fn time(t: Timestamp) -> Markup {
    html! {
        time datetime=(format_time(t)) title=(utc_text(t)) data-local="" { (utc_text(t)) }
    }
}

/// `in 3 h 20 min` or `4 min ago`, counted down live by app.js.
pub(crate) fn countdown(t: Timestamp, now: Timestamp) -> Markup {
    html! {
        time datetime=(format_time(t)) title=(utc_text(t)) data-countdown="" { (relative(t - now)) }
    }
}

/// A span in words: `2 d 3 h`, `3 h 20 min`, `4 min 10 s`, `12 s`, from now.
pub(crate) fn relative(d: chrono::Duration) -> String {
    let secs = d.num_seconds();
    let n = secs.unsigned_abs();
    let (days, hours, mins, s) = (n / 86_400, n / 3600 % 24, n / 60 % 60, n % 60);
    let span = if days > 0 {
        format!("{days} d {hours} h")
    } else if hours > 0 {
        format!("{hours} h {mins} min")
    } else if mins > 0 {
        format!("{mins} min {s} s")
    } else {
        format!("{s} s")
    };
    if secs >= 0 {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

pub(crate) fn interval_label(i: Interval) -> String {
    let raw = i.as_str();
    match raw {
        "1_minute" => "every minute".into(),
        "hourly" | "daily" | "weekly" | "monthly" => raw.into(),
        _ => match raw.split_once('_') {
            Some((n, unit)) => format!("every {n} {unit}s"),
            None => raw.into(),
        },
    }
}

/// How often a snitch is expected, in words: its interval, or its schedule ("every day
/// at 02:30" when it reads simply, else the expression) and time zone.
pub(crate) fn cadence_label(cadence: &Cadence) -> String {
    match cadence {
        Cadence::Interval(interval) => interval_label(*interval),
        Cadence::Cron(runs) => {
            let schedule = runs.schedule();
            let words = schedule
                .describe()
                .unwrap_or_else(|| format!("cron {}", schedule.expression()));
            format!("{words} ({})", schedule.timezone())
        }
    }
}

fn status_badge(status: Status) -> Markup {
    html! { span class={ "badge status-" (status.as_str()) } { (status.as_str()) } }
}

pub(crate) fn login(
    frame: &Frame,
    csrf: &str,
    message: Option<&str>,
    done: Option<&str>,
) -> Markup {
    let body = html! {
        section.narrow {
            h1 { "Sign in" }
            (notice(done))
            p { "Sign in with an API key of your case (the admin command " code { "keys create" } " makes one)." }
            @if let Some(m) = message {
                p.problems role="alert" { (m) }
            }
            form method="post" action={ (frame.base) "/login" } {
                input type="hidden" name="csrf" value=(csrf);
                label for="key" { "API key" }
                input #key type="password" name="key" autocomplete="current-password" required autofocus;
                button type="submit" { "Sign in" }
            }
        }
    };
    layout(frame, Nav::None, "Sign in", body)
}

pub(crate) fn error(frame: &Frame, title: &str, message: &str) -> Markup {
    let body = html! {
        h1 { (title) }
        p { (message) }
        p { a href={ (frame.base) "/" } { "Back to the snitches" } }
    };
    layout(frame, Nav::None, title, body)
}

pub(crate) struct ListView<'a> {
    pub snitches: &'a [Snitch],
    pub filter: &'a str,
    pub filter_problem: Option<&'a str>,
    pub now: Timestamp,
    pub done: Option<&'a str>,
}

fn tag_link(base: &str, tag: &str) -> String {
    let encoded: String = form_urlencoded::byte_serialize(tag.as_bytes()).collect();
    format!("{base}/?tags={encoded}")
}

pub(crate) fn list(frame: &Frame, view: &ListView) -> Markup {
    let base = frame.base;
    let count = |s: Status| view.snitches.iter().filter(|x| x.status() == s).count();
    let body = html! {
        div.title-row {
            h1 { "Snitches" }
            a.button href={ (base) "/snitches/new" } { "New snitch" }
        }
        (notice(view.done))
        p.summary {
            @for s in [Status::Healthy, Status::Failed, Status::Errored, Status::Paused, Status::Pending] {
                span { (status_badge(s)) " " (count(s)) }
            }
        }
        form.filter method="get" action={ (base) "/" } role="search" {
            label for="tags" { "Filter by tags (comma-separated, all must match)" }
            div.row {
                input #tags type="text" name="tags" value=(view.filter)
                    aria-describedby=[view.filter_problem.map(|_| "tags-problem")];
                button type="submit" { "Filter" }
                @if !view.filter.is_empty() { a href={ (base) "/" } { "Clear" } }
            }
            @if let Some(p) = view.filter_problem {
                p #tags-problem .problems role="alert" { "Tags " (p) }
            }
        }
        @if view.snitches.is_empty() {
            p { @if view.filter.is_empty() { "No snitches yet." } @else { "No snitch has all these tags." } }
        } @else {
            div.scroll {
                table.snitches {
                    caption.visually-hidden { "Snitches of the case" }
                    thead { tr {
                        th scope="col" { "Status" }
                        th scope="col" { "Name" }
                        th scope="col" { "Tags" }
                        th scope="col" { "Interval" }
                        th scope="col" { "Last check-in" }
                        th scope="col" { "Deadline" }
                    } }
                    tbody {
                        @for s in view.snitches {
                            tr {
                                td data-label="Status" { (status_badge(s.status())) }
                                td data-label="Name" { a href={ (base) "/snitches/" (s.token().as_str()) } { (s.name().as_str()) } }
                                td data-label="Tags" {
                                    @for t in s.tags().iter() {
                                        a.tag href=(tag_link(base, t.as_str())) { (t.as_str()) } " "
                                    }
                                }
                                td data-label="Interval" { (cadence_label(s.cadence())) }
                                td data-label="Last check-in" {
                                    @match s.state().last_check_in_at() { Some(t) => (time(t)), None => "never" }
                                }
                                td data-label="Deadline" {
                                    @match s.state().deadline_at() {
                                        Some(t) => (countdown(t, view.now)),
                                        None => @if s.status() == Status::Paused { "paused" } @else { "after the first check-in" },
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    layout(frame, Nav::Snitches, "Snitches", body)
}

/// The values of the create and edit form, as typed.
#[derive(Debug, Default, Clone)]
pub(crate) struct SnitchForm {
    pub name: String,
    pub interval: String,
    /// A cron expression; when given, it replaces the interval.
    pub schedule: String,
    pub timezone: String,
    /// Number fields, as typed (empty: not given).
    pub grace_seconds: String,
    pub max_runtime_seconds: String,
    pub failure_tolerance: String,
    pub missed_tolerance: String,
    pub alert_type: String,
    pub alert_email: String,
    pub notes: String,
    pub tags: String,
    /// E-mail keywords, comma-separated, and where to look for them.
    pub failure_keywords: String,
    pub success_keywords: String,
    pub start_keywords: String,
    pub keyword_search: String,
}

/// The e-mail keywords of a list, comma-separated, as the form shows them.
fn keyword_text(keywords: &[String]) -> String {
    keywords.join(", ")
}

/// Where e-mail keywords may be looked for, with its words in the form.
const KEYWORD_SEARCHES: [(&str, &str); 3] = [
    ("both", "in the subject and the body"),
    ("subject", "in the subject only"),
    ("body", "in the body only"),
];

impl SnitchForm {
    pub(crate) fn of(s: &Snitch) -> Self {
        SnitchForm {
            name: s.name().as_str().to_owned(),
            interval: s
                .interval()
                .map(|i| i.as_str().to_owned())
                .unwrap_or_default(),
            schedule: s
                .cadence()
                .expected_runs()
                .map(|r| r.schedule().expression().to_owned())
                .unwrap_or_default(),
            timezone: s
                .cadence()
                .expected_runs()
                .map(|r| r.schedule().timezone().to_owned())
                .unwrap_or_default(),
            grace_seconds: s
                .cadence()
                .expected_runs()
                .map(|r| r.grace().num_seconds().to_string())
                .unwrap_or_default(),
            max_runtime_seconds: s
                .max_runtime_seconds()
                .map(|n| n.to_string())
                .unwrap_or_default(),
            failure_tolerance: s.failure_tolerance().to_string(),
            missed_tolerance: s.missed_tolerance().to_string(),
            alert_type: s.alert_type().as_str().to_owned(),
            alert_email: s
                .alert_email()
                .iter()
                .map(|e| e.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            notes: s.notes().as_str().to_owned(),
            tags: s
                .tags()
                .iter()
                .map(|t| t.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            failure_keywords: keyword_text(s.email_keywords().failure()),
            success_keywords: keyword_text(s.email_keywords().success()),
            start_keywords: keyword_text(s.email_keywords().start()),
            keyword_search: s.email_keywords().scope().name().to_owned(),
        }
    }
}

pub(crate) fn field_problem(id: &str, problem: Option<&str>) -> Markup {
    html! {
        @if let Some(p) = problem {
            p.field-problem id={ (id) "-problem" } { (p) }
        }
    }
}

/// The create form (`token` `None`) or the edit form of a snitch.
pub(crate) fn snitch_form(
    frame: &Frame,
    token: Option<&str>,
    form: &SnitchForm,
    errors: Option<&Validations>,
) -> Markup {
    let base = frame.base;
    let csrf = frame.signed_in.as_ref().map_or("", |s| s.csrf);
    let (title, action) = match token {
        None => ("New snitch".to_owned(), format!("{base}/snitches")),
        Some(t) => (
            "Edit snitch".to_owned(),
            format!("{base}/snitches/{t}/edit"),
        ),
    };
    let p = |a: &str| problem_for(errors, a);
    let described = |a: &str| p(a).map(|_| format!("{a}-problem"));
    let alert_type = if form.alert_type.is_empty() {
        "basic"
    } else {
        form.alert_type.as_str()
    };
    let body = html! {
        h1 { (title) }
        (problems(errors))
        form.stack method="post" action=(action) {
            input type="hidden" name="csrf" value=(csrf);
            label for="name" { "Name" }
            input #name type="text" name="name" value=(form.name) required maxlength="255"
                aria-invalid=[p("name").map(|_| "true")] aria-describedby=[described("name")];
            (field_problem("name", p("name")))
            label for="interval" { "Interval" }
            select #interval name="interval" aria-describedby=[described("interval")] {
                @for i in Interval::ALL {
                    option value=(i.as_str()) selected[form.interval == i.as_str() || (form.interval.is_empty() && i == Interval::Daily)] {
                        (interval_label(i))
                    }
                }
            }
            (field_problem("interval", p("interval")))
            label for="schedule" { "Or a cron schedule in its place (such as 30 2 * * *)" }
            input #schedule type="text" name="schedule" value=(form.schedule) maxlength="100"
                aria-invalid=[p("schedule").map(|_| "true")] aria-describedby=[described("schedule")];
            (field_problem("schedule", p("schedule")))
            label for="timezone" { "The schedule's time zone (IANA, such as Europe/Riga; empty: UTC)" }
            datalist #timezones {
                @for zone in snitch_core::schedule::timezone_names() { option value=(zone) {} }
            }
            input #timezone type="text" name="timezone" list="timezones" autocomplete="off" value=(form.timezone) maxlength="64"
                aria-invalid=[p("timezone").map(|_| "true")] aria-describedby=[described("timezone")];
            (field_problem("timezone", p("timezone")))
            div #schedule-preview.hint aria-live="polite" data-preview={ (base) "/schedules/preview" } {}
            @for (id, label, value) in [
                ("grace_seconds", "Grace after each scheduled run, in seconds (60 or more; empty: an hour or the shortest gap)", &form.grace_seconds),
                ("max_runtime_seconds", "Longest run, in seconds, before a started run times out (empty: the grace, or one period)", &form.max_runtime_seconds),
                ("failure_tolerance", "Failed runs in a row tolerated before an alert (0 to 720)", &form.failure_tolerance),
                ("missed_tolerance", "Missed runs in a row tolerated before an alert (0 to 720)", &form.missed_tolerance),
            ] {
                label for=(id) { (label) }
                input id=(id) type="text" inputmode="numeric" name=(id) value=(value) maxlength="12"
                    aria-invalid=[p(id).map(|_| "true")] aria-describedby=[described(id)];
                (field_problem(id, p(id)))
            }
            fieldset {
                legend { "Alert type" }
                label.choice { input type="radio" name="alert_type" value="basic" checked[alert_type == "basic"]; " basic: due at the end of the next period" }
                label.choice { input type="radio" name="alert_type" value="smart" checked[alert_type == "smart"]; " smart: learns when the job runs (hourly or longer)" }
            }
            (field_problem("alert_type", p("alert_type")))
            label for="tags" { "Tags (comma-separated)" }
            input #tags type="text" name="tags" value=(form.tags) aria-describedby=[described("tags")];
            (field_problem("tags", p("tags")))
            label for="alert_email" { "Alert e-mails (comma-separated; empty: the case's team)" }
            input #alert_email type="text" name="alert_email" value=(form.alert_email) aria-describedby=[described("alert_email")];
            (field_problem("alert_email", p("alert_email")))
            label for="notes" { "Notes" }
            textarea #notes name="notes" rows="4" aria-describedby=[described("notes")] { (form.notes) }
            (field_problem("notes", p("notes")))
            fieldset.keywords {
                legend { "E-mail keywords (comma-separated; all empty: every check-in e-mail is a success)" }
                @for (id, label, value) in [
                    ("failure_keywords", "Failure keywords", &form.failure_keywords),
                    ("success_keywords", "Success keywords", &form.success_keywords),
                    ("start_keywords", "Start keywords", &form.start_keywords),
                ] {
                    label for=(id) { (label) }
                    input id=(id) type="text" name=(id) value=(value)
                        aria-invalid=[p("email_keywords").map(|_| "true")] aria-describedby=[described("email_keywords")];
                }
                label for="keyword_search" { "Look for them" }
                select #keyword_search name="keyword_search" aria-describedby=[described("email_keywords")] {
                    @for (value, words) in KEYWORD_SEARCHES {
                        option value=(value) selected[form.keyword_search == value || (form.keyword_search.is_empty() && value == "both")] { (words) }
                    }
                }
            }
            (field_problem("email_keywords", p("email_keywords")))
            div.row {
                button type="submit" { @if token.is_some() { "Save" } @else { "Create snitch" } }
                @match token {
                    Some(t) => a href={ (base) "/snitches/" (t) } { "Cancel" },
                    None => a href={ (base) "/" } { "Cancel" },
                }
            }
        }
    };
    layout(frame, Nav::Snitches, &title, body)
}

/// A snitch's e-mail keywords in words, for its page.
fn email_keywords_text(keywords: &snitch_core::EmailKeywords) -> Markup {
    if keywords.is_empty() {
        return html! { "none: every check-in e-mail is a success" };
    }
    let lists = [
        ("failure", keywords.failure()),
        ("success", keywords.success()),
        ("start", keywords.start()),
    ];
    let searched = KEYWORD_SEARCHES
        .iter()
        .find(|(name, _)| *name == keywords.scope().name())
        .map_or("", |(_, words)| words);
    html! {
        ul.keywords {
            @for (which, words) in lists {
                @if !words.is_empty() {
                    li { (which) ": "
                        @for (n, w) in words.iter().enumerate() {
                            @if n > 0 { ", " }
                            code { (w) }
                        }
                    }
                }
            }
        }
        "looked for " (searched)
    }
}

/// How many of a schedule's next runs a snitch's page lists.
const NEXT_RUNS_SHOWN: usize = 5;

pub(crate) struct SnitchView<'a> {
    pub snitch: &'a Snitch,
    pub check_in_url: &'a str,
    /// The check-in e-mail address, on a server that receives check-in e-mails.
    pub check_in_email: Option<&'a str>,
    pub check_ins: &'a [CheckIn],
    pub events: &'a [(Event, Vec<Delivery>)],
    pub timeline: &'a [Cell],
    pub now: Timestamp,
    pub done: Option<&'a str>,
    pub pause_problems: Option<&'a Validations>,
}

fn pause_text(until: PauseUntil) -> Markup {
    match until {
        PauseUntil::Healthy => html! { "until its next healthy check-in" },
        PauseUntil::Unpaused => html! { "until unpaused by hand" },
        PauseUntil::At(t) => html! { "until " (time(t)) },
    }
}

pub(crate) fn snitch(frame: &Frame, view: &SnitchView) -> Markup {
    let base = frame.base;
    let csrf = frame.signed_in.as_ref().map_or("", |s| s.csrf);
    let s = view.snitch;
    let token = s.token().as_str();
    let here = format!("{base}/snitches/{token}");
    let body = html! {
        p.crumbs { a href={ (base) "/" } { "Snitches" } " / " }
        div.title-row {
            h1 { (s.name().as_str()) }
            (status_badge(s.status()))
        }
        (notice(view.done))
        dl.facts {
            dt { "Status" } dd { (status_badge(s.status()))
                @if let Some(p) = &s.state().pause() { " " (pause_text(p.until)) } }
            dt { "Interval" } dd { (cadence_label(s.cadence())) ", " (s.alert_type().as_str()) " alerts" }
            @if let Some(runs) = s.cadence().expected_runs() {
                dt { "Next runs" } dd {
                    ul.runs {
                        @for t in runs.schedule().times_after(view.now).take(NEXT_RUNS_SHOWN) {
                            // The schedule's own zone beside the viewer's (app.js) and UTC.
                            li { (time(t)) " (" (runs.schedule().to_local_iso(t)) " in " (runs.schedule().timezone()) ")" }
                        }
                    }
                }
                dt { "Window" } dd {
                    "a check-in counts from up to " (runs.early().num_seconds())
                    " s before a run (never past halfway to the one before) until "
                    (runs.grace().num_seconds()) " s after it"
                }
            }
            dt { "Last check-in" } dd { @match s.state().last_check_in_at() { Some(t) => (time(t)), None => "never" } }
            dt { "Last healthy check-in" } dd { @match s.state().checked_in_at() { Some(t) => (time(t)), None => "never" } }
            dt { "Deadline" } dd { @match s.state().deadline_at() {
                Some(t) => { (countdown(t, view.now)) " (" (time(t)) ")" },
                None => "none while pending or paused",
            } }
            dt { "Tags" } dd {
                @if s.tags().is_empty() { "none" }
                @for t in s.tags().iter() { a.tag href=(tag_link(base, t.as_str())) { (t.as_str()) } " " }
            }
            dt { "Alert e-mails" } dd {
                @if s.alert_email().is_empty() { "the case's team" }
                @else { (s.alert_email().iter().map(|e| e.as_str()).collect::<Vec<_>>().join(", ")) }
            }
            dt { "E-mail keywords" } dd { (email_keywords_text(s.email_keywords())) }
            dt { "Created" } dd { (time(s.created_at())) }
        }
        @if !s.notes().as_str().is_empty() {
            h2 { "Notes" }
            p.notes { (s.notes().as_str()) }
        }
        h2 { "Check-in URL" }
        div.row.copy {
            label.visually-hidden for="check-in-url" { "Check-in URL" }
            input #check-in-url type="text" readonly value=(view.check_in_url);
            button type="button" data-copy="check-in-url" { "Copy" }
            span.copied role="status" aria-live="polite" {}
        }
        p.hint { "Jobs check in with " code { "curl -fsS " (view.check_in_url) "?m=done" } "; " code { "s=1" } " reports an error." }
        @if let Some(address) = view.check_in_email {
            h2 { "Check-in e-mail" }
            div.row.copy {
                label.visually-hidden for="check-in-email" { "Check-in e-mail address" }
                input #check-in-email type="text" readonly value=(address);
                button type="button" data-copy="check-in-email" { "Copy" }
                span.copied role="status" aria-live="polite" {}
            }
            p.hint { "An e-mail to this address is a check-in: its subject the message, its body the output, the e-mail keywords its outcome." }
        }
        h2 { "Actions" }
        div.actions {
            a.button href={ (here) "/edit" } { "Edit" }
            @if s.status() == Status::Paused {
                form.inline method="post" action={ (here) "/unpause" } {
                    input type="hidden" name="csrf" value=(csrf);
                    button type="submit" { "Unpause" }
                }
            }
            a.button.danger href={ (here) "/delete" } { "Delete…" }
        }
        (problems(view.pause_problems))
        @if s.status() == Status::Pending {
            p.hint { "A snitch can be paused once it has checked in." }
        } @else {
            form.stack.pause method="post" action={ (here) "/pause" } {
                input type="hidden" name="csrf" value=(csrf);
                fieldset {
                    legend { @if s.status() == Status::Paused { "Change the pause" } @else { "Pause" } }
                    label.choice { input type="radio" name="until" value="healthy" checked; " until its next healthy check-in" }
                    label.choice { input type="radio" name="until" value="unpaused"; " until I unpause it" }
                    label.choice { input type="radio" name="until" value="at"; " until a time: " }
                    label for="until_at" { "Pause until (your time zone; UTC when scripts are off)" }
                    input #until_at type="datetime-local" name="until_at";
                    input type="hidden" name="until_utc" value="";
                }
                button type="submit" { "Pause" }
            }
        }
        h2 #timeline-heading { "Last " (view.timeline.len()) " periods" }
        ol.timeline aria-labelledby="timeline-heading" {
            @for c in view.timeline {
                li class={ "cell " (c.mark.class()) }
                    title={ (utc_text(c.start)) " – " (utc_text(c.end)) ": " (c.mark.word()) " (" (c.reason) ")" } {
                    span aria-hidden="true" { (c.mark.glyph()) }
                    span.visually-hidden { (utc_text(c.start)) ": " (c.mark.word()) ", " (c.reason) }
                }
            }
        }
        p.legend {
            span.cell.ok aria-hidden="true" { "✓" } " ok " span.cell.error aria-hidden="true" { "!" } " error only "
            span.cell.missed aria-hidden="true" { "✗" } " missed " span.cell.none aria-hidden="true" { "·" } " no data"
        }
        (runs_section(view))
        h2 { "Check-ins" }
        @if view.check_ins.is_empty() {
            p { "No check-ins yet." }
        } @else {
            div.scroll {
                table {
                    thead { tr { th scope="col" { "Time" } th scope="col" { "Outcome" } th scope="col" { "Run" } th scope="col" { "Message" } } }
                    tbody {
                        @for c in view.check_ins {
                            tr {
                                td { (time(c.at)) }
                                td { @match (c.kind, &c.outcome) {
                                    (CheckInKind::Start, _) => span.badge { "started" },
                                    (CheckInKind::Log, _) => span.badge { "log" },
                                    (_, Outcome::Success) => span.badge.status-healthy { "ok" },
                                    (_, Outcome::Error { exit_status }) => { span.badge.status-errored { "error" } " exit status " code { (exit_status) } },
                                } }
                                td {
                                    @if let Some(id) = &c.run_id { code { (id.as_str()) } " " }
                                    @if let Some(ms) = c.duration_ms { (duration_text(ms)) " " }
                                    @if c.body.is_some() && c.number > 0 {
                                        a href={ (here) "/check_ins/" (c.number) "/body" } { "output" }
                                    }
                                }
                                td.message { @match &c.message { Some(m) => (m.as_str()), None => span.muted { "none" } } }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Events and alerts" }
        @if view.events.is_empty() {
            p { "No events yet." }
        } @else {
            ul.events {
                @for (e, deliveries) in view.events {
                    li {
                        p {
                            strong { (e.kind.as_str()) } " at " (time(e.at)) ": "
                            (e.previous_status.webhook_name()) " → " (e.status.webhook_name())
                            @if e.kind == EventKind::Missing { ", " (e.missed_periods.max(1)) " missed period(s)" }
                        }
                        @if deliveries.is_empty() {
                            p.muted { "No deliveries (no webhooks and no e-mail for this event)." }
                        }
                        ul {
                            @for d in deliveries { li { (delivery(d)) } }
                        }
                    }
                }
            }
        }
    };
    layout(frame, Nav::Snitches, s.name().as_str(), body)
}

/// How many runs the chart of a snitch's page shows.
const RUNS_CHARTED: usize = 100;

/// A run on the chart: when it ended (or timed out), how long it took, how it went.
struct ChartedRun {
    at: Timestamp,
    duration_ms: u64,
    class: &'static str,
    word: &'static str,
}

/// The runs the history and the events tell of, oldest first, the newest
/// [`RUNS_CHARTED`]: ends with a duration, and runs that timed out.
fn charted_runs(view: &SnitchView) -> Vec<ChartedRun> {
    let mut runs: Vec<ChartedRun> = view
        .check_ins
        .iter()
        .filter(|c| c.kind == CheckInKind::End)
        .filter_map(|c| {
            let (class, word) = if c.outcome.is_success() {
                ("run-ok", "ok")
            } else {
                ("run-failed", "failed")
            };
            c.duration_ms.map(|duration_ms| ChartedRun {
                at: c.at,
                duration_ms,
                class,
                word,
            })
        })
        .chain(view.events.iter().filter_map(|(e, _)| {
            let run = e.run.as_ref().filter(|r| r.timed_out)?;
            Some(ChartedRun {
                at: e.at,
                duration_ms: run.duration_ms.unwrap_or(0),
                class: "run-timeout",
                word: "timed out",
            })
        }))
        .collect();
    runs.sort_by_key(|r| r.at);
    let skip = runs.len().saturating_sub(RUNS_CHARTED);
    runs.split_off(skip)
}

/// A duration in words: `850 ms`, `4.2 s`, `12 min 5 s`, `3 h 20 min`.
fn duration_text(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms} ms"),
        1..=59 => format!("{}.{} s", s, (ms % 1000) / 100),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s / 60) % 60),
    }
}

/// The snitch's runs: whether one is open, the last one, and the durations of the recent
/// ones as a bar chart (failed and timed-out runs marked).
fn runs_section(view: &SnitchView) -> Markup {
    let s = view.snitch;
    let runs = charted_runs(view);
    let state = s.state();
    if runs.is_empty() && state.last_run().is_none() && !state.running() {
        return html! {};
    }
    let longest = runs.iter().map(|r| r.duration_ms).max().unwrap_or(0).max(1);
    const BAR: usize = 6;
    const HEIGHT: u64 = 60;
    let width = (runs.len() * BAR).max(BAR);
    html! {
        h2 #runs-heading { "Runs" }
        @if let Some(open) = state.open_runs().last() {
            p { "Running since " (time(open.started_at)) "; times out " (countdown(open.timeout_at, view.now)) "." }
        }
        @if let Some(run) = state.last_run() {
            p {
                "Last run"
                @if let Some(started) = run.started_at { " started " (time(started)) }
                @if run.timed_out { " and timed out" } @else if let Some(end) = run.finished_at { " and ended " (time(end)) }
                @if let Some(ms) = run.duration_ms { " after " (duration_text(ms)) }
                @if let Some(code) = &run.exit_status { ", exit status " code { (code) } }
                "."
            }
        }
        @if !runs.is_empty() {
            svg.runs-chart role="img" viewBox={ "0 0 " (width) " " (HEIGHT) } preserveAspectRatio="none"
                aria-label={ "Durations of the last " (runs.len()) " runs; the longest took " (duration_text(longest)) } {
                @for (n, r) in runs.iter().enumerate() {
                    @let h = (r.duration_ms * HEIGHT / longest).max(1);
                    rect class=(r.class) x=(n * BAR) y=(HEIGHT - h) width=(BAR - 1) height=(h) {
                        title { (utc_text(r.at)) ": " (r.word) ", " (duration_text(r.duration_ms)) }
                    }
                }
            }
            p.legend {
                span.swatch.run-ok aria-hidden="true" {} " ok "
                span.swatch.run-failed aria-hidden="true" {} " failed "
                span.swatch.run-timeout aria-hidden="true" {} " timed out · longest " (duration_text(longest))
            }
        }
    }
}

fn delivery(d: &Delivery) -> Markup {
    let target = crate::wire::delivery_target(&d.channel);
    html! {
        (d.channel.kind()) " to " code { (target) } ": "
        strong { (d.state.as_str()) }
        @if let Some(t) = d.next_attempt_at { ", next try " (time(t)) }
        @if !d.attempts.is_empty() {
            ol.attempts {
                @for a in &d.attempts {
                    li {
                        (time(a.at)) " "
                        @if a.ok { span.badge.status-healthy { "ok" } } @else { span.badge.status-failed { "failed" } }
                        " " (a.detail) " (" (a.duration_ms) " ms)"
                    }
                }
            }
        }
    }
}

pub(crate) fn confirm_delete(frame: &Frame, s: &Snitch) -> Markup {
    let base = frame.base;
    let csrf = frame.signed_in.as_ref().map_or("", |s| s.csrf);
    let here = format!("{base}/snitches/{}", s.token().as_str());
    let body = html! {
        h1 { "Delete " (s.name().as_str()) "?" }
        p { "The snitch, its check-ins and its events are removed for good; its check-in URL then answers 404." }
        form.row method="post" action={ (here) "/delete" } {
            input type="hidden" name="csrf" value=(csrf);
            button.danger type="submit" { "Delete for good" }
            a href=(here) { "Cancel" }
        }
    };
    layout(frame, Nav::Snitches, "Delete snitch", body)
}

pub(crate) fn webhooks(
    frame: &Frame,
    hooks: &[Webhook],
    done: Option<&str>,
    errors: Option<&Validations>,
    url: &str,
) -> Markup {
    let base = frame.base;
    let csrf = frame.signed_in.as_ref().map_or("", |s| s.csrf);
    let body = html! {
        h1 { "Webhooks" }
        (notice(done))
        p { "Every event of the case's snitches is POSTed to each hook (JSON), signed when the hook has a secret." }
        @if hooks.is_empty() {
            p { "No webhooks." }
        } @else {
            div.scroll {
                table {
                    thead { tr { th scope="col" { "URL" } th scope="col" { "Added" } th scope="col" { span.visually-hidden { "Actions" } } } }
                    tbody {
                        @for h in hooks {
                            tr {
                                td { code { (password_masked(h.url.as_str())) } }
                                td { (time(h.created_at)) }
                                td {
                                    form.inline method="post" action={ (base) "/webhooks/" (h.id) "/delete" } {
                                        input type="hidden" name="csrf" value=(csrf);
                                        button.danger type="submit" aria-label={ "Remove the hook " (password_masked(h.url.as_str())) } { "Remove" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Add a webhook" }
        (problems(errors))
        form.stack method="post" action={ (base) "/webhooks" } {
            input type="hidden" name="csrf" value=(csrf);
            label for="url" { "URL (http or https)" }
            input #url type="url" name="url" value=(url) required;
            label for="secret" { "Secret (optional; signs each request)" }
            input #secret type="password" name="secret" autocomplete="off";
            button type="submit" { "Add webhook" }
        }
    };
    layout(frame, Nav::Webhooks, "Webhooks", body)
}
