//! The JSON body of a webhook request (docs/api.md#webhook-payload).

use serde_json::{json, Value};
use snitch_core::{Event, EventKind};

use crate::format_time;

/// The header carrying the event id, the same on every retry.
pub const EVENT_ID_HEADER: &str = "Snitch-Event-Id";

/// The JSON body of a webhook request for an event. A `snitch.missing` that stands for
/// several due points carries `missed_periods` in `data` (docs/rules.md#catch-up); a
/// missing or errored one says why (`reason`), and a missing one when its run was
/// expected (`expected_at`, and `expected_at_local` for a schedule).
pub fn webhook_body(event: &Event) -> Value {
    let mut body = json!({
        "type": event.kind.as_str(),
        "timestamp": format_time(event.at),
        "data": {
            "snitch": {
                "token": event.token.as_str(),
                "name": event.name.as_str(),
                "notes": event.notes.as_str(),
                "tags": event.tags.as_slice().iter().map(|t| t.as_str()).collect::<Vec<_>>(),
                "status": event.status.webhook_name(),
                "previous_status": event.previous_status.webhook_name(),
            }
        }
    });
    if event.kind == EventKind::Missing {
        body["data"]["missed_periods"] = json!(event.missed_periods.max(1));
    }
    // Why, and for which run (docs/api.md#webhook-payload): beside the fields Dead Man's
    // Snitch sends, which stay as they are.
    // Events stored before reasons were kept: the kind's usual one.
    let reason = event.reason.map(|r| r.as_str()).or(match event.kind {
        EventKind::Missing => Some("missed"),
        EventKind::Errored => Some("exit_status"),
        _ => None,
    });
    if let Some(reason) = reason {
        body["data"]["reason"] = json!(reason);
    }
    if let Some(run) = &event.run {
        // The run as the API's snitch JSON shows `last_run` (docs/api.md#webhook-payload).
        body["data"]["run"] = json!({
            "rid": run.run_id.as_ref().map(|r| r.as_str()),
            "started_at": run.started_at.map(format_time),
            "finished_at": run.finished_at.map(format_time),
            "duration_ms": run.duration_ms,
            "exit_status": run.exit_status,
            "timed_out": run.timed_out,
        });
    }
    if let Some(expected) = event.expected_at {
        body["data"]["expected_at"] = json!(format_time(expected));
    }
    if let Some(local) = &event.expected_at_local {
        body["data"]["expected_at_local"] = json!(local);
    }
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::email::fixtures::{event, t};
    use snitch_core::Status;

    #[test]
    fn a_missing_run_carries_its_reason_and_expected_times_beside_the_dms_fields() {
        let mut e = event(EventKind::Missing, Status::Failed, Status::Healthy);
        let plain = webhook_body(&e);
        assert_eq!(plain["data"]["reason"], "missed");
        assert!(plain["data"].get("expected_at").is_none());
        e.expected_at = Some(t("2026-11-22T00:30:00Z"));
        e.expected_at_local = Some("2026-11-22T02:30:00.000+02:00".into());
        let body = webhook_body(&e);
        assert_eq!(body["data"]["expected_at"], "2026-11-22T00:30:00.000Z");
        assert_eq!(
            body["data"]["expected_at_local"],
            "2026-11-22T02:30:00.000+02:00"
        );
        // What Dead Man's Snitch sends is unchanged.
        assert_eq!(body["type"], plain["type"]);
        assert_eq!(body["timestamp"], plain["timestamp"]);
        assert_eq!(body["data"]["snitch"], plain["data"]["snitch"]);
        assert_eq!(body["data"]["missed_periods"], 1);
        let errored = webhook_body(&event(EventKind::Errored, Status::Errored, Status::Healthy));
        assert_eq!(errored["data"]["reason"], "exit_status");
        assert!(
            errored["data"].get("run").is_none(),
            "no run: a plain check-in"
        );
    }

    #[test]
    fn a_timed_out_run_says_so_with_the_run() {
        let mut e = event(EventKind::Missing, Status::Failed, Status::Healthy);
        e.reason = Some(snitch_core::AlertReason::Timeout);
        e.run = Some(snitch_core::Run {
            run_id: snitch_core::RunId::parse("r-1"),
            started_at: Some(t("2026-11-22T00:30:00Z")),
            finished_at: None,
            duration_ms: Some(600_000),
            exit_status: None,
            timed_out: true,
        });
        let body = webhook_body(&e);
        assert_eq!(body["data"]["reason"], "timeout");
        assert_eq!(
            body["data"]["run"],
            json!({
                "rid": "r-1",
                "started_at": "2026-11-22T00:30:00.000Z",
                "finished_at": null,
                "duration_ms": 600000,
                "exit_status": null,
                "timed_out": true,
            })
        );
    }
}
