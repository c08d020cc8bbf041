//! Channels: where a case's alerts go besides its signed webhooks (docs/rules.md#channels).
//!
//! A channel is a registration of one kind (`slack`, `pagerduty`, …) with that kind's
//! settings, the events it wants and the tags it is limited to. The core validates the
//! settings and decides which events reach which channel ([`ChannelConfig::wants`]); the
//! vendors' wire formats live with the notifier in snitch-http.

use std::collections::BTreeMap;
use std::fmt;

use crate::calendar::Timestamp;
use crate::snitch::{Event, EventKind};
use crate::types::{CaseId, EmailAddress, Status, Tags};
use crate::validation::{Validation, Validations};
use crate::webhook::WebhookUrl;

/// The longest channel name, in characters.
pub const CHANNEL_NAME_MAX_CHARS: usize = 100;
/// The longest text setting (keys, ids, topics), in characters.
pub const CHANNEL_SETTING_MAX_CHARS: usize = 512;
/// The most channels one case may have (webhooks not counted).
pub const CHANNELS_PER_CASE_MAX: usize = 100;
/// The most addresses of an `email` channel.
pub const EMAIL_CHANNEL_MAX_RECIPIENTS: usize = 20;

/// The kinds of channel. `webhook` and `email` are today's signed webhooks and e-mail;
/// the rest speak a vendor's API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ChannelKind {
    /// A signed webhook POST (registered through `/v1/webhooks` or as a channel).
    Webhook,
    /// An e-mail.
    Email,
    /// A Slack incoming webhook.
    Slack,
    /// A Mattermost incoming webhook.
    Mattermost,
    /// A Discord webhook.
    Discord,
    /// A Microsoft Teams Workflows webhook.
    Teams,
    /// A Google Chat space webhook.
    GoogleChat,
    /// PagerDuty Events API v2.
    Pagerduty,
    /// Opsgenie's Alert API.
    Opsgenie,
    /// A Telegram bot's `sendMessage`.
    Telegram,
    /// An ntfy topic.
    Ntfy,
    /// Pushover's message API.
    Pushover,
    /// A Matrix room.
    Matrix,
}

impl ChannelKind {
    /// Every kind, in the order the documentation lists them.
    pub const ALL: [ChannelKind; 13] = [
        ChannelKind::Webhook,
        ChannelKind::Email,
        ChannelKind::Slack,
        ChannelKind::Mattermost,
        ChannelKind::Discord,
        ChannelKind::Teams,
        ChannelKind::GoogleChat,
        ChannelKind::Pagerduty,
        ChannelKind::Opsgenie,
        ChannelKind::Telegram,
        ChannelKind::Ntfy,
        ChannelKind::Pushover,
        ChannelKind::Matrix,
    ];

    /// The kind as text: `webhook`, `email`, `slack`, `google_chat`, ….
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelKind::Webhook => "webhook",
            ChannelKind::Email => "email",
            ChannelKind::Slack => "slack",
            ChannelKind::Mattermost => "mattermost",
            ChannelKind::Discord => "discord",
            ChannelKind::Teams => "teams",
            ChannelKind::GoogleChat => "google_chat",
            ChannelKind::Pagerduty => "pagerduty",
            ChannelKind::Opsgenie => "opsgenie",
            ChannelKind::Telegram => "telegram",
            ChannelKind::Ntfy => "ntfy",
            ChannelKind::Pushover => "pushover",
            ChannelKind::Matrix => "matrix",
        }
    }

    /// The kind named `raw`.
    pub fn parse(raw: &str) -> Option<ChannelKind> {
        ChannelKind::ALL.into_iter().find(|k| k.as_str() == raw)
    }

    /// Whether its deliveries go over HTTP (every kind but `email`): they share the
    /// dispatcher's HTTP budget and are capped per destination.
    pub fn is_http(self) -> bool {
        self != ChannelKind::Email
    }

    /// Whether it opens and resolves incidents (`pagerduty`, `opsgenie`): a recovery
    /// resolves the page its failure opened.
    pub fn is_incident(self) -> bool {
        matches!(self, ChannelKind::Pagerduty | ChannelKind::Opsgenie)
    }

    /// The settings this kind takes, in the order they are documented.
    pub fn settings(self) -> &'static [SettingSpec] {
        match self {
            ChannelKind::Webhook => WEBHOOK_SETTINGS,
            ChannelKind::Email => EMAIL_SETTINGS,
            ChannelKind::Slack
            | ChannelKind::Mattermost
            | ChannelKind::Discord
            | ChannelKind::Teams
            | ChannelKind::GoogleChat => CHAT_SETTINGS,
            ChannelKind::Pagerduty => PAGERDUTY_SETTINGS,
            ChannelKind::Opsgenie => OPSGENIE_SETTINGS,
            ChannelKind::Telegram => TELEGRAM_SETTINGS,
            ChannelKind::Ntfy => NTFY_SETTINGS,
            ChannelKind::Pushover => PUSHOVER_SETTINGS,
            ChannelKind::Matrix => MATRIX_SETTINGS,
        }
    }
}

const fn setting(
    name: &'static str,
    value: SettingValue,
    required: bool,
    secret: bool,
    default: Option<&'static str>,
) -> SettingSpec {
    SettingSpec {
        name,
        value,
        required,
        secret,
        default,
    }
}

use SettingValue::{Choice, Emails, Text, Url};

const WEBHOOK_SETTINGS: &[SettingSpec] = &[
    setting("url", Url, true, false, None),
    setting("secret", Text, false, true, None),
];
const EMAIL_SETTINGS: &[SettingSpec] = &[setting("to", Emails, true, false, None)];
// A chat webhook's URL is itself the credential: it is masked whole.
const CHAT_SETTINGS: &[SettingSpec] = &[setting("url", Url, true, true, None)];
const PAGERDUTY_SETTINGS: &[SettingSpec] = &[
    setting("routing_key", Text, true, true, None),
    setting(
        "api_url",
        Url,
        false,
        false,
        Some("https://events.pagerduty.com/v2/enqueue"),
    ),
];
const OPSGENIE_SETTINGS: &[SettingSpec] = &[
    setting("api_key", Text, true, true, None),
    setting("region", Choice(&["us", "eu"]), false, false, Some("us")),
    setting("api_url", Url, false, false, None),
    setting(
        "priority",
        Choice(&["P1", "P2", "P3", "P4", "P5"]),
        false,
        false,
        Some("P2"),
    ),
];
const TELEGRAM_SETTINGS: &[SettingSpec] = &[
    setting("bot_token", Text, true, true, None),
    setting("chat_id", Text, true, false, None),
    setting(
        "api_url",
        Url,
        false,
        false,
        Some("https://api.telegram.org"),
    ),
];
const NTFY_SETTINGS: &[SettingSpec] = &[
    setting("topic", Text, true, false, None),
    setting("server", Url, false, false, Some("https://ntfy.sh")),
    setting("token", Text, false, true, None),
];
const PUSHOVER_SETTINGS: &[SettingSpec] = &[
    setting("app_token", Text, true, true, None),
    setting("user_key", Text, true, true, None),
    setting(
        "api_url",
        Url,
        false,
        false,
        Some("https://api.pushover.net/1/messages.json"),
    ),
];
const MATRIX_SETTINGS: &[SettingSpec] = &[
    setting("homeserver", Url, true, false, None),
    setting("room_id", Text, true, false, None),
    setting("access_token", Text, true, true, None),
];

impl fmt::Display for ChannelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a setting holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingValue {
    /// An `http` or `https` URL with a host ([`WebhookUrl::parse`]).
    Url,
    /// One line of text, no control characters, at most [`CHANNEL_SETTING_MAX_CHARS`].
    Text,
    /// One of these words.
    Choice(&'static [&'static str]),
    /// E-mail addresses separated by commas.
    Emails,
}

/// One setting of a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettingSpec {
    /// Its name in the API and the configuration file, e.g. `routing_key`.
    pub name: &'static str,
    /// What it holds.
    pub value: SettingValue,
    /// Whether a channel must give it.
    pub required: bool,
    /// Whether it is a credential: masked in every response and never logged.
    pub secret: bool,
    /// The value when none is given.
    pub default: Option<&'static str>,
}

/// A channel's settings, valid for its kind: every required one present, defaults filled
/// in, nothing the kind does not take.
#[derive(Clone, PartialEq, Eq)]
pub struct ChannelSettings {
    kind: ChannelKind,
    values: BTreeMap<String, String>,
}

impl ChannelSettings {
    /// Parses `given` (name and value) for `kind`, reporting every problem by setting name.
    /// An empty value counts as not given.
    pub fn parse<'a>(
        kind: ChannelKind,
        given: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, Validations> {
        let specs = kind.settings();
        let mut problems = Validations::new();
        let mut values = BTreeMap::new();
        let mut refused: Vec<&str> = Vec::new();
        for (name, raw) in given {
            let Some(spec) = specs.iter().find(|s| s.name == name) else {
                problems.push(name, format!("is not a setting of {kind} channels"));
                continue;
            };
            if raw.trim().is_empty() {
                continue;
            }
            match parse_value(spec, raw) {
                Ok(value) => {
                    values.insert(name.to_owned(), value);
                }
                Err(problem) => {
                    refused.push(spec.name);
                    problems.push(problem.attribute, problem.message);
                }
            }
        }
        for spec in specs {
            if values.contains_key(spec.name) || refused.contains(&spec.name) {
                continue;
            }
            match spec.default {
                Some(default) => {
                    values.insert(spec.name.to_owned(), default.to_owned());
                }
                None if spec.required => problems.push(spec.name, crate::types::BLANK),
                None => {}
            }
        }
        if kind == ChannelKind::Matrix {
            if let Some(room) = values.get("room_id") {
                if !(room.starts_with('!') || room.starts_with('#')) || !room.contains(':') {
                    problems.push(
                        "room_id",
                        "must be a room id (!id:server) or alias (#alias:server)",
                    );
                }
            }
        }
        if problems.is_empty() {
            Ok(ChannelSettings { kind, values })
        } else {
            Err(problems)
        }
    }

    /// The kind these settings are for.
    pub fn kind(&self) -> ChannelKind {
        self.kind
    }

    /// The setting `name`, if set (or defaulted).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// Every setting, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The recipients of an `email` channel; empty for other kinds.
    pub fn recipients(&self) -> Vec<EmailAddress> {
        self.get("to")
            .map(|to| {
                to.split(',')
                    .filter_map(|a| EmailAddress::parse(a.trim()).ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The base URL requests of this channel go to (the chat webhook, the API URL, the
    /// ntfy server, the homeserver): the key of per-destination fairness and what the
    /// private-address guard checks.
    pub fn endpoint(&self) -> Option<WebhookUrl> {
        let raw = match self.kind {
            ChannelKind::Email => return None,
            ChannelKind::Opsgenie => match self.get("api_url") {
                Some(url) => url.to_owned(),
                None if self.get("region") == Some("eu") => "https://api.eu.opsgenie.com".into(),
                None => "https://api.opsgenie.com".into(),
            },
            ChannelKind::Pagerduty | ChannelKind::Telegram | ChannelKind::Pushover => {
                self.get("api_url")?.to_owned()
            }
            ChannelKind::Ntfy => self.get("server")?.to_owned(),
            ChannelKind::Matrix => self.get("homeserver")?.to_owned(),
            _ => self.get("url")?.to_owned(),
        };
        WebhookUrl::parse(&raw).ok()
    }
}

impl fmt::Debug for ChannelSettings {
    /// Secrets are never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for (name, value) in &self.values {
            let secret = self
                .kind
                .settings()
                .iter()
                .any(|s| s.name == name && s.secret);
            map.entry(name, &if secret { "…" } else { value.as_str() });
        }
        map.finish()
    }
}

fn parse_value(spec: &SettingSpec, raw: &str) -> Result<String, Validation> {
    let name = spec.name;
    crate::types::refuse_nul(name, raw)?;
    let raw = raw.trim();
    match spec.value {
        SettingValue::Url => WebhookUrl::parse(raw)
            .map(|u| u.as_str().to_owned())
            .map_err(|e| Validation::new(name, e.message)),
        SettingValue::Text => {
            if raw.chars().any(char::is_control) {
                return Err(Validation::new(name, "can't contain control characters"));
            }
            if raw.chars().count() > CHANNEL_SETTING_MAX_CHARS {
                return Err(Validation::new(
                    name,
                    format!("is too long (maximum is {CHANNEL_SETTING_MAX_CHARS} characters)"),
                ));
            }
            Ok(raw.to_owned())
        }
        SettingValue::Choice(words) => words
            .iter()
            .find(|w| w.eq_ignore_ascii_case(raw))
            .map(|w| (*w).to_owned())
            .ok_or_else(|| Validation::new(name, format!("must be one of {}", words.join(", ")))),
        SettingValue::Emails => {
            let mut out = Vec::new();
            for part in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                let address = EmailAddress::parse(part).map_err(|_| {
                    Validation::new(name, format!("{part:?} is not an e-mail address"))
                })?;
                if !out.contains(&address) {
                    out.push(address);
                }
            }
            if out.is_empty() {
                return Err(Validation::new(name, crate::types::BLANK));
            }
            if out.len() > EMAIL_CHANNEL_MAX_RECIPIENTS {
                return Err(Validation::new(
                    name,
                    format!("has too many addresses (maximum is {EMAIL_CHANNEL_MAX_RECIPIENTS})"),
                ));
            }
            Ok(out
                .iter()
                .map(EmailAddress::as_str)
                .collect::<Vec<_>>()
                .join(","))
        }
    }
}

/// A channel's own secret: the key of the identifiers it sends instead of the check-in
/// token (an HMAC of the token under this key, see snitch-http's channels), so no
/// vendor ever holds a token, and two channels' identifiers cannot be linked.
#[derive(Clone, PartialEq, Eq)]
pub struct ChannelKey(String);

impl ChannelKey {
    /// A key as stored: 16 to 128 characters of `[a-z0-9]`.
    pub fn parse(raw: &str) -> Result<Self, Validation> {
        let ok = (16..=128).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if ok {
            Ok(ChannelKey(raw.to_owned()))
        } else {
            Err(Validation::new("key", "is not a channel key"))
        }
    }

    /// The key itself (never printed: `Debug` hides it).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ChannelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ChannelKey(…)")
    }
}

/// The events a channel wants: some of `snitch.missing|errored|reporting|paused`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EventFilter(u8);

impl EventFilter {
    /// Missing, errored and reporting: what a channel gets unless it asks otherwise.
    pub const DEFAULT: EventFilter = EventFilter(0b0111);

    fn bit(kind: EventKind) -> u8 {
        match kind {
            EventKind::Missing => 1,
            EventKind::Errored => 2,
            EventKind::Reporting => 4,
            EventKind::Paused => 8,
        }
    }

    /// Parses names, each with or without the `snitch.` prefix (`missing`,
    /// `snitch.paused`); an empty list is refused (a channel that wants nothing is a
    /// mistake, not a setting).
    pub fn parse<S: AsRef<str>>(raw: &[S]) -> Result<Self, Validation> {
        let mut bits = 0;
        for name in raw {
            let name = name.as_ref().trim();
            let full = if name.starts_with("snitch.") {
                name.to_owned()
            } else {
                format!("snitch.{name}")
            };
            let kind = EventKind::parse(&full).ok_or_else(|| {
                Validation::new(
                    "events",
                    "must be among missing, errored, reporting, paused",
                )
            })?;
            bits |= Self::bit(kind);
        }
        if bits == 0 {
            return Err(Validation::new("events", crate::types::BLANK));
        }
        Ok(EventFilter(bits))
    }

    /// Whether it wants events of `kind`.
    pub fn contains(self, kind: EventKind) -> bool {
        self.0 & Self::bit(kind) != 0
    }

    /// The kinds wanted, short names (`missing`, …), in a fixed order.
    pub fn names(self) -> Vec<&'static str> {
        [
            (EventKind::Missing, "missing"),
            (EventKind::Errored, "errored"),
            (EventKind::Reporting, "reporting"),
            (EventKind::Paused, "paused"),
        ]
        .into_iter()
        .filter(|(k, _)| self.contains(*k))
        .map(|(_, n)| n)
        .collect()
    }
}

impl Default for EventFilter {
    fn default() -> Self {
        EventFilter::DEFAULT
    }
}

/// A channel's name: optional, one line, at most [`CHANNEL_NAME_MAX_CHARS`].
pub fn parse_channel_name(raw: &str) -> Result<Option<String>, Validation> {
    crate::types::refuse_nul("name", raw)?;
    let raw = raw.trim();
    if raw.chars().any(char::is_control) {
        return Err(Validation::new("name", "can't contain control characters"));
    }
    if raw.chars().count() > CHANNEL_NAME_MAX_CHARS {
        return Err(Validation::new(
            "name",
            format!("is too long (maximum is {CHANNEL_NAME_MAX_CHARS} characters)"),
        ));
    }
    Ok((!raw.is_empty()).then(|| raw.to_owned()))
}

/// One registered channel of a case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelConfig {
    /// Random, `[a-z0-9]`, unique.
    pub id: String,
    /// The case whose alerts it carries.
    pub case_id: CaseId,
    /// A name for people, if given.
    pub name: Option<String>,
    /// Its kind and settings.
    pub settings: ChannelSettings,
    /// The events it wants.
    pub events: EventFilter,
    /// Only snitches with one of these tags; empty: every snitch of the case.
    pub tags: Tags,
    /// The key of the identifiers it sends (see [`ChannelKey`]).
    pub key: ChannelKey,
    /// When it was added.
    pub created_at: Timestamp,
}

impl ChannelConfig {
    /// The channel's kind.
    pub fn kind(&self) -> ChannelKind {
        self.settings.kind()
    }

    /// Whether `event` goes to this channel: a kind it wants, a snitch it covers, and
    /// for `snitch.reporting` a recovery (from missing or errored), never a first check-in.
    /// A paging channel that wants recoveries also gets the pause of a failed snitch: it
    /// resolves the open page, which no recovery would (the check-in after a pause is
    /// not one).
    pub fn wants(&self, event: &Event) -> bool {
        let was_failing = matches!(event.previous_status, Status::Failed | Status::Errored);
        let recovery_or_other = event.kind != EventKind::Reporting || was_failing;
        let ends_page = self.kind().is_incident()
            && event.kind == EventKind::Paused
            && was_failing
            && self.events.contains(EventKind::Reporting);
        let covered = self.tags.is_empty()
            || self
                .tags
                .iter()
                .any(|t| event.tags.iter().any(|e| e.as_str() == t.as_str()));
        ((self.events.contains(event.kind) && recovery_or_other) || ends_page) && covered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snitch::Event;

    fn parse(kind: ChannelKind, given: &[(&str, &str)]) -> Result<ChannelSettings, Validations> {
        ChannelSettings::parse(kind, given.iter().copied())
    }

    fn attributes(v: Validations) -> Vec<String> {
        v.iter().map(|p| p.attribute.clone()).collect()
    }

    #[test]
    fn every_kind_names_itself_and_parses_back() {
        for kind in ChannelKind::ALL {
            assert_eq!(ChannelKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(ChannelKind::parse("msteams"), None);
    }

    /// The stores class a delivery as HTTP or e-mail by whether it has a destination
    /// (their claims read each budget down its own index), so every HTTP kind has an
    /// endpoint with only its required settings given.
    #[test]
    fn every_http_kind_has_an_endpoint_from_its_required_settings_alone() {
        for kind in ChannelKind::ALL {
            let required: Vec<(&str, &str)> = kind
                .settings()
                .iter()
                .filter(|s| s.required)
                .map(|s| match s.value {
                    SettingValue::Url => (s.name, "https://vendor.example/"),
                    SettingValue::Emails => (s.name, "ops@example.test"),
                    SettingValue::Choice(options) => (s.name, options[0]),
                    SettingValue::Text if s.name == "room_id" => (s.name, "!room:example"),
                    SettingValue::Text => (s.name, "t0ken"),
                })
                .collect();
            let settings = parse(kind, &required).expect("required settings are enough");
            assert_eq!(
                settings.endpoint().is_some(),
                kind.is_http(),
                "{kind}: an endpoint exactly when HTTP"
            );
        }
    }

    #[test]
    fn required_settings_are_named_and_defaults_filled() {
        let err = parse(ChannelKind::Pagerduty, &[]).expect_err("routing key");
        assert_eq!(attributes(err), ["routing_key"]);
        let pd = parse(ChannelKind::Pagerduty, &[("routing_key", "R0123")]).expect("valid");
        assert_eq!(
            pd.get("api_url"),
            Some("https://events.pagerduty.com/v2/enqueue")
        );
        let og = parse(ChannelKind::Opsgenie, &[("api_key", "k"), ("region", "EU")]).expect("ok");
        assert_eq!(og.get("region"), Some("eu"));
        assert_eq!(
            og.endpoint().map(|u| u.destination()),
            Some("api.eu.opsgenie.com:443".to_owned())
        );
    }

    #[test]
    fn bad_and_unknown_settings_are_refused_by_name() {
        let err = parse(
            ChannelKind::Slack,
            &[("url", "javascript:alert(1)"), ("colour", "red")],
        )
        .expect_err("bad");
        let mut names = attributes(err);
        names.sort();
        assert_eq!(names, ["colour", "url"]);
        let err = parse(
            ChannelKind::Telegram,
            &[("bot_token", "a\0b"), ("chat_id", "1")],
        )
        .expect_err("nul");
        assert_eq!(attributes(err), ["bot_token"]);
        let err = parse(
            ChannelKind::Matrix,
            &[
                ("homeserver", "https://m.test"),
                ("room_id", "general"),
                ("access_token", "t"),
            ],
        )
        .expect_err("room");
        assert_eq!(attributes(err), ["room_id"]);
        let err = parse(ChannelKind::Email, &[("to", "a@b.test, not-an-address")]).expect_err("to");
        assert_eq!(attributes(err), ["to"]);
    }

    #[test]
    fn secrets_stay_out_of_debug() {
        let pd = parse(ChannelKind::Pagerduty, &[("routing_key", "R0123secret")]).expect("ok");
        assert!(!format!("{pd:?}").contains("R0123secret"));
        let key = ChannelKey::parse("abcdefghijklmnop0123").expect("key");
        assert!(!format!("{key:?}").contains("abcdef"));
    }

    fn event(kind: EventKind, previous: Status, tags: &[&str]) -> Event {
        let at = chrono::DateTime::from_timestamp(1_800_000_000, 0).expect("valid");
        Event {
            id: "tok00000000000000001-2".into(),
            kind,
            at,
            case_id: CaseId::parse("acme").expect("valid"),
            token: crate::types::Token::parse("tok00000000000000001").expect("valid"),
            name: crate::types::SnitchName::parse("Nightly backup").expect("valid"),
            notes: crate::types::Notes::default(),
            tags: Tags::parse(tags).expect("valid"),
            alert_email: crate::types::AlertEmails::default(),
            status: Status::Healthy,
            previous_status: previous,
            checked_in_at: Some(at),
            check_in: None,
            missed_periods: 0,
            expected_at: None,
            expected_at_local: None,
            reason: None,
            run: None,
        }
    }

    fn channel(
        kind: ChannelKind,
        given: &[(&str, &str)],
        events: &[&str],
        tags: &[&str],
    ) -> ChannelConfig {
        ChannelConfig {
            id: "chan".into(),
            case_id: CaseId::parse("acme").expect("valid"),
            name: None,
            settings: parse(kind, given).expect("valid settings"),
            events: EventFilter::parse(events).expect("valid events"),
            tags: Tags::parse(tags).expect("valid tags"),
            key: ChannelKey::parse("k0k0k0k0k0k0k0k0k0k0").expect("valid key"),
            created_at: chrono::DateTime::from_timestamp(0, 0).expect("valid"),
        }
    }

    /// What reaches a channel: the kinds it wants, of the snitches its tags cover, and a
    /// `reporting` only when it ends a failure.
    #[test]
    fn a_channel_takes_the_events_and_snitches_it_wants() {
        let pager = channel(
            ChannelKind::Pagerduty,
            &[("routing_key", "R")],
            &["missing", "errored", "reporting"],
            &["prod"],
        );
        assert!(pager.wants(&event(EventKind::Missing, Status::Healthy, &["prod", "db"])));
        assert!(!pager.wants(&event(EventKind::Missing, Status::Healthy, &["staging"])));
        assert!(!pager.wants(&event(EventKind::Missing, Status::Healthy, &[])));
        assert!(pager.wants(&event(EventKind::Reporting, Status::Failed, &["prod"])));
        assert!(pager.wants(&event(EventKind::Reporting, Status::Errored, &["prod"])));
        assert!(
            !pager.wants(&event(EventKind::Reporting, Status::Pending, &["prod"])),
            "a first check-in is no recovery"
        );
        assert!(!pager.wants(&event(EventKind::Paused, Status::Healthy, &["prod"])));
        assert!(
            pager.wants(&event(EventKind::Paused, Status::Failed, &["prod"])),
            "pausing a failed snitch resolves its page"
        );
        let chat = channel(
            ChannelKind::Slack,
            &[("url", "https://hooks.slack.test/x")],
            &["missing", "reporting"],
            &[],
        );
        assert!(
            !chat.wants(&event(EventKind::Paused, Status::Failed, &[])),
            "a chat channel gets pauses only when it asks"
        );
        let triggers_only = channel(
            ChannelKind::Opsgenie,
            &[("api_key", "k")],
            &["missing"],
            &[],
        );
        assert!(!triggers_only.wants(&event(EventKind::Paused, Status::Failed, &[])));
        let everything = channel(ChannelKind::Ntfy, &[("topic", "t")], &["paused"], &[]);
        assert!(everything.wants(&event(EventKind::Paused, Status::Healthy, &[])));
        assert!(!everything.wants(&event(EventKind::Missing, Status::Healthy, &[])));
    }

    /// An e-mail channel becomes an e-mail delivery to its own addresses; a vendor channel
    /// a native one with its settings and key; the team's e-mail and the webhooks keep
    /// their places (and ids) before them.
    #[test]
    fn deliveries_of_an_event_go_to_each_wanting_channel_after_hooks_and_team() {
        use crate::outbox::{deliveries_for, Channel, Targets};
        let mut case = crate::types::Case::new(CaseId::parse("acme").expect("valid"));
        case.members = vec![EmailAddress::parse("ops@acme.test").expect("valid")];
        let mail = channel(
            ChannelKind::Email,
            &[("to", "cto@acme.test")],
            &["missing"],
            &[],
        );
        let slack = channel(
            ChannelKind::Slack,
            &[("url", "https://hooks.slack.test/services/T/B/X")],
            &["missing"],
            &["prod"],
        );
        let targets = Targets {
            hooks: Vec::new(),
            channels: vec![mail, slack.clone()],
        };
        let missing = event(EventKind::Missing, Status::Healthy, &["prod"]);
        let sent = deliveries_for(&missing, &case, &targets);
        let ids: Vec<&str> = sent.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "tok00000000000000001-2-1",
                "tok00000000000000001-2-2",
                "tok00000000000000001-2-3"
            ]
        );
        assert!(
            matches!(&sent[0].channel, Channel::Email { to } if to[0].as_str() == "ops@acme.test")
        );
        assert!(
            matches!(&sent[1].channel, Channel::Email { to } if to[0].as_str() == "cto@acme.test")
        );
        assert!(
            matches!(&sent[2].channel, Channel::Native { settings, .. } if *settings == slack.settings)
        );
        assert_eq!(
            sent[2].destination().as_deref(),
            Some("hooks.slack.test:443")
        );
        let untagged = event(EventKind::Missing, Status::Healthy, &[]);
        assert_eq!(deliveries_for(&untagged, &case, &targets).len(), 2);
    }

    #[test]
    fn event_filters_take_short_and_full_names() {
        let f = EventFilter::parse(&["missing", "snitch.paused"]).expect("valid");
        assert!(f.contains(EventKind::Missing) && f.contains(EventKind::Paused));
        assert!(!f.contains(EventKind::Reporting));
        assert_eq!(f.names(), ["missing", "paused"]);
        assert!(EventFilter::parse::<&str>(&[]).is_err());
        assert!(EventFilter::parse(&["exploded"]).is_err());
        assert_eq!(
            EventFilter::DEFAULT.names(),
            ["missing", "errored", "reporting"]
        );
    }
}
