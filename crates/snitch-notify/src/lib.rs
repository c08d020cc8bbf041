//! Snitch's outbound side: the dispatcher that drives deliveries from the outbox (its
//! retry and fairness policy, [`dispatcher`]) and every transport that plugs the core's
//! `Notifier` trait: webhooks over HTTP(S) ([`webhook`]), chat and paging channels
//! ([`channels`]) and e-mail over SMTP or to the log ([`email`]).
//!
//! It owns how an event becomes a request or a message; it never decides who is alerted
//! or when (the core's outbox does), and it serves nothing over HTTP (`snitch-http`).

#![warn(missing_docs)]

use snitch_core::Timestamp;

pub mod channels;
pub mod dispatcher;
pub mod email;
pub mod webhook;

/// An instant as every message writes it: RFC 3339 in UTC with milliseconds
/// (`2026-11-22T03:13:00.123Z`), as the API does.
pub fn format_time(t: Timestamp) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A snitch's token fit for a log: its first four characters. A token is a secret (anyone
/// who holds it can check in), and logs are read by more people than own the snitch.
pub fn loggable_token(token: &str) -> String {
    let shown: String = token.chars().take(4).collect();
    format!("{shown}…")
}

/// An event or delivery id fit for a log: ids begin with their snitch's token
/// (`<token>-<n>`, `<token>-<n>-<m>`), which [`loggable_token`] shortens: `abcd…-7-1`.
pub fn loggable_id(id: &str) -> String {
    match id.split_once('-') {
        Some((token, rest)) => format!("{}-{rest}", loggable_token(token)),
        None => loggable_token(id),
    }
}

/// Text a user or a job wrote, for a place of one line (a header, a title, a field):
/// every control character, line or paragraph separator and bidi control becomes a
/// space, so it can neither break the line nor reorder it (docs/rules.md#hostile-input).
pub(crate) fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| {
            if snitch_core::types::is_layout_control(c) {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// Where text a user or a job wrote may break lines: at line feeds, carriage returns,
/// NEL, vertical tabs, form feeds and the Unicode line and paragraph separators.
pub(crate) const LINE_BREAKS: [char; 7] = [
    '\n', '\r', '\u{2028}', '\u{2029}', '\u{85}', '\u{b}', '\u{c}',
];

#[cfg(test)]
mod loggable_tests {
    use super::*;

    #[test]
    fn ids_in_logs_keep_four_characters_of_the_token() {
        assert_eq!(loggable_id("abcdefghijklmnopqrst-7"), "abcd…-7");
        assert_eq!(loggable_id("abcdefghijklmnopqrst-7-1"), "abcd…-7-1");
        assert_eq!(loggable_id("abcdefghijklmnopqrst"), "abcd…");
        assert_eq!(loggable_token("ab"), "ab…");
    }
}
