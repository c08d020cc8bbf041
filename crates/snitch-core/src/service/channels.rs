//! The case's channels: added, listed, changed and removed with the same validation from
//! the API, the dashboard and the configuration file (docs/rules.md#channels).

use super::*;
use crate::channel::{
    parse_channel_name, ChannelConfig, ChannelKey, ChannelKind, ChannelSettings, EventFilter,
    CHANNELS_PER_CASE_MAX,
};

/// A channel as a request gives it: every field optional but `kind` when adding; on a
/// change, what is not given stays (settings one by one, so a masked secret need not be
/// sent back).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelInput {
    /// The kind (`slack`, …); on a change it must be the channel's own, if given.
    pub kind: Option<String>,
    /// A name for people.
    pub name: Option<String>,
    /// The kind's settings, by name.
    pub settings: Vec<(String, String)>,
    /// The events wanted (`missing`, `snitch.paused`, …).
    pub events: Option<Vec<String>>,
    /// Only snitches with one of these tags.
    pub tags: Option<Vec<String>>,
}

/// A channel as listed: a registered channel, or one of the case's signed webhooks (kind
/// `webhook`, which takes every event of every snitch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListedChannel {
    /// A channel of any other kind.
    Channel(ChannelConfig),
    /// A webhook of `/v1/webhooks`.
    Webhook(Webhook),
}

impl ListedChannel {
    /// Its id.
    pub fn id(&self) -> &str {
        match self {
            ListedChannel::Channel(c) => &c.id,
            ListedChannel::Webhook(h) => &h.id,
        }
    }

    /// When it was added.
    pub fn created_at(&self) -> Timestamp {
        match self {
            ListedChannel::Channel(c) => c.created_at,
            ListedChannel::Webhook(h) => h.created_at,
        }
    }
}

impl SnitchService {
    /// The case's channels and webhooks, oldest first.
    pub async fn channels(&self, case: &Case) -> Result<Vec<ListedChannel>, ServiceError> {
        ensure_active(case)?;
        let mut all: Vec<ListedChannel> = self
            .storage
            .webhooks(&case.id)
            .await?
            .into_iter()
            .map(ListedChannel::Webhook)
            .chain(
                self.storage
                    .channels(&case.id)
                    .await?
                    .into_iter()
                    .map(ListedChannel::Channel),
            )
            .collect();
        all.sort_by_key(ListedChannel::created_at);
        Ok(all)
    }

    /// One channel (or webhook) of the case; another case's is not found.
    pub async fn channel(&self, case: &Case, id: &str) -> Result<ListedChannel, ServiceError> {
        self.channels(case)
            .await?
            .into_iter()
            .find(|c| c.id() == id)
            .ok_or(ServiceError::NotFound)
    }

    /// Adds a channel; kind `webhook` registers a signed webhook (as `/v1/webhooks` does),
    /// which takes no `events` or `tags`.
    pub async fn create_channel(
        &self,
        case: &Case,
        input: &ChannelInput,
    ) -> Result<ListedChannel, ServiceError> {
        ensure_active(case)?;
        let kind = parse_kind(input.kind.as_deref())?;
        if kind == ChannelKind::Webhook {
            refuse_filters_on_webhooks(input)?;
            let setting = |name: &str| {
                input
                    .settings
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.as_str())
            };
            let unknown: Vec<&str> = input
                .settings
                .iter()
                .map(|(n, _)| n.as_str())
                .filter(|n| !matches!(*n, "url" | "secret"))
                .collect();
            if let Some(name) = unknown.first() {
                return Err(
                    Validations::single(*name, "is not a setting of webhook channels").into(),
                );
            }
            let hook = self
                .create_webhook(case, setting("url").unwrap_or(""), setting("secret"))
                .await?;
            return Ok(ListedChannel::Webhook(hook));
        }
        if self.storage.channels(&case.id).await?.len() >= CHANNELS_PER_CASE_MAX {
            return Err(Validations::single(
                "kind",
                format!("can't be added: a case has at most {CHANNELS_PER_CASE_MAX} channels"),
            )
            .into());
        }
        let mut problems = Validations::new();
        let settings = match ChannelSettings::parse(
            kind,
            input.settings.iter().map(|(n, v)| (n.as_str(), v.as_str())),
        ) {
            Ok(s) => Some(s),
            Err(v) => {
                problems.extend(v);
                None
            }
        };
        let name = problems
            .check(parse_channel_name(input.name.as_deref().unwrap_or("")))
            .flatten();
        let events = match &input.events {
            Some(raw) => problems.check(EventFilter::parse(raw)),
            None => Some(EventFilter::DEFAULT),
        };
        let tags = problems.check(Tags::parse(input.tags.as_deref().unwrap_or_default()));
        let (Some(settings), Some(events), Some(tags), true) =
            (settings, events, tags, problems.is_empty())
        else {
            return Err(problems.into());
        };
        let mut channel = ChannelConfig {
            id: self.tokens.new_token().to_string(),
            case_id: case.id.clone(),
            name,
            settings,
            events,
            tags,
            key: self.new_channel_key(),
            created_at: self.now(),
        };
        for _ in 0..TOKEN_ATTEMPTS {
            match self.storage.insert_channel(&channel).await {
                Ok(()) => return Ok(ListedChannel::Channel(channel)),
                Err(StorageError::DuplicateToken) => {
                    channel.id = self.tokens.new_token().to_string()
                }
                Err(other) => return Err(other.into()),
            }
        }
        Err(StorageError::DuplicateToken.into())
    }

    /// Changes a channel: what `input` gives replaces what it had (settings one by one).
    /// A webhook cannot be changed, only removed and added again.
    pub async fn update_channel(
        &self,
        case: &Case,
        id: &str,
        input: &ChannelInput,
    ) -> Result<ListedChannel, ServiceError> {
        let current = match self.channel(case, id).await? {
            ListedChannel::Channel(c) => c,
            ListedChannel::Webhook(_) => {
                return Err(Validations::single(
                    "kind",
                    "webhook channels can't be changed: remove the webhook and add it again",
                )
                .into())
            }
        };
        if let Some(kind) = &input.kind {
            if kind.trim() != current.kind().as_str() {
                return Err(Validations::single("kind", "can't be changed").into());
            }
        }
        let mut problems = Validations::new();
        let mut merged: Vec<(String, String)> = current
            .settings
            .iter()
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
            .collect();
        for (name, value) in &input.settings {
            merged.retain(|(n, _)| n != name);
            merged.push((name.clone(), value.clone()));
        }
        let settings = match ChannelSettings::parse(
            current.kind(),
            merged.iter().map(|(n, v)| (n.as_str(), v.as_str())),
        ) {
            Ok(s) => Some(s),
            Err(v) => {
                problems.extend(v);
                None
            }
        };
        let name = match &input.name {
            Some(raw) => problems.check(parse_channel_name(raw)),
            None => Some(current.name.clone()),
        };
        let events = match &input.events {
            Some(raw) => problems.check(EventFilter::parse(raw)),
            None => Some(current.events),
        };
        let tags = match &input.tags {
            Some(raw) => problems.check(Tags::parse(raw)),
            None => Some(current.tags.clone()),
        };
        let (Some(settings), Some(name), Some(events), Some(tags), true) =
            (settings, name, events, tags, problems.is_empty())
        else {
            return Err(problems.into());
        };
        let changed = ChannelConfig {
            name,
            settings,
            events,
            tags,
            ..current
        };
        if self.storage.update_channel(&changed).await? {
            Ok(ListedChannel::Channel(changed))
        } else {
            Err(ServiceError::NotFound)
        }
    }

    /// Removes a channel or webhook of the case; another case's is not found.
    pub async fn delete_channel(&self, case: &Case, id: &str) -> Result<(), ServiceError> {
        ensure_active(case)?;
        if Token::parse(id).is_err() {
            return Err(ServiceError::NotFound);
        }
        if self.storage.delete_channel(&case.id, id).await?
            || self.storage.delete_webhook(&case.id, id).await?
        {
            Ok(())
        } else {
            Err(ServiceError::NotFound)
        }
    }

    /// A new channel key: two tokens' worth of randomness (about 206 bits).
    fn new_channel_key(&self) -> ChannelKey {
        let raw = format!("{}{}", self.tokens.new_token(), self.tokens.new_token());
        ChannelKey::parse(&raw).unwrap_or_else(|_| unreachable!("tokens are [a-z0-9]{{20}}"))
    }
}

fn parse_kind(raw: Option<&str>) -> Result<ChannelKind, Validations> {
    let raw = raw.map(str::trim).unwrap_or("");
    if raw.is_empty() {
        return Err(Validations::single("kind", BLANK));
    }
    ChannelKind::parse(raw).ok_or_else(|| {
        let kinds: Vec<&str> = ChannelKind::ALL.iter().map(|k| k.as_str()).collect();
        Validations::single("kind", format!("must be one of {}", kinds.join(", ")))
    })
}

fn refuse_filters_on_webhooks(input: &ChannelInput) -> Result<(), Validations> {
    let mut problems = Validations::new();
    if input.events.is_some() {
        problems.push("events", "webhook channels take every event");
    }
    if input.tags.is_some() {
        problems.push("tags", "webhook channels take every snitch");
    }
    if input.name.as_deref().is_some_and(|n| !n.trim().is_empty()) {
        problems.push("name", "webhook channels have no name");
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}
