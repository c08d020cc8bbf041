//! The notifier of vendor channels: renders a delivery's event for its channel's kind
//! ([`super::render`]), sends the vendor's calls over the same guarded client as
//! webhooks, and reads the answers.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use snitch_core::clock::monotonic_now;
use snitch_core::{Clock, SystemClock};

use async_trait::async_trait;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use reqwest::{Client, Method};
use snitch_core::{
    Channel, ChannelConfig, ChannelKind, ChannelSettings, Delivery, Notifier, NotifyError,
};

use super::render::{self, Message, VendorBody, VendorRequest};
use crate::loggable_id;
use crate::webhook::notifier::{describe_error, guarded_client, Target};
use crate::webhook::WebhookOptions;

/// The most of a vendor's answer read: enough for its error text.
const ANSWER_READ_MAX: usize = 16 * 1024;

/// Sends deliveries of vendor channels (Slack, PagerDuty, …).
///
/// A channel a vendor rate-limited (429) is held until the time the vendor gave, never
/// longer than the retry policy's longest delay ([`ChannelNotifier::with_longest_hold`]):
/// its deliveries fail at once without a request, to be retried then; other channels go
/// on. A test notification neither waits for a hold nor sets one, and answers within its
/// own deadline ([`ChannelNotifier::with_test_deadline`]).
/// For paging kinds, an event older than one already delivered for the same snitch is
/// not sent (a late trigger must not reopen a resolved page).
pub struct ChannelNotifier {
    client: Client,
    options: WebhookOptions,
    dashboard: Option<String>,
    held_until: Mutex<HashMap<String, Instant>>,
    longest_hold: Duration,
    test_deadline: Duration,
    newest_sent: Mutex<HashMap<(String, String), u64>>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for ChannelNotifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelNotifier")
            .field("options", &self.options)
            .field("dashboard", &self.dashboard)
            .finish_non_exhaustive()
    }
}

impl ChannelNotifier {
    /// A notifier with the webhooks' options (timeouts, the private-address guard).
    pub fn new(options: WebhookOptions) -> Result<Self, reqwest::Error> {
        Ok(ChannelNotifier {
            client: guarded_client(&options)?,
            options,
            dashboard: None,
            held_until: Mutex::default(),
            // Unless told otherwise: the default retry policy's longest delay.
            longest_hold: snitch_core::RetryPolicy::default()
                .max_delay
                .to_std()
                .unwrap_or_default(),
            test_deadline: super::CHANNEL_TEST_DEADLINE,
            newest_sent: Mutex::default(),
            clock: Arc::new(SystemClock),
        })
    }

    /// Messages link to the dashboard under `base_url` (the server's public URL).
    pub fn with_dashboard(mut self, base_url: Option<String>) -> Self {
        self.dashboard = base_url.map(|b| b.trim_end_matches('/').to_owned());
        self
    }

    /// A vendor's 429 holds its channel at most this long (its `Retry-After` may ask for
    /// a day): the dispatcher's longest delay between retries, so a held delivery is never
    /// retried into a hold that has not ended.
    pub fn with_longest_hold(mut self, longest: Duration) -> Self {
        self.longest_hold = longest;
        self
    }

    /// A test notification whose vendor has not answered within `deadline` fails as
    /// transient (`no answer within …`): shorter than the server's request timeout, so the
    /// person who pressed the button gets the result, not a 408.
    pub fn with_test_deadline(mut self, deadline: Duration) -> Self {
        self.test_deadline = deadline;
        self
    }

    /// Test notifications are dated by `clock`.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sends a test notification through `channel` now, named `name`: what the vendor
    /// answered, or why it failed.
    pub async fn test(&self, channel: &ChannelConfig, name: &str) -> Result<String, NotifyError> {
        let message = render::test_message(
            name,
            &channel.id,
            &channel.key,
            self.clock.now(),
            self.dashboard.as_deref(),
        );
        // Nobody's alerts wait on a test: it ignores the channel's hold and sets none.
        let sent = self.send_requests(&channel.settings, &message);
        match tokio::time::timeout(self.test_deadline, sent).await {
            Ok(answered) => answered,
            Err(_) => Err(NotifyError::new(format!(
                "no answer within {} s",
                self.test_deadline.as_secs_f64()
            ))),
        }
    }

    async fn send_message(
        &self,
        channel_id: &str,
        settings: &ChannelSettings,
        message: &Message,
    ) -> Result<String, NotifyError> {
        if let Some(wait) = self.held(channel_id) {
            return Err(NotifyError::held(
                format_args!(
                    "{} asked to wait {} s more",
                    settings.kind(),
                    wait.as_secs()
                ),
                chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX),
            ));
        }
        self.send_requests(settings, message)
            .await
            .inspect_err(|e| {
                if let Some(wait) = e.retry_after.and_then(|w| w.to_std().ok()) {
                    self.hold(channel_id, wait.min(self.longest_hold));
                }
            })
    }

    /// Sends the vendor's calls for `message`, in order: the last one's answer.
    async fn send_requests(
        &self,
        settings: &ChannelSettings,
        message: &Message,
    ) -> Result<String, NotifyError> {
        let mut answered = String::new();
        for request in render::requests(settings, message)? {
            answered = self.call(settings.kind(), request).await?;
        }
        Ok(answered)
    }

    async fn call(&self, kind: ChannelKind, request: VendorRequest) -> Result<String, NotifyError> {
        let target = Target::parse(&request.url)?;
        if !self.options.allow_private {
            target.check_literal_host()?;
        }
        let method = if request.method == "PUT" {
            Method::PUT
        } else {
            Method::POST
        };
        let mut builder = self.client.request(method, target.url);
        if let Some((user, password)) = target.credentials {
            builder = builder.basic_auth(user, password);
        }
        for (name, value) in request.headers {
            builder = builder.header(name, value);
        }
        builder = match request.body {
            VendorBody::Json(value) => builder
                .header(CONTENT_TYPE, "application/json")
                .body(value.to_string()),
            VendorBody::Form(fields) => builder
                .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                .body(serde_urlencoded::to_string(&fields).unwrap_or_default()),
        };
        let mut response = builder
            .send()
            .await
            .map_err(|e| describe_error(&e, &self.options))?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut body = Vec::new();
        while body.len() < ANSWER_READ_MAX {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                // The status is what matters; a cut or broken body only loses the reason.
                Ok(None) | Err(_) => break,
            }
        }
        body.truncate(ANSWER_READ_MAX);
        render::interpret(
            kind,
            status,
            retry_after.as_deref(),
            &String::from_utf8_lossy(&body),
        )
    }

    fn held(&self, channel_id: &str) -> Option<Duration> {
        let mut held = self
            .held_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let until = *held.get(channel_id)?;
        let now = monotonic_now();
        if until <= now {
            held.remove(channel_id);
            return None;
        }
        Some(until - now)
    }

    fn hold(&self, channel_id: &str, wait: Duration) {
        let until = monotonic_now() + wait;
        let mut held = self
            .held_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let entry = held.entry(channel_id.to_owned()).or_insert(until);
        *entry = (*entry).max(until);
    }

    /// For paging kinds: whether a newer event of this snitch already went to this
    /// channel (then this older one would reopen or re-trigger what that one settled).
    fn superseded(&self, channel_id: &str, incident: &str, number: u64) -> bool {
        let newest = self
            .newest_sent
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        newest
            .get(&(channel_id.to_owned(), incident.to_owned()))
            .is_some_and(|&n| n > number)
    }

    fn sent(&self, channel_id: &str, incident: &str, number: u64) {
        let mut newest = self
            .newest_sent
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let entry = newest
            .entry((channel_id.to_owned(), incident.to_owned()))
            .or_insert(number);
        *entry = (*entry).max(number);
    }
}

/// The test button of the API and the dashboard (`snitch-http`) sends through it.
#[async_trait]
impl snitch_core::ChannelTester for ChannelNotifier {
    async fn test(&self, channel: &ChannelConfig, name: &str) -> Result<String, NotifyError> {
        ChannelNotifier::test(self, channel, name).await
    }
}

#[async_trait]
impl Notifier for ChannelNotifier {
    async fn send(&self, delivery: &Delivery) -> Result<String, NotifyError> {
        let Channel::Native {
            channel_id,
            settings,
            key,
        } = &delivery.channel
        else {
            return Err(NotifyError::permanent("not a channel delivery"));
        };
        let message = render::message_of(
            &delivery.event,
            channel_id,
            key,
            &delivery.id,
            self.dashboard.as_deref(),
        );
        let number = delivery.event.number();
        let paging = settings.kind().is_incident();
        if paging && self.superseded(channel_id, &message.incident, number) {
            return Ok("not sent: a later event of this snitch was delivered first".to_owned());
        }
        let sent = self.send_message(channel_id, settings, &message).await;
        match &sent {
            Ok(_) if paging => self.sent(channel_id, &message.incident, number),
            Ok(_) => {}
            Err(e) => tracing::debug!(
                delivery = %loggable_id(&delivery.id),
                kind = settings.kind().as_str(),
                detail = %e.detail,
                permanent = e.permanent,
                "channel attempt failed"
            ),
        }
        sent
    }
}
