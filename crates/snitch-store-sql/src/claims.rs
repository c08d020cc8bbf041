//! The property both SQL stores' fair delivery claim must have: on any outbox, a store's
//! `claim_deliveries` takes exactly the deliveries, in the same order, that
//! [`ClaimLimits::select`] picks from the due ones
//! (docs/rules.md#delivery-isolation). Each store's
//! tests run [`claims_as_select_picks`] on the outboxes of [`outboxes`], a fresh
//! database each.

use proptest::prelude::*;
use snitch_core::contract::{at, case, checked_in, snitch};
use snitch_core::{
    Case, Channel, ChannelKind, ClaimLimits, Delivery, DeliveryState, EmailAddress, Storage,
    WebhookUrl,
};

/// How many cases, webhook destinations and minutes an outbox draws from.
const CASES: usize = 3;
const DESTINATIONS: usize = 3;
const MINUTES: i64 = 6;

/// When the claim happens: deliveries due at a later minute are not taken.
const NOW: i64 = 4;

/// One delivery of an outbox: its case, its channel (a webhook to one of the
/// destinations, or an e-mail), when it is due, and whether it is still pending.
#[derive(Debug, Clone)]
pub struct Spec {
    case: usize,
    destination: Option<usize>,
    due: i64,
    pending: bool,
}

/// An outbox and the limits of one claim on it.
#[derive(Debug, Clone)]
pub struct Outbox {
    deliveries: Vec<Spec>,
    limits: ClaimLimits,
}

fn case_of(n: usize) -> Case {
    let mut c = case(&format!("case{n}"));
    c.members = vec![EmailAddress::parse("ops@acme.test").expect("valid")];
    c
}

fn url(destination: usize) -> WebhookUrl {
    WebhookUrl::parse(&format!("https://hooks{destination}.example.test/in"))
        .expect("fixture URLs are valid")
}

fn kind(n: usize) -> ChannelKind {
    if n.is_multiple_of(2) {
        ChannelKind::Webhook
    } else {
        ChannelKind::Email
    }
}

/// Random outboxes of up to 12 deliveries over a few cases and destinations, with random
/// limits and deliveries in flight.
pub fn outboxes() -> impl Strategy<Value = Outbox> {
    let spec = (
        0..CASES,
        prop::option::weighted(0.6, 0..DESTINATIONS),
        0..MINUTES,
        prop::bool::weighted(0.9),
    )
        .prop_map(|(case, destination, due, pending)| Spec {
            case,
            destination,
            due,
            pending,
        });
    (
        prop::collection::vec(spec, 0..12),
        (0usize..6, 0usize..6, 0usize..5, 0usize..5),
        prop::collection::vec((0..CASES, 0usize..2, 0usize..3), 0..4),
        prop::collection::vec((0..DESTINATIONS, 0usize..3), 0..4),
    )
        .prop_map(
            |(
                deliveries,
                (webhooks, emails, per_case, per_destination),
                busy_cases,
                busy_destinations,
            )| {
                let mut limits = ClaimLimits::new(webhooks, emails, per_case, per_destination);
                limits.case_channels_in_flight = busy_cases
                    .into_iter()
                    .map(|(c, k, n)| (case_of(c).id, kind(k), n))
                    .collect();
                limits.destinations_in_flight = busy_destinations
                    .into_iter()
                    .map(|(d, n)| (url(d).destination(), n))
                    .collect();
                Outbox { deliveries, limits }
            },
        )
}

/// Stores the outbox in `store` (an empty, migrated one), one snitch a delivery, in
/// order, then checks that a claim at `NOW` takes what [`ClaimLimits::select`] picks.
pub async fn claims_as_select_picks(store: &dyn Storage, outbox: &Outbox) {
    for n in 0..CASES {
        store.upsert_case(&case_of(n)).await.expect("upsert case");
    }
    let mut stored = Vec::new();
    for (n, spec) in outbox.deliveries.iter().enumerate() {
        let owner = case_of(spec.case);
        let fresh = snitch(&owner, n as u64 + 1, at(0));
        store.insert_snitch(&fresh, 100).await.expect("insert");
        let change = checked_in(&fresh, at(0));
        let event = change
            .events()
            .first()
            .expect("a first check-in reports")
            .clone();
        let delivery = Delivery {
            id: format!("{}-{n}", event.id),
            event,
            channel: match spec.destination {
                Some(d) => Channel::Webhook {
                    hook_id: format!("hook{d}"),
                    url: url(d),
                    secret: None,
                },
                None => Channel::Email {
                    to: owner.members.clone(),
                },
            },
            state: if spec.pending {
                DeliveryState::Pending
            } else {
                DeliveryState::Delivered
            },
            next_attempt_at: spec.pending.then(|| at(spec.due)),
            attempts: Vec::new(),
        };
        store
            .save(&change.with_deliveries(vec![delivery.clone()]))
            .await
            .expect("save");
        stored.push((spec, delivery));
    }
    // Due, earliest first, then in the order stored.
    let mut due: Vec<&(&Spec, Delivery)> = stored
        .iter()
        .filter(|(spec, _)| spec.pending && spec.due <= NOW)
        .collect();
    due.sort_by_key(|(spec, _)| spec.due);
    let due: Vec<&Delivery> = due.into_iter().map(|(_, d)| d).collect();
    let expected: Vec<&str> = outbox
        .limits
        .select(&due)
        .into_iter()
        .map(|i| due[i].id.as_str())
        .collect();
    let claimed = store
        .claim_deliveries(at(NOW), at(NOW + 10), &outbox.limits)
        .await
        .expect("claim");
    let claimed: Vec<&str> = claimed.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(claimed, expected, "claimed from {outbox:#?}");
}
