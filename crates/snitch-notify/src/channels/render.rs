//! What a channel says, and how each vendor's API is asked to say it
//! (docs/rules.md#channels). Pure: a [`Message`] in, a [`VendorRequest`] out, and a
//! vendor's answer read back into success or a [`NotifyError`].
//!
//! Everything a user or a job wrote (names, tags, notes, check-in messages, exit
//! statuses) is data: it is one line (notes quoted line by line), it goes into
//! plain-text fields where a vendor has them, and is escaped for the vendor's markup
//! where it has not, titles included; [`defuse`] puts a word joiner after `@`, a
//! scheme's `:` and a domain's dots so that no text a job wrote can mention `@channel`,
//! `@everyone` or a person, or become a link.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use snitch_core::runs::AlertReason;
use snitch_core::{ChannelKey, ChannelKind, ChannelSettings, Event, EventKind, NotifyError};

use crate::{one_line, LINE_BREAKS};

/// How the news is for the people reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tone {
    /// Missing: no check-in, or a run timed out.
    Down,
    /// A check-in reported an error.
    Errored,
    /// Back to healthy.
    Up,
    /// Paused: no alerts for now.
    Paused,
    /// A test notification.
    Test,
}

impl Tone {
    fn word(self) -> &'static str {
        match self {
            Tone::Down => "MISSING",
            Tone::Errored => "ERRORED",
            Tone::Up => "BACK",
            Tone::Paused => "PAUSED",
            Tone::Test => "TEST",
        }
    }

    /// An RGB colour: red, orange, green, grey, blue.
    fn colour(self) -> u32 {
        match self {
            Tone::Down => 0xE0_1E_5A,
            Tone::Errored => 0xF2_A3_3A,
            Tone::Up => 0x2E_B6_7D,
            Tone::Paused => 0x8D_8D_8D,
            Tone::Test => 0x36_C5_F0,
        }
    }

    /// Whether this opens an incident (PagerDuty trigger, Opsgenie create).
    fn opens_incident(self) -> bool {
        matches!(self, Tone::Down | Tone::Errored | Tone::Test)
    }
}

/// One notification, in words, before any vendor's markup.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// How the news is.
    pub tone: Tone,
    /// The snitch's name (or the channel's, for a test): user text.
    pub name: String,
    /// What happened, after the name: "is missing: no check-in since …". Our words, but
    /// may quote user text (an exit message).
    pub summary: String,
    /// Details as (label, value) pairs; values may be user text.
    pub facts: Vec<(&'static str, String)>,
    /// The snitch's tags: user text.
    pub tags: Vec<String>,
    /// When it happened.
    pub at: DateTime<Utc>,
    /// A dashboard link that cannot check in, when the server knows its public URL.
    pub link: Option<String>,
    /// The identifier of the snitch for this channel ([`derived_ref`]): PagerDuty's
    /// `dedup_key`, Opsgenie's `alias`.
    pub incident: String,
    /// A unique, stable id of this notification for this channel (Matrix's transaction
    /// id): the same on every retry.
    pub idempotency: String,
}

impl Message {
    /// The line a person reads first: "Nightly backup is missing: …".
    pub fn headline(&self) -> String {
        format!("{} {}", self.name, self.summary)
    }

    /// The title: "MISSING: Nightly backup".
    pub fn title(&self) -> String {
        format!("{}: {}", self.tone.word(), self.name)
    }
}

pub use snitch_core::derived::derived_ref;

/// Everything but unreserved characters: a Matrix room id made one path segment.
const ROOM_ID_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

fn keyed_hex(key: &ChannelKey, data: &[u8]) -> String {
    snitch_core::derived::keyed_hex(key.expose().as_bytes(), data, 16)
}

fn at_utc(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// The message of `event` for the channel of `key`, delivery `delivery_id` (its retries
/// share it), with links under `dashboard` (the server's public URL) when known.
pub fn message_of(
    event: &Event,
    channel_id: &str,
    key: &ChannelKey,
    delivery_id: &str,
    dashboard: Option<&str>,
) -> Message {
    let incident = derived_ref(key, event.token.as_str());
    let tone = match event.kind {
        EventKind::Missing => Tone::Down,
        EventKind::Errored => Tone::Errored,
        EventKind::Reporting => Tone::Up,
        EventKind::Paused => Tone::Paused,
        _ => Tone::Paused,
    };
    let since = match event.checked_in_at {
        Some(t) => format!("no check-in since {}", at_utc(t)),
        None => "no check-in yet".to_owned(),
    };
    // What a job wrote (message, exit status) is one line here: it may go into the
    // summary, mid-sentence (docs/rules.md#hostile-input).
    let check_in_message = event
        .check_in
        .as_ref()
        .and_then(|c| c.message.as_ref())
        .map(|m| one_line(m.as_str()))
        .filter(|m| !m.is_empty());
    let summary = match event.kind {
        EventKind::Missing if event.reason == Some(AlertReason::Timeout) => {
            match event.run.as_ref().and_then(|r| r.started_at) {
                Some(started) => format!(
                    "is missing: a run started {} and did not end in time",
                    at_utc(started)
                ),
                None => "is missing: a run did not end in time".to_owned(),
            }
        }
        EventKind::Missing => match event.expected_at {
            Some(expected) => format!("is missing: {since} (expected by {})", at_utc(expected)),
            None => format!("is missing: {since}"),
        },
        EventKind::Errored => {
            let status = event
                .check_in
                .as_ref()
                .and_then(|c| c.outcome.exit_status())
                .map(|s| format!("exit {}", one_line(s)))
                .unwrap_or_else(|| "an error".to_owned());
            match &check_in_message {
                Some(m) => format!("errored: {status}, {m}"),
                None => format!("errored: {status}"),
            }
        }
        EventKind::Reporting => "is back".to_owned(),
        EventKind::Paused => "was paused: no alerts until it checks in again".to_owned(),
        _ => event.kind.as_str().to_owned(),
    };
    let mut facts = vec![("Status", event.status.as_str().to_owned())];
    if let Some(t) = event.checked_in_at {
        facts.push(("Last check-in", at_utc(t)));
    }
    if event.missed_periods > 1 {
        facts.push(("Missed runs", event.missed_periods.to_string()));
    }
    if let (Some(m), false) = (&check_in_message, event.kind == EventKind::Errored) {
        facts.push(("Message", m.clone()));
    }
    let notes = event.notes.as_str().trim_end();
    if !notes.is_empty() {
        facts.push(("Notes", quoted_lines(notes)));
    }
    Message {
        tone,
        name: one_line(event.name.as_str()),
        summary,
        facts,
        tags: event.tags.iter().map(|t| one_line(t.as_str())).collect(),
        at: event.at,
        link: dashboard.map(|base| alert_link(base, channel_id, &incident)),
        incident,
        idempotency: keyed_hex(key, delivery_id.as_bytes()),
    }
}

/// The test notification of a channel named `name`, sent at `at`.
pub fn test_message(
    name: &str,
    channel_id: &str,
    key: &ChannelKey,
    at: DateTime<Utc>,
    dashboard: Option<&str>,
) -> Message {
    let incident = keyed_hex(key, b"test");
    Message {
        tone: Tone::Test,
        name: one_line(name),
        summary: "works: this is a test notification from Snitch".to_owned(),
        facts: vec![("Sent", at_utc(at))],
        tags: Vec::new(),
        at,
        link: dashboard
            .map(|base| format!("{}/ui/channels#{channel_id}", base.trim_end_matches('/'))),
        idempotency: keyed_hex(key, format!("test-{}", at.timestamp_millis()).as_bytes()),
        incident: format!("test-{incident}"),
    }
}

/// Text that may hold lines (notes): one line as it is; several, each behind `> ` on a
/// line of its own, so that none of them can pass for a line of ours
/// (docs/rules.md#hostile-input). [`plain_lines`] puts such a value under its label.
fn quoted_lines(text: &str) -> String {
    let lines: Vec<&str> = text.split(LINE_BREAKS).collect();
    if lines.len() == 1 {
        return one_line(text);
    }
    lines
        .iter()
        .map(|line| format!("> {}", one_line(line)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The dashboard's way from a channel's message to its snitch: it names the channel and
/// the derived reference, never the token.
pub fn alert_link(base: &str, channel_id: &str, reference: &str) -> String {
    format!(
        "{}/ui/alerts/{channel_id}/{reference}",
        base.trim_end_matches('/')
    )
}

// ---------------------------------------------------------------------------------------
// Escaping
// ---------------------------------------------------------------------------------------

/// U+2060 WORD JOINER: invisible, and it breaks `@everyone` into text no vendor reads
/// as a mention, and `https://evil.example` into text no vendor makes a link.
const JOINER: char = '\u{2060}';

/// Mentions and links made inert (docs/rules.md#channels): a word joiner after every
/// `@` (a mention needs the word right after it), after a `:` before `//` (a scheme:
/// `https://`, `HTTP://`), and after every full stop before a letter or digit (a domain:
/// `www.x.com`, `evil.example/x`, `10.0.0.1`; the ideographic and full-width stops
/// too). Links in a message are ours, never a job's.
pub fn defuse(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        let next = chars.peek().copied();
        let defused = match c {
            '@' => true,
            ':' => next == Some('/') && chars.clone().nth(1) == Some('/'),
            '.' | '\u{3002}' | '\u{ff0e}' | '\u{ff61}' => next.is_some_and(char::is_alphanumeric),
            _ => false,
        };
        if defused {
            out.push(JOINER);
        }
    }
    out
}

/// Slack's mrkdwn and Google Chat's markup have no escape for `*`, `_`, `~` and `` ` ``:
/// a word joiner on each side of one keeps it from opening or closing bold, italics,
/// strike-through or code, which need a space, a line's edge or punctuation there.
fn defuse_marks(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if matches!(c, '*' | '_' | '~' | '`') {
            out.push(JOINER);
            out.push(c);
            out.push(JOINER);
        } else {
            out.push(c);
        }
    }
    out
}

/// Slack's mrkdwn: its three escapes (`&`, `<`, `>`: no `<!channel>`, `<@U123>` or
/// `<url|text>`), and its marks defused.
pub fn slack_escape(text: &str) -> String {
    defuse_marks(
        &defuse(text)
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;"),
    )
}

/// Markdown (Discord, Mattermost, Teams' TextBlocks): every character that could start
/// markup gets a backslash, and mentions and links are defused.
pub fn markdown_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    for c in defuse(text).chars() {
        if "\\`*_~|>[]()#<!:-+.=".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Google Chat's text: HTML escapes (no `<users/all>` or `<url|text>`) and its marks
/// defused.
pub fn google_chat_escape(text: &str) -> String {
    defuse_marks(&html_escape(text))
}

/// HTML text (Telegram, Matrix's `formatted_body`; Google Chat's, with its marks
/// defused: [`google_chat_escape`]).
pub fn html_escape(text: &str) -> String {
    html_chars(&defuse(text))
}

/// `&`, `<`, `>` and `"` as HTML entities, and nothing else: for our own links, which
/// stay links (an `href`).
fn html_chars(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `text` cut to at most `max` characters, with an ellipsis when cut: user text is cut
/// before it is escaped, never the markup.
pub fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{kept}…")
}

// ---------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------

/// A vendor API call, ready for an HTTP client.
#[derive(Debug, Clone, PartialEq)]
pub struct VendorRequest {
    /// `POST` or `PUT`.
    pub method: &'static str,
    /// Where it goes.
    pub url: String,
    /// Extra headers (authorization, ntfy's, …).
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: VendorBody,
}

/// A request body.
#[derive(Debug, Clone, PartialEq)]
pub enum VendorBody {
    /// `application/json`.
    Json(Value),
    /// `application/x-www-form-urlencoded`.
    Form(Vec<(&'static str, String)>),
}

fn setting<'a>(settings: &'a ChannelSettings, name: &str) -> Result<&'a str, NotifyError> {
    settings
        .get(name)
        .ok_or_else(|| NotifyError::permanent(format!("the channel has no {name}")))
}

fn plain_lines(message: &Message) -> Vec<String> {
    let mut lines = vec![message.headline()];
    for (label, value) in &message.facts {
        if value.contains('\n') {
            // Quoted lines ([`quoted_lines`]), under their label.
            lines.push(format!("{label}:"));
            lines.extend(value.lines().map(str::to_owned));
        } else {
            lines.push(format!("{label}: {value}"));
        }
    }
    if !message.tags.is_empty() {
        lines.push(format!("Tags: {}", message.tags.join(", ")));
    }
    lines
}

/// The calls that send `message` through a channel of these settings (most kinds one;
/// a PagerDuty or Opsgenie test, trigger then resolve).
pub fn requests(
    settings: &ChannelSettings,
    message: &Message,
) -> Result<Vec<VendorRequest>, NotifyError> {
    let kind = settings.kind();
    let post = |url: String, body: Value| VendorRequest {
        method: "POST",
        url,
        headers: Vec::new(),
        body: VendorBody::Json(body),
    };
    let one = match kind {
        ChannelKind::Slack => post(setting(settings, "url")?.to_owned(), slack(message)),
        ChannelKind::Mattermost => post(setting(settings, "url")?.to_owned(), mattermost(message)),
        ChannelKind::Discord => post(setting(settings, "url")?.to_owned(), discord(message)),
        ChannelKind::Teams => post(setting(settings, "url")?.to_owned(), teams(message)),
        ChannelKind::GoogleChat => post(setting(settings, "url")?.to_owned(), google_chat(message)),
        ChannelKind::Pagerduty => return pagerduty(settings, message),
        ChannelKind::Opsgenie => return opsgenie(settings, message),
        ChannelKind::Telegram => {
            let url = format!(
                "{}/bot{}/sendMessage",
                setting(settings, "api_url")?.trim_end_matches('/'),
                setting(settings, "bot_token")?
            );
            post(url, telegram(settings, message)?)
        }
        ChannelKind::Ntfy => {
            let mut request = post(
                format!("{}/", setting(settings, "server")?.trim_end_matches('/')),
                ntfy(settings, message)?,
            );
            if let Some(token) = settings.get("token") {
                request
                    .headers
                    .push(("Authorization", format!("Bearer {token}")));
            }
            request
        }
        ChannelKind::Pushover => VendorRequest {
            method: "POST",
            url: setting(settings, "api_url")?.to_owned(),
            headers: Vec::new(),
            body: VendorBody::Form(pushover(settings, message)?),
        },
        ChannelKind::Matrix => {
            let room: String = percent_encoding::utf8_percent_encode(
                setting(settings, "room_id")?,
                ROOM_ID_SEGMENT,
            )
            .collect();
            VendorRequest {
                method: "PUT",
                url: format!(
                    "{}/_matrix/client/v3/rooms/{room}/send/m.room.message/snitch{}",
                    setting(settings, "homeserver")?.trim_end_matches('/'),
                    message.idempotency
                ),
                headers: vec![(
                    "Authorization",
                    format!("Bearer {}", setting(settings, "access_token")?),
                )],
                body: VendorBody::Json(matrix(message)),
            }
        }
        ChannelKind::Webhook | ChannelKind::Email => {
            return Err(NotifyError::permanent(format!(
                "{kind} deliveries have notifiers of their own"
            )))
        }
        _ => {
            return Err(NotifyError::permanent(format!(
                "this server cannot send to {kind} channels"
            )))
        }
    };
    Ok(vec![one])
}

fn slack(m: &Message) -> Value {
    // User text goes into plain_text objects, which Slack never parses; the top-level
    // `text` (the notification's preview) is mrkdwn, so it is escaped.
    // Mentions and links are defused before the cut, so the joiners count toward
    // Slack's limits.
    let plain = |text: String, max: usize| json!({"type": "plain_text", "text": cut(&defuse(&text), max), "emoji": false});
    let mut fields: Vec<Value> = m
        .facts
        .iter()
        .map(|(label, value)| plain(format!("{label}: {value}"), 1900))
        .collect();
    if !m.tags.is_empty() {
        fields.push(plain(format!("Tags: {}", m.tags.join(", ")), 1900));
    }
    fields.truncate(10);
    let mut blocks = vec![
        json!({"type": "header", "text": plain(m.title(), 150)}),
        json!({"type": "section", "text": plain(m.headline(), 2900)}),
    ];
    if !fields.is_empty() {
        blocks.push(json!({"type": "section", "fields": fields}));
    }
    blocks.push(json!({"type": "context", "elements": [plain(at_utc(m.at), 100)]}));
    if let Some(link) = &m.link {
        blocks.push(json!({"type": "actions", "elements": [{
            "type": "button",
            "text": {"type": "plain_text", "text": "Open in Snitch"},
            "url": link,
        }]}));
    }
    json!({"text": slack_escape(&cut(&m.headline(), 2900)), "blocks": blocks})
}

fn mattermost(m: &Message) -> Value {
    let mut text = format!("**{}**", markdown_escape(&cut(&m.title(), 200)));
    for line in plain_lines(m) {
        text.push('\n');
        text.push_str(&markdown_escape(&cut(&line, 2000)));
    }
    if let Some(link) = &m.link {
        text.push_str(&format!("\n[Open in Snitch]({link})"));
    }
    json!({"text": text, "username": "Snitch"})
}

fn discord(m: &Message) -> Value {
    let fields: Vec<Value> = m
        .facts
        .iter()
        .take(20)
        .map(|(label, value)| {
            // Escaping at most doubles the text: 500 stays under Discord's 1,024.
            json!({"name": label, "value": markdown_escape(&cut(value, 500)), "inline": false})
        })
        .collect();
    // A title renders Markdown too. Escaping at most doubles the name: 120 characters
    // keep the title under Discord's 256.
    let title = format!("{}: {}", m.tone.word(), markdown_escape(&cut(&m.name, 120)));
    let mut embed = json!({
        "title": title,
        "description": markdown_escape(&cut(&m.headline(), 3000)),
        "color": m.tone.colour(),
        "fields": fields,
        "timestamp": m.at.to_rfc3339(),
    });
    if let Some(link) = &m.link {
        embed["url"] = json!(link);
    }
    if !m.tags.is_empty() {
        embed["footer"] = json!({"text": cut(&defuse(&m.tags.join(", ")), 1000)});
    }
    // No mention of anyone, whatever the text holds.
    json!({"username": "Snitch", "embeds": [embed], "allowed_mentions": {"parse": []}})
}

fn teams(m: &Message) -> Value {
    let colour = match m.tone {
        Tone::Down | Tone::Errored => "Attention",
        Tone::Up => "Good",
        Tone::Paused | Tone::Test => "Default",
    };
    let facts: Vec<Value> = m
        .facts
        .iter()
        .map(|(label, value)| json!({"title": label, "value": markdown_escape(&cut(value, 1000))}))
        .collect();
    let mut body = vec![
        json!({"type": "TextBlock", "text": markdown_escape(&cut(&m.title(), 200)),
               "weight": "Bolder", "size": "Medium", "color": colour, "wrap": true}),
        json!({"type": "TextBlock", "text": markdown_escape(&cut(&m.headline(), 2000)), "wrap": true}),
    ];
    if !facts.is_empty() {
        body.push(json!({"type": "FactSet", "facts": facts}));
    }
    let mut card = json!({
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
    });
    if let Some(link) = &m.link {
        card["actions"] =
            json!([{"type": "Action.OpenUrl", "title": "Open in Snitch", "url": link}]);
    }
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": card,
        }],
    })
}

fn google_chat(m: &Message) -> Value {
    let mut text = format!("*{}*", google_chat_escape(&cut(&m.title(), 200)));
    for line in plain_lines(m) {
        text.push('\n');
        text.push_str(&google_chat_escape(&cut(&line, 2000)));
    }
    if let Some(link) = &m.link {
        text.push_str(&format!("\n<{link}|Open in Snitch>"));
    }
    json!({"text": text})
}

fn pagerduty(settings: &ChannelSettings, m: &Message) -> Result<Vec<VendorRequest>, NotifyError> {
    let url = setting(settings, "api_url")?.to_owned();
    let routing_key = setting(settings, "routing_key")?.to_owned();
    let dedup_key = format!("snitch-{}", m.incident);
    let resolve = json!({
        "routing_key": routing_key,
        "event_action": "resolve",
        "dedup_key": dedup_key,
    });
    let call = |body: Value| VendorRequest {
        method: "POST",
        url: url.clone(),
        headers: Vec::new(),
        body: VendorBody::Json(body),
    };
    if !m.tone.opens_incident() {
        return Ok(vec![call(resolve)]);
    }
    let details: serde_json::Map<String, Value> = m
        .facts
        .iter()
        .map(|(label, value)| ((*label).to_owned(), json!(defuse(value))))
        .chain((!m.tags.is_empty()).then(|| {
            (
                "Tags".to_owned(),
                json!(m.tags.iter().map(|t| defuse(t)).collect::<Vec<_>>()),
            )
        }))
        .collect();
    let mut trigger = json!({
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": dedup_key,
        "payload": {
            "summary": cut(&defuse(&m.headline()), 1024),
            "source": "snitch",
            "severity": match m.tone { Tone::Errored => "error", Tone::Test => "info", _ => "critical" },
            "timestamp": m.at.to_rfc3339(),
            // Matched by the account's rules: as written.
            "component": cut(&m.name, 255),
            "custom_details": details,
        },
        "client": "Snitch",
    });
    if let Some(link) = &m.link {
        trigger["client_url"] = json!(link);
        trigger["links"] = json!([{"href": link, "text": "Open in Snitch"}]);
    }
    let mut calls = vec![call(trigger)];
    if m.tone == Tone::Test {
        calls.push(call(resolve));
    }
    Ok(calls)
}

fn opsgenie(settings: &ChannelSettings, m: &Message) -> Result<Vec<VendorRequest>, NotifyError> {
    let base = settings
        .endpoint()
        .map(|u| u.as_str().trim_end_matches('/').to_owned())
        .ok_or_else(|| NotifyError::permanent("the channel has no api_url"))?;
    let auth = vec![(
        "Authorization",
        format!("GenieKey {}", setting(settings, "api_key")?),
    )];
    let alias = format!("snitch-{}", m.incident);
    let close = VendorRequest {
        method: "POST",
        url: format!("{base}/v2/alerts/{alias}/close?identifierType=alias"),
        headers: auth.clone(),
        body: VendorBody::Json(
            json!({"source": "Snitch", "user": "Snitch", "note": cut(&defuse(&m.headline()), 1000)}),
        ),
    };
    if !m.tone.opens_incident() {
        return Ok(vec![close]);
    }
    let details: serde_json::Map<String, Value> = m
        .facts
        .iter()
        .map(|(label, value)| ((*label).to_owned(), json!(cut(&defuse(value), 1000))))
        .collect();
    let mut description = defuse(&plain_lines(m).join("\n"));
    if let Some(link) = &m.link {
        description.push_str(&format!("\n{link}"));
    }
    // Matched by the account's rules: as written.
    let tags: Vec<String> = m.tags.iter().take(20).map(|t| cut(t, 50)).collect();
    let create = VendorRequest {
        method: "POST",
        url: format!("{base}/v2/alerts"),
        headers: auth,
        body: VendorBody::Json(json!({
            "message": cut(&defuse(&m.headline()), 130),
            "alias": alias,
            "description": cut(&description, 15_000),
            "tags": tags,
            "details": details,
            "priority": if m.tone == Tone::Test { "P5" } else { setting(settings, "priority")? },
            "source": "Snitch",
        })),
    };
    let mut calls = vec![create];
    if m.tone == Tone::Test {
        calls.push(close);
    }
    Ok(calls)
}

fn telegram(settings: &ChannelSettings, m: &Message) -> Result<Value, NotifyError> {
    // User text is cut before it is escaped, never the markup: 600 characters escape
    // to at most 3,600 (`&quot;`), which leaves room for the tags under Telegram's 4,096.
    let plain = cut(&plain_lines(m).join("\n"), 600);
    let mut text = format!(
        "<b>{}</b>\n{}",
        html_escape(&cut(&m.title(), 60)),
        html_escape(&plain)
    );
    if let Some(link) = &m.link {
        text.push_str(&format!(
            "\n<a href=\"{}\">Open in Snitch</a>",
            html_chars(link)
        ));
    }
    Ok(json!({
        "chat_id": setting(settings, "chat_id")?,
        "text": text,
        "parse_mode": "HTML",
        "link_preview_options": {"is_disabled": true},
    }))
}

fn ntfy(settings: &ChannelSettings, m: &Message) -> Result<Value, NotifyError> {
    let (priority, tag) = match m.tone {
        Tone::Down => (5, "rotating_light"),
        Tone::Errored => (4, "warning"),
        Tone::Up => (3, "white_check_mark"),
        Tone::Paused => (2, "pause_button"),
        Tone::Test => (3, "test_tube"),
    };
    let mut body = json!({
        "topic": setting(settings, "topic")?,
        // The apps make links of bare URLs: defused, as in the chat kinds.
        "title": cut(&defuse(&m.title()), 250),
        "message": cut(&defuse(&plain_lines(m).join("\n")), 4000),
        "priority": priority,
        "tags": [tag],
        "markdown": false,
    });
    if let Some(link) = &m.link {
        body["click"] = json!(link);
    }
    Ok(body)
}

fn pushover(
    settings: &ChannelSettings,
    m: &Message,
) -> Result<Vec<(&'static str, String)>, NotifyError> {
    let priority = match m.tone {
        Tone::Down | Tone::Errored => "1",
        Tone::Up | Tone::Test => "0",
        Tone::Paused => "-1",
    };
    let mut form = vec![
        ("token", setting(settings, "app_token")?.to_owned()),
        ("user", setting(settings, "user_key")?.to_owned()),
        // The apps make links of bare URLs: defused, as in the chat kinds.
        ("title", cut(&defuse(&m.title()), 250)),
        ("message", cut(&defuse(&plain_lines(m).join("\n")), 1024)),
        ("priority", priority.to_owned()),
        ("timestamp", m.at.timestamp().to_string()),
    ];
    if let Some(link) = &m.link {
        form.push(("url", link.clone()));
        form.push(("url_title", "Open in Snitch".to_owned()));
    }
    Ok(form)
}

fn matrix(m: &Message) -> Value {
    let body = plain_lines(m)
        .into_iter()
        .map(|l| defuse(&cut(&l, 2000)))
        .collect::<Vec<_>>()
        .join("\n");
    let mut html = format!("<b>{}</b>", html_escape(&cut(&m.title(), 200)));
    for line in plain_lines(m) {
        html.push_str("<br>");
        html.push_str(&html_escape(&cut(&line, 2000)));
    }
    if let Some(link) = &m.link {
        html.push_str(&format!(
            "<br><a href=\"{}\">Open in Snitch</a>",
            html_chars(link)
        ));
    }
    json!({
        "msgtype": "m.text",
        "body": format!("{}\n{body}", defuse(&m.title())),
        "format": "org.matrix.custom.html",
        "formatted_body": html,
        // Intentional mentions: this message mentions no one.
        "m.mentions": {},
    })
}

// ---------------------------------------------------------------------------------------
// Answers
// ---------------------------------------------------------------------------------------

/// The longest vendor reason kept with an attempt.
const REASON_MAX_CHARS: usize = 300;

/// What a vendor's answer means: `Ok` with what to record, or a failure, permanent for
/// the 4xx answers that retrying cannot change (bad key, channel gone, payload refused),
/// transient with the vendor's wait for a 429.
pub fn interpret(
    kind: ChannelKind,
    status: u16,
    retry_after_header: Option<&str>,
    body: &str,
) -> Result<String, NotifyError> {
    let json: Option<Value> = serde_json::from_str(body).ok();
    let reason = vendor_reason(json.as_ref(), body);
    let said = |prefix: String| match &reason {
        Some(r) => format!("{prefix}: {r}"),
        None => prefix,
    };
    // Telegram answers 200 with `ok: false` in no documented case, but says `ok`.
    let refused_in_body = kind == ChannelKind::Telegram
        && json
            .as_ref()
            .and_then(|j| j.get("ok"))
            .and_then(Value::as_bool)
            == Some(false);
    if (200..300).contains(&status) && !refused_in_body {
        return Ok(format!("{kind} answered HTTP {status}"));
    }
    if status == 429 {
        let wait = retry_after_header
            .and_then(|h| h.trim().parse::<f64>().ok())
            .or_else(|| json.as_ref().and_then(retry_after_in_body))
            .unwrap_or(60.0)
            .clamp(0.0, 86_400.0);
        return Err(NotifyError::retry_after(
            said(format!(
                "{kind} rate limit (HTTP 429), retry after {wait:.0} s"
            )),
            chrono::Duration::milliseconds((wait * 1000.0).ceil() as i64),
        ));
    }
    if status == 408 || !(200..500).contains(&status) {
        return Err(NotifyError::new(said(format!(
            "{kind} answered HTTP {status}"
        ))));
    }
    Err(NotifyError::permanent(said(format!(
        "{kind} refused it (HTTP {status})"
    ))))
}

fn retry_after_in_body(json: &Value) -> Option<f64> {
    // Discord: seconds; Telegram: parameters.retry_after in seconds; Matrix: ms.
    json.get("retry_after")
        .and_then(Value::as_f64)
        .or_else(|| {
            json.get("parameters")
                .and_then(|p| p.get("retry_after"))
                .and_then(Value::as_f64)
        })
        .or_else(|| {
            json.get("retry_after_ms")
                .and_then(Value::as_f64)
                .map(|ms| ms / 1000.0)
        })
}

/// The vendor's own words for a failure: `description` (Telegram), `message`
/// (Discord, PagerDuty, Opsgenie), `error` (Matrix), `errors` (PagerDuty, Pushover), or
/// the plain body (Slack's `no_service`).
fn vendor_reason(json: Option<&Value>, body: &str) -> Option<String> {
    let text = match json {
        Some(j) => {
            let field = |name: &str| j.get(name).and_then(Value::as_str).map(str::to_owned);
            let errors = j.get("errors").map(|e| match e {
                Value::Array(items) => items
                    .iter()
                    .map(|i| {
                        i.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| i.to_string())
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
                other => other.to_string(),
            });
            let parts: Vec<String> = [
                field("description"),
                field("message"),
                field("error"),
                errors,
            ]
            .into_iter()
            .flatten()
            .collect();
            parts.join("; ")
        }
        None => body.to_owned(),
    };
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let clean = clean.trim();
    (!clean.is_empty()).then(|| cut(clean, REASON_MAX_CHARS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_leave_no_markup_and_no_mention() {
        let hostile = "<!channel> @everyone *bold* [x](https://evil.test) <b>&";
        let slack = slack_escape(hostile);
        assert!(!slack.contains('<') && !slack.contains('>'));
        assert!(!slack.contains("@everyone"));
        let md = markdown_escape(hostile);
        assert!(md.contains("\\*bold\\*") && md.contains("\\[x\\]\\(https\\:"));
        assert!(!md.contains("@everyone"));
        let html = html_escape(hostile);
        assert!(html.contains("&lt;b&gt;&amp;") && !html.contains("<b>"));
    }

    /// docs/rules.md#channels: links in a message are ours; a mention, a scheme and a
    /// domain a job wrote each get a word joiner, and text that is neither is unchanged.
    #[test]
    fn links_and_mentions_a_job_wrote_are_defused() {
        let j = JOINER;
        assert_eq!(
            defuse("https://evil.example/x HTTP://x www.x.com @here"),
            format!("https:{j}//evil.{j}example/x HTTP:{j}//x www.{j}x.{j}com @{j}here")
        );
        assert_eq!(defuse("10.0.0.1"), format!("10.{j}0.{j}0.{j}1"));
        assert_eq!(defuse("x\u{3002}com"), format!("x\u{3002}{j}com"));
        let ours = "exit 3, disk full. At 10:15 UTC: see notes... a:/b";
        assert_eq!(defuse(ours), ours);
    }

    #[test]
    fn cuts_count_characters_and_mark_the_cut() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("ééééé", 3), "éé…");
    }

    #[test]
    fn answers_are_success_transient_or_permanent() {
        let ok = interpret(ChannelKind::Slack, 200, None, "ok").expect("ok");
        assert_eq!(ok, "slack answered HTTP 200");
        let gone = interpret(ChannelKind::Slack, 404, None, "no_service").expect_err("gone");
        assert!(
            gone.permanent && gone.detail.contains("no_service"),
            "{gone:?}"
        );
        let limited = interpret(ChannelKind::Slack, 429, Some("7"), "").expect_err("429");
        assert!(!limited.permanent);
        assert_eq!(limited.retry_after, Some(chrono::Duration::seconds(7)));
        let tg = interpret(
            ChannelKind::Telegram,
            429,
            None,
            r#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 3","parameters":{"retry_after":3}}"#,
        )
        .expect_err("429");
        assert_eq!(tg.retry_after, Some(chrono::Duration::seconds(3)));
        let discord =
            interpret(ChannelKind::Discord, 429, None, r#"{"retry_after":1.5}"#).expect_err("429");
        assert_eq!(
            discord.retry_after,
            Some(chrono::Duration::milliseconds(1500))
        );
        let busy = interpret(ChannelKind::Pagerduty, 503, None, "").expect_err("5xx");
        assert!(!busy.permanent && busy.retry_after.is_none());
        let bad = interpret(
            ChannelKind::Pagerduty,
            400,
            None,
            r#"{"status":"invalid event","message":"Event object is invalid","errors":["'routing_key' is invalid"]}"#,
        )
        .expect_err("400");
        assert!(
            bad.permanent && bad.detail.contains("'routing_key' is invalid"),
            "{bad:?}"
        );
    }

    #[test]
    fn refs_are_keyed_stable_and_not_the_token() {
        let key = ChannelKey::parse("k0k0k0k0k0k0k0k0k0k0").expect("key");
        let other = ChannelKey::parse("k1k1k1k1k1k1k1k1k1k1").expect("key");
        let token = "abcdefghij0123456789";
        assert_eq!(derived_ref(&key, token), derived_ref(&key, token));
        assert_ne!(derived_ref(&key, token), derived_ref(&other, token));
        assert!(!derived_ref(&key, token).contains("abcdef"));
        assert_eq!(derived_ref(&key, token).len(), 32);
    }
}
