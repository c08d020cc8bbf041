//! The JSON body of a webhook request (docs/api.md#webhook-payload).

use serde_json::{json, Value};
use snitch_core::{Event, EventKind};

use crate::wire::{format_time, tag_names};

/// The header carrying the event id, the same on every retry.
pub const EVENT_ID_HEADER: &str = "Snitch-Event-Id";

/// The JSON body of a webhook request for an event. A `snitch.missing` that stands for
/// several due points carries `missed_periods` in `data` (docs/rules.md#catch-up).
pub fn webhook_body(event: &Event) -> Value {
    let mut body = json!({
        "type": event.kind.as_str(),
        "timestamp": format_time(event.at),
        "data": {
            "snitch": {
                "token": event.token.as_str(),
                "name": event.name.as_str(),
                "notes": event.notes.as_str(),
                "tags": tag_names(event.tags.as_slice()),
                "status": event.status.webhook_name(),
                "previous_status": event.previous_status.webhook_name(),
            }
        }
    });
    if event.kind == EventKind::Missing {
        body["data"]["missed_periods"] = json!(event.missed_periods.max(1));
    }
    body
}
