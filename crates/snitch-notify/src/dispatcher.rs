//! The dispatcher: claims due deliveries from the outbox, sends each through its channel's
//! notifier with bounded concurrency, records every attempt, and schedules retries.
//!
//! Each delivery runs in its own task. Scheduling is fair
//! (docs/rules.md#delivery-isolation): the dispatcher counts what it has in flight per
//! (case, channel kind) and per webhook destination (`host:port`), and each claim
//! ([`Storage::claim_deliveries`] with [`ClaimLimits`]) takes only what fits under those
//! caps, looking past a flooded case or destination to the others. Webhooks and e-mails
//! have separate budgets, so a case's dead hooks hold at most `per_case_channel` webhook
//! slots and never an e-mail slot; another case's alerts go out as soon as they are due.
//!
//! Claims are leases: a dispatcher that dies mid-delivery leaves its deliveries to be
//! claimed again when the lease ends (at least once; `Snitch-Event-Id` lets receivers drop
//! duplicates). A permanent failure ([`snitch_core::NotifyError::permanent`]) is given up at once.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use snitch_core::clock::monotonic_now;
use snitch_core::{
    Attempt, AttemptResult, CaseId, Channel, ChannelKind, ClaimLimits, Clock, Delivery, Notifier,
    RetryPolicy, Storage, StorageError,
};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use snitch_core::{DeliveryObserver, DeliveryOutcome};

/// Settings of a [`Dispatcher`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DispatcherOptions {
    /// The backoff of failed deliveries, and when they are given up.
    pub retry: RetryPolicy,
    /// Webhook deliveries in flight at once, in all.
    pub concurrency: usize,
    /// E-mail deliveries in flight at once: the SMTP relay's own budget.
    pub email_concurrency: usize,
    /// Deliveries of one case through one channel kind in flight at once.
    pub per_case_channel: usize,
    /// Webhook deliveries to one destination (`host:port`) in flight at once.
    pub per_destination: usize,
    /// How long a claimed delivery stays reserved; longer than any notifier's timeout.
    pub lease: std::time::Duration,
    /// The longest sleep between looks at the outbox when nothing wakes the dispatcher.
    pub poll: Duration,
}

/// How long the dispatcher gathers finished deliveries before it claims again while
/// others are still in flight (see `run`): short beside an alert's delay, long beside
/// sending one webhook to a local receiver.
const CLAIM_GATHER: Duration = Duration::from_millis(20);

impl Default for DispatcherOptions {
    fn default() -> Self {
        DispatcherOptions {
            retry: RetryPolicy::default(),
            // A dead hook holds its slot up to the 30 s timeout: 256 slots let 32 cases
            // with dead hooks (8 each) stall at once before a healthy one waits.
            concurrency: 256,
            // E-mails go to one relay, which usually limits connections per client.
            email_concurrency: 16,
            // Enough for a case's burst of alerts to its own hooks to go out in parallel.
            per_case_channel: 8,
            // Twice a case's share: several cases' hooks to one service (a chat or
            // paging provider) go out together, while a dead host holds at most 16.
            per_destination: 16,
            // Twice the notifiers' 30 s timeout: a live dispatcher always records its
            // attempt first; a dead one's deliveries go out at most a minute late.
            lease: std::time::Duration::from_secs(60),
            poll: Duration::from_secs(1),
        }
    }
}

impl DispatcherOptions {
    /// With the retry policy `retry`.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// With `n` webhook deliveries in flight at once, in all.
    pub fn with_concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// With `n` e-mail deliveries in flight at once.
    pub fn with_email_concurrency(mut self, n: usize) -> Self {
        self.email_concurrency = n;
        self
    }

    /// With `n` deliveries of one case through one channel kind in flight at once.
    pub fn with_per_case_channel(mut self, n: usize) -> Self {
        self.per_case_channel = n;
        self
    }

    /// With `n` webhook deliveries to one destination in flight at once.
    pub fn with_per_destination(mut self, n: usize) -> Self {
        self.per_destination = n;
        self
    }

    /// With claimed deliveries reserved for `lease`.
    pub fn with_lease(mut self, lease: std::time::Duration) -> Self {
        self.lease = lease;
        self
    }

    /// With at most `poll` between looks at the outbox.
    pub fn with_poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }
}

/// What this dispatcher has in flight, by the keys its caps apply to.
#[derive(Debug, Default)]
struct InFlight {
    by_case_channel: HashMap<(CaseId, ChannelKind), usize>,
    by_destination: HashMap<String, usize>,
}

/// One delivery counted in [`InFlight`] until dropped.
struct Counted {
    in_flight: Arc<Mutex<InFlight>>,
    case_channel: (CaseId, ChannelKind),
    destination: Option<String>,
}

impl Counted {
    fn new(in_flight: &Arc<Mutex<InFlight>>, delivery: &Delivery) -> Counted {
        let case_channel = (delivery.case_id().clone(), delivery.channel.channel_kind());
        let destination = delivery.destination();
        {
            let mut counts = in_flight.lock().unwrap_or_else(PoisonError::into_inner);
            *counts
                .by_case_channel
                .entry(case_channel.clone())
                .or_insert(0) += 1;
            if let Some(d) = &destination {
                *counts.by_destination.entry(d.clone()).or_insert(0) += 1;
            }
        }
        Counted {
            in_flight: in_flight.clone(),
            case_channel,
            destination,
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut counts = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = counts.by_case_channel.get_mut(&self.case_channel) {
            *n -= 1;
            if *n == 0 {
                counts.by_case_channel.remove(&self.case_channel);
            }
        }
        if let Some(d) = &self.destination {
            if let Some(n) = counts.by_destination.get_mut(d) {
                *n -= 1;
                if *n == 0 {
                    counts.by_destination.remove(d);
                }
            }
        }
    }
}

/// What a dispatcher built without a channel notifier does with a vendor channel's
/// delivery: fails it for good, with the reason in its attempt.
struct NoChannels;

#[async_trait::async_trait]
impl Notifier for NoChannels {
    async fn send(&self, _: &Delivery) -> Result<String, snitch_core::NotifyError> {
        Err(snitch_core::NotifyError::permanent(
            "this server sends no channel notifications (no channel notifier configured)",
        ))
    }
}

/// Sends the outbox.
pub struct Dispatcher {
    storage: Arc<dyn Storage>,
    clock: Arc<dyn Clock>,
    webhooks: Arc<dyn Notifier>,
    email: Arc<dyn Notifier>,
    channels: Arc<dyn Notifier>,
    options: DispatcherOptions,
    wake: Arc<Notify>,
    webhook_slots: Arc<Semaphore>,
    email_slots: Arc<Semaphore>,
    in_flight: Arc<Mutex<InFlight>>,
    metrics: Option<Arc<dyn DeliveryObserver>>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// A dispatcher claiming from `storage`, sending webhook deliveries through
    /// `webhooks` and e-mails through `email`.
    pub fn new(
        storage: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
        webhooks: Arc<dyn Notifier>,
        email: Arc<dyn Notifier>,
        options: DispatcherOptions,
    ) -> Self {
        Dispatcher {
            storage,
            clock,
            webhooks,
            email,
            channels: Arc::new(NoChannels),
            webhook_slots: Arc::new(Semaphore::new(options.concurrency.max(1))),
            email_slots: Arc::new(Semaphore::new(options.email_concurrency.max(1))),
            options,
            wake: Arc::new(Notify::new()),
            in_flight: Arc::default(),
            metrics: None,
        }
    }

    /// Sends deliveries through vendor channels (Slack, PagerDuty, …) with `channels`
    /// (e.g. [`crate::channels::ChannelNotifier`]). Without one, such a delivery
    /// fails at once, saying so.
    pub fn with_channels(mut self, channels: Arc<dyn Notifier>) -> Self {
        self.channels = channels;
        self
    }

    /// Tells `metrics` of every attempt (a server counts them as `snitch_deliveries_total`
    /// and `snitch_delivery_latency_seconds`).
    pub fn with_metrics(mut self, metrics: Arc<dyn DeliveryObserver>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// A handle that makes the dispatcher look at the outbox at once; give it to
    /// `SnitchService::with_events_hook`.
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    fn now(&self) -> snitch_core::Timestamp {
        snitch_core::clock::to_millis(self.clock.now())
    }

    /// What the next claim may take: the free slots of each kind, and the caps with what
    /// is in flight now.
    fn claim_limits(&self) -> ClaimLimits {
        let counts = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut limits = ClaimLimits::new(
            self.webhook_slots.available_permits(),
            self.email_slots.available_permits(),
            self.options.per_case_channel.max(1),
            self.options.per_destination.max(1),
        );
        limits.case_channels_in_flight = counts
            .by_case_channel
            .iter()
            .map(|((case, kind), n)| (case.clone(), *kind, *n))
            .collect();
        limits.destinations_in_flight = counts
            .by_destination
            .iter()
            .map(|(d, n)| (d.clone(), *n))
            .collect();
        limits
    }

    /// Claims what is due now and fits under the caps (as many as there are free slots of
    /// each kind), and starts sending each in its own task. Returns the tasks.
    pub async fn dispatch_due(self: &Arc<Self>) -> Result<Vec<JoinHandle<()>>, StorageError> {
        let limits = self.claim_limits();
        if limits.webhooks == 0 && limits.emails == 0 {
            return Ok(Vec::new());
        }
        let now = self.now();
        let claimed = self
            .storage
            .claim_deliveries(
                now,
                now + chrono::Duration::from_std(self.options.lease)
                    .unwrap_or(chrono::Duration::MAX),
                &limits,
            )
            .await?;
        let mut started = Vec::with_capacity(claimed.len());
        for delivery in claimed {
            let Some(slot) = self.slot(&delivery).await else {
                break;
            };
            // Counted before the next claim reads the counts.
            let counted = Counted::new(&self.in_flight, &delivery);
            let this = self.clone();
            started.push(tokio::spawn(async move {
                this.deliver(delivery).await;
                drop(counted);
                drop(slot);
                // A finished delivery may have freed the slot or cap others wait for.
                this.wake.notify_one();
            }));
        }
        Ok(started)
    }

    /// Whether no delivery is being sent: every slot of both kinds is free.
    fn nothing_in_flight(&self) -> bool {
        self.webhook_slots.available_permits() >= self.options.concurrency.max(1)
            && self.email_slots.available_permits() >= self.options.email_concurrency.max(1)
    }

    /// A slot of the delivery's kind; the claim took no more than were free.
    async fn slot(&self, delivery: &Delivery) -> Option<OwnedSemaphorePermit> {
        let slots = match delivery.channel {
            Channel::Webhook { .. } | Channel::Native { .. } => &self.webhook_slots,
            Channel::Email { .. } => &self.email_slots,
        };
        slots.clone().acquire_owned().await.ok()
    }

    /// Whether `delivery` opens a page (PagerDuty, Opsgenie) that a later event of the
    /// same snitch, already delivered through the same channel, settled: sent now, it
    /// would reopen a resolved page. Read from the store, so it holds across servers and
    /// restarts; a failed read sends (a doubled page beats a lost one).
    async fn superseded(&self, delivery: &Delivery) -> bool {
        let Channel::Native {
            channel_id,
            settings,
            ..
        } = &delivery.channel
        else {
            return false;
        };
        if !settings.kind().is_incident() {
            return false;
        }
        let number = delivery.event.number();
        let Ok(events) = self
            .storage
            .events(&delivery.event.token, snitch_core::snitch::EVENTS_KEPT)
            .await
        else {
            return false;
        };
        let newer: Vec<String> = events
            .into_iter()
            .filter(|e| e.number() > number)
            .map(|e| e.id)
            .collect();
        if newer.is_empty() {
            return false;
        }
        let Ok(deliveries) = self.storage.deliveries(&newer).await else {
            return false;
        };
        deliveries.iter().any(|d| {
            d.state == snitch_core::DeliveryState::Delivered
                && matches!(&d.channel, Channel::Native { channel_id: c, .. } if c == channel_id)
        })
    }

    /// Sends one delivery and records the attempt.
    async fn deliver(&self, delivery: Delivery) {
        let notifier = match delivery.channel {
            Channel::Webhook { .. } => &self.webhooks,
            Channel::Email { .. } => &self.email,
            Channel::Native { .. } => &self.channels,
        };
        let at = self.now();
        let started = monotonic_now();
        let sent = if self.superseded(&delivery).await {
            Ok("not sent: a later event of this snitch went through this channel first".into())
        } else {
            notifier.send(&delivery).await
        };
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (ok, permanent, held, detail, asked_wait) = match sent {
            Ok(detail) => (true, false, false, detail, None),
            Err(e) => (false, e.permanent, e.held, e.detail, e.retry_after),
        };
        let result = if ok {
            AttemptResult::Delivered
        } else if permanent {
            AttemptResult::GaveUp
        } else if held {
            self.options.retry.after_hold(
                delivery.event.at,
                self.now(),
                asked_wait.unwrap_or_else(chrono::Duration::zero),
                &delivery.attempts,
            )
        } else if let Some(wait) = asked_wait {
            self.options
                .retry
                .after_asked_wait(delivery.event.at, self.now(), wait)
        } else {
            let failures = u32::try_from(delivery.attempts.len() + 1).unwrap_or(u32::MAX);
            self.options.retry.after_failure(
                delivery.event.at,
                failures,
                self.now(),
                rand::random::<f64>(),
            )
        };
        let outcome = match result {
            AttemptResult::Delivered => DeliveryOutcome::Delivered,
            AttemptResult::GaveUp => DeliveryOutcome::Failed,
            AttemptResult::RetryAt(_) => DeliveryOutcome::Retry,
        };
        if let Some(metrics) = &self.metrics {
            // From the event to this delivery: the delay an owner sees.
            let latency = (outcome == DeliveryOutcome::Delivered).then(|| {
                (self.now() - delivery.event.at)
                    .to_std()
                    .unwrap_or_default()
            });
            metrics.delivery(delivery.channel.kind(), outcome, latency);
        }
        tracing::info!(
            delivery = %super::loggable_id(&delivery.id),
            event = %super::loggable_id(&delivery.event.id),
            channel = delivery.channel.kind(),
            outcome = outcome.as_str(),
            ok,
            permanent,
            %detail,
            duration_ms,
            "delivery attempt"
        );
        let attempt = Attempt {
            at,
            ok,
            detail,
            duration_ms,
        };
        if let Err(e) = self
            .storage
            .record_attempt(&delivery.id, &attempt, result)
            .await
        {
            // The lease runs out and the delivery is tried again: at least once.
            tracing::error!(
                delivery = %super::loggable_id(&delivery.id),
                error = %e,
                "cannot record an attempt"
            );
        }
    }

    /// Runs until `stop` completes, then waits for deliveries in flight.
    pub async fn run(self: Arc<Self>, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        loop {
            let claimed_at = self.now();
            if let Err(e) = self.dispatch_due().await {
                tracing::error!(error = %e, "cannot claim deliveries");
            }
            // The claim took all it could: what was due then and is still pending waits
            // for a slot or a cap, and a finished delivery (or a new event) wakes us.
            // Otherwise sleep until the next delivery is due. While deliveries are in
            // flight, their ends wake us (or `poll` does), so the store is not asked:
            // in a sweep's burst of alerts that lookup ran once per claim, hundreds of
            // times a second, beside the sweep's own saves.
            let sleep = if self.nothing_in_flight() {
                match self.storage.next_delivery_at().await {
                    Ok(Some(next)) if next > claimed_at => (next - self.now())
                        .to_std()
                        .unwrap_or(Duration::ZERO)
                        .min(self.options.poll),
                    _ => self.options.poll,
                }
            } else {
                self.options.poll
            };
            tokio::select! {
                () = &mut stop => break,
                () = self.wake.notified() => {
                    // Woken by a new event or a finished delivery: while deliveries are
                    // still in flight, let those that finish within CLAIM_GATHER free
                    // their slots too, so that one claim takes them all. A claim per
                    // finished delivery made a sweep's thousands of alerts thousands of
                    // claims, each a query over every pending delivery (and on SQLite a
                    // write), beside the sweep's own saves. With nothing in flight (a new
                    // event, or the last delivery done) it claims at once.
                    let gathered_by = tokio::time::Instant::now() + CLAIM_GATHER;
                    let mut stopped = false;
                    while !self.nothing_in_flight() {
                        tokio::select! {
                            () = &mut stop => {
                                stopped = true;
                                break;
                            }
                            () = self.wake.notified() => {}
                            () = tokio::time::sleep_until(gathered_by) => break,
                        }
                    }
                    if stopped {
                        break;
                    }
                }
                () = tokio::time::sleep(sleep) => {}
            }
        }
        // Wait for the deliveries in flight, so their attempts are recorded.
        let all = |n: usize| u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        let _ = self
            .webhook_slots
            .acquire_many(all(self.options.concurrency))
            .await;
        let _ = self
            .email_slots
            .acquire_many(all(self.options.email_concurrency))
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use chrono::{DateTime, Duration as Span};
    use snitch_core::{
        Case, CaseId, DeliveryState, EmailAddress, ManualClock, NotifyError, Outcome,
        SequentialTokens, SnitchFields, SnitchService,
    };
    use snitch_store_memory::MemoryStorage;
    use std::sync::Mutex;

    /// Records what it is asked to send and fails the first `failures` sends
    /// (permanently when `permanent`).
    #[derive(Default)]
    struct Receiver {
        failures: Mutex<usize>,
        permanent: bool,
        seen: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl Notifier for Receiver {
        async fn send(&self, delivery: &Delivery) -> Result<String, NotifyError> {
            self.seen
                .lock()
                .expect("not poisoned")
                .push(delivery.event.id.clone());
            let mut failures = self.failures.lock().expect("not poisoned");
            if *failures > 0 {
                *failures -= 1;
                if self.permanent {
                    return Err(NotifyError::permanent(
                        "refused: 10.0.0.1 is a private address",
                    ));
                }
                return Err(NotifyError::new("HTTP 503"));
            }
            Ok("HTTP 204".into())
        }
    }

    struct World {
        service: SnitchService,
        clock: Arc<ManualClock>,
        dispatcher: Arc<Dispatcher>,
        hooks: Arc<Receiver>,
        mail: Arc<Receiver>,
        case: Case,
        metrics: Arc<Counted>,
    }

    /// The attempts the dispatcher told of: channel, outcome, latency.
    #[derive(Default)]
    struct Counted(Mutex<Vec<(&'static str, DeliveryOutcome, Option<std::time::Duration>)>>);

    impl DeliveryObserver for Counted {
        fn delivery(
            &self,
            channel: &'static str,
            outcome: DeliveryOutcome,
            latency: Option<std::time::Duration>,
        ) {
            let mut told = self.0.lock().unwrap_or_else(|e| e.into_inner());
            told.push((channel, outcome, latency));
        }
    }

    impl Counted {
        fn count(&self, channel: &str, outcome: DeliveryOutcome) -> usize {
            let told = self.0.lock().unwrap_or_else(|e| e.into_inner());
            told.iter()
                .filter(|(c, o, _)| *c == channel && *o == outcome)
                .count()
        }

        /// The latencies told for `channel`, in seconds.
        fn latencies(&self, channel: &str) -> Vec<f64> {
            let told = self.0.lock().unwrap_or_else(|e| e.into_inner());
            told.iter()
                .filter(|(c, _, _)| *c == channel)
                .filter_map(|(_, _, latency)| latency.map(|l| l.as_secs_f64()))
                .collect()
        }
    }

    async fn world(hook_failures: usize) -> World {
        world_with(Receiver {
            failures: Mutex::new(hook_failures),
            ..Default::default()
        })
        .await
    }

    async fn world_with(hooks: Receiver) -> World {
        let storage = Arc::new(MemoryStorage::new());
        let start = DateTime::parse_from_rfc3339("2026-11-22T03:00:00Z")
            .expect("valid")
            .to_utc();
        let clock = Arc::new(ManualClock::new(start));
        let mut case = Case::new(CaseId::parse("acme").expect("valid"));
        case.members = vec![EmailAddress::parse("ops@acme.test").expect("valid")];
        storage.upsert_case(&case).await.expect("store");
        let service = SnitchService::with_tokens(
            storage.clone(),
            clock.clone(),
            Arc::new(SequentialTokens::default()),
        );
        service
            .create_webhook(&case, "https://hooks.acme.test/x", None)
            .await
            .expect("hook");
        let hooks = Arc::new(hooks);
        let mail = Arc::new(Receiver::default());
        let options = DispatcherOptions {
            retry: RetryPolicy::new(Span::seconds(10), Span::seconds(40), Span::minutes(2)),
            ..Default::default()
        };
        let metrics = Arc::new(Counted::default());
        let dispatcher = Arc::new(
            Dispatcher::new(storage, clock.clone(), hooks.clone(), mail.clone(), options)
                .with_metrics(metrics.clone()),
        );
        World {
            service,
            clock,
            dispatcher,
            hooks,
            mail,
            case,
            metrics,
        }
    }

    async fn dispatch(w: &World) -> usize {
        let tasks = w.dispatcher.dispatch_due().await.expect("claim");
        let n = tasks.len();
        for t in tasks {
            t.await.expect("delivery task");
        }
        n
    }

    async fn reporting(w: &World) -> String {
        let fields = SnitchFields {
            name: Some("job".into()),
            interval: Some("hourly".into()),
            ..Default::default()
        };
        let s = w.service.create(&w.case, &fields).await.expect("create");
        w.service
            .check_in(s.token().as_str(), Outcome::Success, None)
            .await
            .expect("check in");
        let events = w
            .service
            .events(&w.case, s.token().as_str(), 10)
            .await
            .expect("events");
        events[0].id.clone()
    }

    /// A page's trigger that failed, retried after its recovery's resolve went out through
    /// the same channel, is not sent: it would reopen the page. The rule reads the store,
    /// so a dispatcher that never saw the resolve (another server's) keeps it too.
    #[tokio::test]
    async fn a_late_trigger_after_its_resolve_is_not_sent() {
        let w = world(0).await;
        let pager = Arc::new(Receiver {
            failures: Mutex::new(1),
            ..Default::default()
        });
        let input = snitch_core::service::ChannelInput {
            kind: Some("pagerduty".into()),
            settings: vec![("routing_key".into(), "R0123".into())],
            ..Default::default()
        };
        w.service
            .create_channel(&w.case, &input)
            .await
            .expect("channel");
        let first = reporting(&w).await;
        let token = first.rsplit_once('-').expect("an event id").0.to_owned();
        assert_eq!(dispatch(&w).await, 2, "a first check-in is no recovery");
        // Missing: the trigger fails and waits for its retry.
        w.clock.advance(Span::hours(2));
        w.service.tick(w.clock.now()).await.expect("tick");
        let other = Arc::new(
            Dispatcher::new(
                w.service.storage().clone(),
                w.clock.clone(),
                w.hooks.clone(),
                w.mail.clone(),
                DispatcherOptions::default(),
            )
            .with_channels(pager.clone()),
        );
        let dispatch_on = |d: Arc<Dispatcher>| async move {
            for t in d.dispatch_due().await.expect("claim") {
                t.await.expect("task");
            }
        };
        dispatch_on(other.clone()).await;
        assert_eq!(
            pager.seen.lock().expect("ok").len(),
            1,
            "the trigger, failed"
        );
        // The recovery's resolve goes out through a second dispatcher.
        w.service
            .check_in(&token, Outcome::Success, None)
            .await
            .expect("check in");
        let second = Arc::new(
            Dispatcher::new(
                w.service.storage().clone(),
                w.clock.clone(),
                w.hooks.clone(),
                w.mail.clone(),
                DispatcherOptions::default(),
            )
            .with_channels(pager.clone()),
        );
        dispatch_on(second.clone()).await;
        assert_eq!(pager.seen.lock().expect("ok").len(), 2, "the resolve, sent");
        // The trigger's retry comes due, on the first dispatcher: not sent.
        w.clock.advance(Span::hours(1));
        dispatch_on(other).await;
        let seen = pager.seen.lock().expect("ok").clone();
        assert_eq!(seen.len(), 2, "the late trigger was sent: {seen:?}");
        let events = w.service.events(&w.case, &token, 10).await.expect("events");
        let missing = events
            .iter()
            .find(|e| e.kind == snitch_core::EventKind::Missing)
            .expect("missing");
        let stored = w
            .service
            .storage()
            .deliveries(std::slice::from_ref(&missing.id))
            .await
            .expect("read");
        let trigger = stored
            .iter()
            .find(|d| d.channel.kind() == "pagerduty")
            .expect("the trigger");
        assert_eq!(trigger.state, DeliveryState::Delivered);
        assert!(
            trigger.attempts[1].detail.starts_with("not sent"),
            "{trigger:?}"
        );
    }

    #[tokio::test]
    async fn each_event_goes_to_every_hook_and_by_mail_once() {
        let w = world(0).await;
        let event = reporting(&w).await;
        assert_eq!(dispatch(&w).await, 2);
        assert_eq!(
            *w.hooks.seen.lock().expect("ok"),
            std::slice::from_ref(&event)
        );
        assert_eq!(
            *w.mail.seen.lock().expect("ok"),
            std::slice::from_ref(&event)
        );
        assert_eq!(dispatch(&w).await, 0, "delivered ones are done");
        let stored = w
            .service
            .storage()
            .deliveries(&[event])
            .await
            .expect("read");
        assert!(stored.iter().all(|d| d.state == DeliveryState::Delivered));
        assert!(stored
            .iter()
            .all(|d| d.attempts.len() == 1 && d.attempts[0].ok));
    }

    #[tokio::test]
    async fn failures_are_retried_with_backoff_until_they_succeed() {
        let w = world(2).await;
        let event = reporting(&w).await;
        assert_eq!(dispatch(&w).await, 2);
        // The first retry is due about 10 s later (±20 %), not before 8 s.
        w.clock.advance(Span::seconds(7));
        assert_eq!(dispatch(&w).await, 0);
        w.clock.advance(Span::seconds(6));
        assert_eq!(dispatch(&w).await, 1);
        // The second retry about 20 s after that.
        w.clock.advance(Span::seconds(25));
        assert_eq!(dispatch(&w).await, 1);
        let stored = w
            .service
            .storage()
            .deliveries(std::slice::from_ref(&event))
            .await
            .expect("read");
        let hook = &stored[0];
        assert_eq!(hook.state, DeliveryState::Delivered);
        let oks: Vec<bool> = hook.attempts.iter().map(|a| a.ok).collect();
        assert_eq!(oks, [false, false, true]);
        assert_eq!(hook.attempts[0].detail, "HTTP 503");
        assert_eq!(
            *w.hooks.seen.lock().expect("ok"),
            [event.clone(), event.clone(), event]
        );
    }

    #[tokio::test]
    async fn attempts_are_counted_by_channel_and_outcome_with_the_delay_since_the_event() {
        let w = world(1).await;
        reporting(&w).await;
        assert_eq!(dispatch(&w).await, 2);
        w.clock.advance(Span::seconds(30));
        assert_eq!(dispatch(&w).await, 1);
        let m = &w.metrics;
        assert_eq!(m.count("webhook", DeliveryOutcome::Retry), 1);
        assert_eq!(m.count("webhook", DeliveryOutcome::Delivered), 1);
        assert_eq!(m.count("email", DeliveryOutcome::Delivered), 1);
        assert_eq!(m.count("webhook", DeliveryOutcome::Failed), 0);
        // The e-mail went out at once, the hook 30 s after its event; only deliveries
        // that went through have a latency.
        assert_eq!(m.latencies("webhook"), [30.0]);
        assert_eq!(m.latencies("email"), [0.0]);
    }

    #[tokio::test]
    async fn a_delivery_that_keeps_failing_is_given_up_and_recorded() {
        let w = world(usize::MAX).await;
        let event = reporting(&w).await;
        for _ in 0..20 {
            dispatch(&w).await;
            w.clock.advance(Span::seconds(50));
        }
        let stored = w
            .service
            .storage()
            .deliveries(&[event])
            .await
            .expect("read");
        assert_eq!(stored[0].state, DeliveryState::Failed);
        assert!(stored[0].attempts.len() >= 3);
        assert!(stored[0].attempts.iter().all(|a| !a.ok));
        assert_eq!(
            w.service.storage().next_delivery_at().await.expect("read"),
            None
        );
        assert_eq!(w.metrics.count("webhook", DeliveryOutcome::Failed), 1);
    }

    #[tokio::test]
    async fn a_permanent_failure_is_given_up_at_once() {
        let w = world_with(Receiver {
            failures: Mutex::new(usize::MAX),
            permanent: true,
            ..Default::default()
        })
        .await;
        let event = reporting(&w).await;
        assert_eq!(dispatch(&w).await, 2);
        w.clock.advance(Span::minutes(5));
        assert_eq!(dispatch(&w).await, 0, "nothing is retried");
        let stored = w
            .service
            .storage()
            .deliveries(std::slice::from_ref(&event))
            .await
            .expect("read");
        let hook = &stored[0];
        assert_eq!(hook.state, DeliveryState::Failed);
        assert_eq!(hook.next_attempt_at, None);
        assert_eq!(hook.attempts.len(), 1);
        assert_eq!(
            hook.attempts[0].detail,
            "refused: 10.0.0.1 is a private address"
        );
        assert_eq!(stored[1].state, DeliveryState::Delivered, "the e-mail");
        assert_eq!(*w.hooks.seen.lock().expect("ok"), [event]);
    }
}
