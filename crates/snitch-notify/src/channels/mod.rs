//! Vendor channels (docs/rules.md#channels): Slack, Mattermost, Discord, Microsoft Teams,
//! Google Chat, PagerDuty, Opsgenie, Telegram, ntfy, Pushover and Matrix, each spoken
//! as its vendor documents it. `render` is pure (message, escaping, requests, answers);
//! `notifier` sends.

#[cfg(feature = "webhooks")]
mod notifier;
pub mod render;

#[cfg(feature = "webhooks")]
pub use notifier::{ChannelNotifier, CHANNEL_TEST_DEADLINE};
pub use render::{alert_link, derived_ref};
