//! The outbox: every event becomes deliveries (one per webhook, one e-mail), stored with
//! the state change that emitted it and retried until delivered or given up
//! (docs/rules.md#delivery).

use chrono::Duration;

use crate::calendar::Timestamp;
pub use crate::channel::ChannelKind;
use crate::channel::{ChannelConfig, ChannelKey, ChannelSettings};
use crate::snitch::Event;
use crate::types::{Case, CaseId, EmailAddress};
use crate::webhook::{Webhook, WebhookSecret, WebhookUrl};

/// Where a delivery goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Channel {
    /// A POST of the event to a hook of the case.
    Webhook {
        /// The hook's id.
        hook_id: String,
        /// Where to POST.
        url: WebhookUrl,
        /// The secret that signs the payload, if the hook has one.
        secret: Option<WebhookSecret>,
    },
    /// An e-mail alert.
    Email {
        /// The recipients.
        to: Vec<EmailAddress>,
    },
    /// A message through a vendor's API (Slack, PagerDuty, …), with the channel's
    /// settings as they were when the event was emitted.
    Native {
        /// The channel's id.
        channel_id: String,
        /// Its kind and settings.
        settings: ChannelSettings,
        /// The key of the identifiers it sends instead of the token.
        key: ChannelKey,
    },
}

impl Channel {
    /// The channel's kind as text: `webhook`, `email`, `slack`, ….
    pub fn kind(&self) -> &'static str {
        self.channel_kind().as_str()
    }

    /// The channel's kind.
    pub fn channel_kind(&self) -> ChannelKind {
        match self {
            Channel::Webhook { .. } => ChannelKind::Webhook,
            Channel::Email { .. } => ChannelKind::Email,
            Channel::Native { settings, .. } => settings.kind(),
        }
    }
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeliveryState {
    /// Waiting for its (next) attempt at `next_attempt_at`.
    Pending,
    /// Received by its target.
    Delivered,
    /// Given up after the retry window; recorded, never tried again.
    Failed,
}

impl DeliveryState {
    /// The state as text: `pending`, `delivered` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Delivered => "delivered",
            DeliveryState::Failed => "failed",
        }
    }
}

/// How the detail of an attempt that made no request begins: its channel was held after
/// its vendor's 429 (see [`crate::NotifyError::held`]).
pub const HELD_PREFIX: &str = "held: ";

/// One try at a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// When the attempt started.
    pub at: Timestamp,
    /// Whether the receiver took it.
    pub ok: bool,
    /// What the receiver said: `HTTP 200`, an SMTP reply, or the error.
    pub detail: String,
    /// How long the attempt took, in milliseconds.
    pub duration_ms: u64,
}

impl Attempt {
    /// Whether a request went out (it was not failed at once by a held channel).
    pub fn made_a_request(&self) -> bool {
        !self.detail.starts_with(HELD_PREFIX)
    }
}

/// One event to send through one channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// `<event id>-<n>`: unique.
    pub id: String,
    /// The event to send (as it was when emitted).
    pub event: Event,
    /// Where it goes.
    pub channel: Channel,
    /// Where it stands.
    pub state: DeliveryState,
    /// When it may next be tried; `None` once delivered or failed. While a dispatcher
    /// holds it, this is the end of that dispatcher's lease.
    pub next_attempt_at: Option<Timestamp>,
    /// Every attempt so far, oldest first.
    pub attempts: Vec<Attempt>,
}

impl Delivery {
    /// The case whose event this is.
    pub fn case_id(&self) -> &CaseId {
        &self.event.case_id
    }

    /// Where an HTTP delivery goes (`host:port`, see [`WebhookUrl::destination`]);
    /// `None` for e-mail alone, which goes through the one SMTP relay (a vendor channel's
    /// endpoint is a validated URL, or the vendor's own when none is given; the stores'
    /// claims tell the HTTP budget from the e-mail one by it).
    pub fn destination(&self) -> Option<String> {
        match &self.channel {
            Channel::Webhook { url, .. } => Some(url.destination()),
            Channel::Email { .. } => None,
            Channel::Native { settings, .. } => settings.endpoint().map(|u| u.destination()),
        }
    }
}

/// What one [`crate::Storage::claim_deliveries`] may take, so that deliveries are
/// scheduled fairly (docs/rules.md#delivery-isolation): a dispatcher passes
/// what it has in flight, and the claim never takes more than fits under each cap.
///
/// A due pending delivery is claimed when it passes three rounds, each over the due
/// deliveries that passed the round before, earliest first (by `next_attempt_at`, then
/// by order of storing):
/// 1. it is among the first `per_case_channel − in flight` of its (case, channel kind);
/// 2. an HTTP delivery (a webhook or a vendor channel) is among the first
///    `per_destination − in flight` of its destination ([`Delivery::destination`]);
///    e-mails have no destination and pass;
/// 3. it is among the first `webhooks` (every HTTP kind) or `emails` of its budget.
///
/// So a case with thousands of due deliveries takes at most its cap and never hides
/// another case's deliveries from the claim; a key at its cap is skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimLimits {
    /// Most HTTP deliveries (webhooks and vendor channels) to take (the dispatcher's
    /// free HTTP slots).
    pub webhooks: usize,
    /// Most e-mail deliveries to take (the dispatcher's free SMTP slots).
    pub emails: usize,
    /// Most deliveries of one (case, channel kind) in flight at once.
    pub per_case_channel: usize,
    /// Most webhook deliveries to one destination (`host:port`) in flight at once.
    pub per_destination: usize,
    /// Deliveries in flight by (case, channel kind); keys not listed have none.
    pub case_channels_in_flight: Vec<(CaseId, ChannelKind, usize)>,
    /// Webhook deliveries in flight by destination; destinations not listed have none.
    pub destinations_in_flight: Vec<(String, usize)>,
}

impl ClaimLimits {
    /// Up to `webhooks` webhooks and `emails` e-mails, at most `per_case_channel` of one
    /// (case, channel kind) and `per_destination` to one destination in flight, with
    /// nothing in flight yet (set the `*_in_flight` fields to add what is).
    pub fn new(
        webhooks: usize,
        emails: usize,
        per_case_channel: usize,
        per_destination: usize,
    ) -> Self {
        ClaimLimits {
            webhooks,
            emails,
            per_case_channel,
            per_destination,
            case_channels_in_flight: Vec::new(),
            destinations_in_flight: Vec::new(),
        }
    }

    /// Up to `limit` deliveries of each kind, with no other cap: what a claim without
    /// fairness rules would take.
    pub fn at_most(limit: usize) -> Self {
        ClaimLimits {
            webhooks: limit,
            emails: limit,
            per_case_channel: usize::MAX,
            per_destination: usize::MAX,
            case_channels_in_flight: Vec::new(),
            destinations_in_flight: Vec::new(),
        }
    }

    /// How many more of this (case, channel kind) may be taken.
    pub fn case_channel_room(&self, case: &CaseId, kind: ChannelKind) -> usize {
        let busy = self
            .case_channels_in_flight
            .iter()
            .filter(|(c, k, _)| c == case && *k == kind)
            .map(|(_, _, n)| *n)
            .sum();
        self.per_case_channel.saturating_sub(busy)
    }

    /// How many more webhooks to this destination may be taken.
    pub fn destination_room(&self, destination: &str) -> usize {
        let busy = self
            .destinations_in_flight
            .iter()
            .filter(|(d, _)| d == destination)
            .map(|(_, n)| *n)
            .sum();
        self.per_destination.saturating_sub(busy)
    }

    /// How many due deliveries of each budget a claim that reads the earliest first
    /// ranks: `configured`, but never fewer than a budget (a window that cannot fill
    /// one settles a claim only when it holds every due delivery).
    pub fn window(&self, configured: usize) -> usize {
        configured.max(self.webhooks).max(self.emails).max(1)
    }

    /// How many more of this channel kind may be taken.
    pub fn kind_room(&self, kind: ChannelKind) -> usize {
        if kind.is_http() {
            self.webhooks
        } else {
            self.emails
        }
    }

    /// The three rounds above, over `due` (due pending deliveries, earliest first by
    /// `next_attempt_at` then order of storing): the indices of those to claim, in order.
    /// Stores that hold their outbox in memory use it as is.
    pub fn select(&self, due: &[&Delivery]) -> Vec<usize> {
        use std::collections::HashMap;
        let mut per_key: HashMap<(&CaseId, ChannelKind), usize> = HashMap::new();
        let first: Vec<usize> = (0..due.len())
            .filter(|&i| {
                let d = due[i];
                let kind = d.channel.channel_kind();
                let taken = per_key.entry((d.case_id(), kind)).or_insert(0);
                *taken += 1;
                *taken <= self.case_channel_room(d.case_id(), kind)
            })
            .collect();
        let mut per_destination: HashMap<String, usize> = HashMap::new();
        let second: Vec<usize> = first
            .into_iter()
            .filter(|&i| match due[i].destination() {
                None => true,
                Some(dest) => {
                    let room = self.destination_room(&dest);
                    let taken = per_destination.entry(dest).or_insert(0);
                    *taken += 1;
                    *taken <= room
                }
            })
            .collect();
        // The budgets are HTTP and e-mail: every kind but e-mail shares the first.
        let mut per_budget: HashMap<bool, usize> = HashMap::new();
        second
            .into_iter()
            .filter(|&i| {
                let kind = due[i].channel.channel_kind();
                let taken = per_budget.entry(kind.is_http()).or_insert(0);
                *taken += 1;
                *taken <= self.kind_room(kind)
            })
            .collect()
    }
}

/// How a finished attempt leaves the delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptResult {
    /// Received: the delivery is done.
    Delivered,
    /// Failed; try again at this instant.
    RetryAt(Timestamp),
    /// Failed for good (permanent, or the retry window closed).
    GaveUp,
}

/// Where a case's alerts go: its webhooks and its channels, read together before a
/// change with events is saved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Targets {
    /// The case's webhooks: every event goes to each.
    pub hooks: Vec<Webhook>,
    /// The case's channels: each takes the events it wants ([`ChannelConfig::wants`]).
    pub channels: Vec<ChannelConfig>,
}

/// The deliveries of an event for a case with these targets: every event goes to every
/// hook and to each channel that wants it; all but `snitch.paused` also go by e-mail to
/// the snitch's `alert_email`, or to the team when that is empty.
pub fn deliveries_for(event: &Event, case: &Case, targets: &Targets) -> Vec<Delivery> {
    let mut channels: Vec<Channel> = targets
        .hooks
        .iter()
        .map(|h| Channel::Webhook {
            hook_id: h.id.clone(),
            url: h.url.clone(),
            secret: h.secret.clone(),
        })
        .collect();
    if event.kind.alerts_by_email() {
        let to = crate::notifier::alert_recipients(case, event).to_vec();
        if !to.is_empty() {
            channels.push(Channel::Email { to });
        }
    }
    for c in targets.channels.iter().filter(|c| c.wants(event)) {
        channels.push(match c.kind() {
            ChannelKind::Email => Channel::Email {
                to: c.settings.recipients(),
            },
            _ => Channel::Native {
                channel_id: c.id.clone(),
                settings: c.settings.clone(),
                key: c.key.clone(),
            },
        });
    }
    channels
        .into_iter()
        .enumerate()
        .map(|(n, channel)| Delivery {
            id: format!("{}-{}", event.id, n + 1),
            event: event.clone(),
            channel,
            state: DeliveryState::Pending,
            next_attempt_at: Some(event.at),
            attempts: Vec::new(),
        })
        .collect()
}

/// Exponential backoff with jitter: about `first_delay`, doubling, capped at `max_delay`,
/// until `give_up_after` has passed since the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// About how long after the first failure the second attempt comes.
    pub first_delay: Duration,
    /// The longest wait between two attempts (a receiver's own `Retry-After` included).
    pub max_delay: Duration,
    /// How long after the event attempts stop: the delivery is given up.
    pub give_up_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            first_delay: Duration::minutes(1),
            max_delay: Duration::hours(1),
            give_up_after: Duration::hours(24),
        }
    }
}

impl RetryPolicy {
    /// A policy with these three durations (see the fields).
    pub fn new(first_delay: Duration, max_delay: Duration, give_up_after: Duration) -> Self {
        RetryPolicy {
            first_delay,
            max_delay,
            give_up_after,
        }
    }

    /// What follows a failed attempt number `failures` (1 for the first) at `now`, for an
    /// event of `event_at`. `jitter` in `[0, 1)` spreads retries by up to ±20 %.
    pub fn after_failure(
        &self,
        event_at: Timestamp,
        failures: u32,
        now: Timestamp,
        jitter: f64,
    ) -> AttemptResult {
        let doubling = 1i32 << failures.saturating_sub(1).min(20);
        let base = (self.first_delay * doubling).min(self.max_delay);
        let spread = (jitter.clamp(0.0, 1.0) - 0.5) * 0.4;
        let delay_ms = base.num_milliseconds() as f64 * (1.0 + spread);
        let next = now + Duration::milliseconds(delay_ms.max(0.0) as i64);
        if next > event_at + self.give_up_after {
            AttemptResult::GaveUp
        } else {
            AttemptResult::RetryAt(next)
        }
    }
}

impl RetryPolicy {
    /// What follows a failure whose receiver asked to be retried `after` from `now`: then
    /// (at most [`RetryPolicy::max_delay`] away), unless the retry window has closed.
    pub fn after_asked_wait(
        &self,
        event_at: Timestamp,
        now: Timestamp,
        after: Duration,
    ) -> AttemptResult {
        let next = now + after.clamp(Duration::zero(), self.max_delay);
        if next > event_at + self.give_up_after {
            AttemptResult::GaveUp
        } else {
            AttemptResult::RetryAt(next)
        }
    }

    /// What follows an attempt that made no request (its channel held for `after` more)
    /// of a delivery whose `attempts` came before: as [`RetryPolicy::after_asked_wait`],
    /// except that a delivery no request has reached is never given up. It is tried once
    /// more when the hold ends, which is never more than the longest delay away
    /// (docs/rules.md#delivery: never zero times short of being given up).
    pub fn after_hold(
        &self,
        event_at: Timestamp,
        now: Timestamp,
        after: Duration,
        attempts: &[Attempt],
    ) -> AttemptResult {
        match self.after_asked_wait(event_at, now, after) {
            AttemptResult::GaveUp if !attempts.iter().any(Attempt::made_a_request) => {
                AttemptResult::RetryAt(now + after.clamp(Duration::zero(), self.max_delay))
            }
            result => result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;

    fn t(s: &str) -> Timestamp {
        DateTime::parse_from_rfc3339(s).expect("valid").to_utc()
    }

    #[test]
    fn a_claims_window_holds_at_least_a_budget() {
        let limits = ClaimLimits::new(16, 4, 8, 16);
        assert_eq!(limits.window(64), 64);
        assert_eq!(limits.window(5), 16, "the HTTP budget");
        assert_eq!(
            ClaimLimits::new(2, 40, 8, 16).window(5),
            40,
            "the e-mail budget"
        );
        assert_eq!(ClaimLimits::new(0, 0, 8, 16).window(0), 1);
    }

    #[test]
    fn backoff_doubles_from_a_minute_up_to_an_hour_then_gives_up_after_a_day() {
        let p = RetryPolicy::default();
        let event = t("2026-11-22T00:00:00Z");
        let mid = 0.5; // no jitter
        let delays: Vec<i64> = (1..=9)
            .map(|n| match p.after_failure(event, n, event, mid) {
                AttemptResult::RetryAt(at) => (at - event).num_minutes(),
                other => panic!("attempt {n}: {other:?}"),
            })
            .collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(
            p.after_failure(event, 30, t("2026-11-22T23:30:00Z"), mid),
            AttemptResult::GaveUp
        );
    }

    /// A receiver's own wait (a vendor's `Retry-After`) replaces the backoff, capped by
    /// the longest delay, and the retry window still closes.
    #[test]
    fn a_receivers_asked_wait_is_kept_within_the_window() {
        let p = RetryPolicy::default();
        let event = t("2026-11-22T00:00:00Z");
        assert_eq!(
            p.after_asked_wait(event, event, Duration::seconds(2)),
            AttemptResult::RetryAt(event + Duration::seconds(2))
        );
        assert_eq!(
            p.after_asked_wait(event, event, Duration::days(3)),
            AttemptResult::RetryAt(event + Duration::hours(1))
        );
        assert_eq!(
            p.after_asked_wait(event, t("2026-11-22T23:59:59Z"), Duration::seconds(2)),
            AttemptResult::GaveUp
        );
    }

    /// A held channel fails an attempt without a request: that alone never gives the
    /// delivery up; once a request went out, the window closes as usual.
    #[test]
    fn a_delivery_no_request_reached_is_never_given_up() {
        let p = RetryPolicy::default();
        let event = t("2026-11-22T00:00:00Z");
        let late = t("2026-11-22T23:59:59Z");
        let held = Attempt {
            at: late,
            ok: false,
            detail: format!("{HELD_PREFIX}ntfy asked to wait 7200 s more"),
            duration_ms: 0,
        };
        let sent = Attempt {
            detail: "ntfy answered HTTP 429".into(),
            ..held.clone()
        };
        assert!(!held.made_a_request() && sent.made_a_request());
        assert_eq!(
            p.after_hold(event, late, Duration::days(1), std::slice::from_ref(&held)),
            AttemptResult::RetryAt(late + Duration::hours(1))
        );
        assert_eq!(
            p.after_hold(event, late, Duration::seconds(5), &[]),
            AttemptResult::RetryAt(late + Duration::seconds(5))
        );
        assert_eq!(
            p.after_hold(event, late, Duration::seconds(5), &[sent, held]),
            AttemptResult::GaveUp
        );
        assert_eq!(
            p.after_hold(event, event, Duration::seconds(5), &[]),
            AttemptResult::RetryAt(event + Duration::seconds(5))
        );
    }

    #[test]
    fn jitter_stays_within_twenty_percent() {
        let p = RetryPolicy::default();
        let event = t("2026-11-22T00:00:00Z");
        for jitter in [0.0, 0.25, 0.999] {
            let AttemptResult::RetryAt(at) = p.after_failure(event, 1, event, jitter) else {
                panic!("retries");
            };
            let secs = (at - event).num_seconds();
            assert!((48..=72).contains(&secs), "{jitter}: {secs}");
        }
    }
}
