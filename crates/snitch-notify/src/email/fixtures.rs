//! Events and deliveries shared by the e-mail tests.

use chrono::{DateTime, Utc};
use snitch_core::{
    CaseId, Channel, CheckIn, CheckInMessage, Delivery, DeliveryState, EmailAddress, Event,
    EventKind, Notes, Outcome, SnitchName, Status, Tags, Token,
};

pub(crate) fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .expect("valid time")
        .to_utc()
}

pub(crate) fn event(kind: EventKind, status: Status, previous: Status) -> Event {
    Event {
        id: "abcdefghij0123456789-3".into(),
        kind,
        at: t("2026-11-22T00:00:00Z"),
        case_id: CaseId::parse("acme").expect("case"),
        token: Token::parse("abcdefghij0123456789").expect("token"),
        name: SnitchName::parse("Nightly backup").expect("name"),
        notes: Notes::parse("Runs pg_dump on db1.\nCall Ann if it fails.").expect("notes"),
        tags: Tags::parse(&["db", "nightly"]).expect("tags"),
        alert_email: Default::default(),
        status,
        previous_status: previous,
        checked_in_at: Some(t("2026-11-20T23:05:00Z")),
        check_in: None,
        missed_periods: u64::from(kind == EventKind::Missing),
        expected_at: None,
        expected_at_local: None,
        reason: None,
        run: None,
    }
}

pub(super) fn errored() -> Event {
    let mut e = event(EventKind::Errored, Status::Errored, Status::Healthy);
    e.at = t("2026-11-21T23:04:00Z");
    e.check_in = Some(CheckIn::new(
        t("2026-11-21T23:04:00Z"),
        Outcome::from_exit_status(Some("2")),
        CheckInMessage::truncating("pg_dump: disk full"),
    ));
    e
}

pub(super) fn email_delivery(event: Event, to: &[&str]) -> Delivery {
    Delivery {
        id: format!("{}-1", event.id),
        event,
        channel: Channel::Email {
            to: to
                .iter()
                .map(|a| EmailAddress::parse(a).expect("address"))
                .collect(),
        },
        state: DeliveryState::Pending,
        next_attempt_at: None,
        attempts: Vec::new(),
    }
}

pub(super) fn missing_delivery() -> Delivery {
    email_delivery(
        event(EventKind::Missing, Status::Failed, Status::Healthy),
        &["ann@example.test", "bob@example.org"],
    )
}
