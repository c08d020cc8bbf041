//! Vendor channels (docs/rules.md#channels): Slack, Mattermost, Discord, Microsoft Teams,
//! Google Chat, PagerDuty, Opsgenie, Telegram, ntfy, Pushover and Matrix, each spoken
//! as its vendor documents it. `render` is pure (message, escaping, requests, answers);
//! `notifier` sends.

#[cfg(feature = "webhooks")]
mod notifier;
pub mod render;

#[cfg(feature = "webhooks")]
pub use notifier::ChannelNotifier;

/// How long a test notification waits for its vendor by default: well within the
/// server's default request timeout (30 s), whatever the webhook timeout.
pub const CHANNEL_TEST_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);
pub use render::{alert_link, derived_ref};
