//! What an alert e-mail says: its subject and plain-text body.

use std::fmt::Write as _;

use snitch_core::{AlertReason, Event, EventKind, Outcome, Run, Status};

use crate::format_time;
use crate::{one_line, LINE_BREAKS};

/// What an alert says: a subject and a plain-text body.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct EmailContent {
    /// The `Subject` (one line).
    pub subject: String,
    /// The plain-text body.
    pub text: String,
}

/// `1440` as `1,440`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Renders the alert for an event. `check_in_base` (e.g. `https://nosnch.in`) adds the
/// snitch's check-in URL to the body.
pub fn render_email(event: &Event, check_in_base: Option<&str>) -> EmailContent {
    let quoted = format!("\"{}\"", one_line(event.name.as_str()));
    let at = format_time(event.at);
    let first_check_in = event.previous_status == Status::Pending;
    // Lines stay short so that an ASCII alert goes out as readable 7bit text.
    let (tail, detail) = match event.kind {
        EventKind::Missing if event.reason == Some(AlertReason::Timeout) => (
            "timed out",
            format!("A run started and did not end within its maximum runtime ({at})."),
        ),
        EventKind::Missing if event.missed_periods > 1 => (
            if event.previous_status == Status::Failed {
                "is still missing"
            } else {
                "is missing"
            },
            format!(
                "It missed {} check-ins in a row; the latest deadline was {at}.",
                thousands(event.missed_periods)
            ),
        ),
        EventKind::Missing if event.previous_status == Status::Failed => (
            "is still missing",
            format!("Another deadline passed with no check-in ({at})."),
        ),
        EventKind::Missing => (
            "is missing",
            format!("No check-in arrived before its deadline ({at})."),
        ),
        EventKind::Errored => (
            "reported an error",
            format!("It checked in with a failure at {at}."),
        ),
        EventKind::Reporting if first_check_in => (
            "is reporting",
            format!("It checked in for the first time at {at}."),
        ),
        EventKind::Reporting => ("is reporting again", format!("It checked in at {at}.")),
        EventKind::Paused => ("was paused", format!("It was paused at {at}.")),
        // A kind newer than this renderer.
        _ => ("changed", format!("Its status changed at {at}.")),
    };
    let subject = format!("[Snitch] {quoted} {tail}");

    // Writing to a String cannot fail.
    let mut text = String::new();
    let _ = writeln!(text, "{quoted} {tail}.\n{detail}");
    if let (Some(expected), Some(local)) = (event.expected_at, &event.expected_at_local) {
        // A schedule's run, as its owner wrote it: in the snitch's time zone.
        let _ = writeln!(
            text,
            "The run was expected at {local} in its time zone ({} UTC).",
            format_time(expected)
        );
    }
    if let Some(run) = &event.run {
        let _ = writeln!(text, "{}", run_line(run));
    }
    text.push('\n');
    let _ = writeln!(text, "Snitch:         {}", one_line(event.name.as_str()));
    let _ = writeln!(
        text,
        "Status:         {} (was {})",
        event.status.webhook_name(),
        event.previous_status.webhook_name()
    );
    let _ = writeln!(
        text,
        "Last success:   {}",
        event
            .checked_in_at
            .map_or_else(|| "never".to_owned(), format_time)
    );
    let _ = writeln!(text, "Event:          {} at {at}", event.kind.as_str());
    let _ = writeln!(text, "Token:          {}", event.token);
    if let Some(base) = check_in_base {
        let _ = writeln!(
            text,
            "Check-in URL:   {}/{}",
            base.trim_end_matches('/'),
            event.token
        );
    }
    if !event.tags.is_empty() {
        let tags: Vec<String> = event.tags.iter().map(|t| one_line(t.as_str())).collect();
        let _ = writeln!(text, "Tags:           {}", tags.join(", "));
    }
    if let Some(check_in) = &event.check_in {
        let _ = writeln!(text, "\nThe check-in:");
        let _ = writeln!(text, "  Time:         {}", format_time(check_in.at));
        match &check_in.outcome {
            Outcome::Success => {
                let _ = writeln!(text, "  Outcome:      success");
            }
            Outcome::Error { exit_status } => {
                let _ = writeln!(text, "  Outcome:      error");
                // Kept on one line at intake; one stored before may break lines.
                let _ = writeln!(text, "  Exit status:  {}", one_line(exit_status));
            }
        }
        if let Some(message) = &check_in.message {
            let _ = writeln!(text, "  Message:");
            text.push_str(&quoted_lines(message.as_str(), "  > "));
        }
    }
    let notes = event.notes.as_str().trim_end();
    if !notes.is_empty() {
        let _ = writeln!(text, "\nNotes:");
        text.push_str(&quoted_lines(notes, "  > "));
    }
    let _ = write!(
        text,
        "\n-- \nSent by Snitch to the snitch's alert_email list, or to its team.\n"
    );
    EmailContent { subject, text }
}

/// The run an alert concerns, in words: "The run (rid r-1) started at ... and took 4.2 s."
fn run_line(run: &Run) -> String {
    let mut line = String::from("The run");
    if let Some(id) = &run.run_id {
        // A run id is 1 to 64 of `A-Za-z0-9._:-`: nothing in it can break the line.
        let _ = write!(line, " ({id})");
    }
    if let Some(started) = run.started_at {
        let _ = write!(line, " started at {}", format_time(started));
    }
    match (run.timed_out, run.duration_ms) {
        (true, Some(ms)) => {
            let _ = write!(line, " and was still open after {}.", seconds(ms));
        }
        (false, Some(ms)) => {
            let _ = write!(line, " and took {}.", seconds(ms));
        }
        (_, None) => line.push('.'),
    }
    line
}

/// Milliseconds as seconds with one decimal, e.g. `4.2 s`.
fn seconds(ms: u64) -> String {
    format!("{}.{} s", thousands(ms / 1000), (ms % 1000) / 100)
}

/// Text a user or a job wrote, each of its lines behind `prefix` (and any other control
/// character, or bidi control, a space), so that none of it can pass for a line of ours.
fn quoted_lines(s: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(s.len() + 16);
    for line in s.split(LINE_BREAKS) {
        out.push_str(prefix);
        out.push_str(&one_line(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use snitch_core::{CheckIn, SnitchName};

    use super::super::fixtures::{errored, event, t};
    use super::*;

    #[test]
    fn a_timed_out_run_says_when_it_started_and_how_long_it_was_open() {
        let mut e = event(EventKind::Missing, Status::Failed, Status::Healthy);
        e.reason = Some(AlertReason::Timeout);
        e.run = Some(Run {
            run_id: snitch_core::RunId::parse("r-1"),
            started_at: Some(t("2026-11-22T00:30:00Z")),
            finished_at: None,
            duration_ms: Some(1_804_250),
            exit_status: None,
            timed_out: true,
        });
        let mail = render_email(&e, None);
        assert_eq!(mail.subject, "[Snitch] \"Nightly backup\" timed out");
        assert!(
            mail.text.contains(
                "The run (r-1) started at 2026-11-22T00:30:00.000Z and was still open after 1,804.2 s."
            ),
            "{}",
            mail.text
        );
    }

    #[test]
    fn a_missing_run_of_a_schedule_says_when_it_was_expected_in_its_zone() {
        let mut e = event(EventKind::Missing, Status::Failed, Status::Healthy);
        e.expected_at = Some(t("2026-11-22T00:30:00Z"));
        e.expected_at_local = Some("2026-11-22T02:30:00.000+02:00".into());
        let text = render_email(&e, None).text;
        assert!(
            text.contains(
                "The run was expected at 2026-11-22T02:30:00.000+02:00 in its time zone \
                 (2026-11-22T00:30:00.000Z UTC).\n\n"
            ),
            "{text}"
        );
        // An interval's missing alert says nothing more.
        e.expected_at_local = None;
        assert!(!render_email(&e, None).text.contains("was expected"));
    }

    #[tokio::test]
    async fn renders_a_missing_alert() {
        let e = event(EventKind::Missing, Status::Failed, Status::Healthy);
        let mail = render_email(&e, Some("https://nosnch.in/"));
        assert_eq!(mail.subject, r#"[Snitch] "Nightly backup" is missing"#);
        let text = &mail.text;
        for expected in [
            "\"Nightly backup\" is missing.\nNo check-in arrived before its deadline (2026-11-22T00:00:00.000Z).\n\n",
            "Snitch:         Nightly backup\n",
            "Status:         missing (was healthy)\n",
            "Last success:   2026-11-20T23:05:00.000Z\n",
            "Event:          snitch.missing at 2026-11-22T00:00:00.000Z\n",
            "Token:          abcdefghij0123456789\n",
            "Check-in URL:   https://nosnch.in/abcdefghij0123456789\n",
            "Tags:           db, nightly\n",
            "Notes:\n  > Runs pg_dump on db1.\n  > Call Ann if it fails.\n",
        ] {
            assert!(text.contains(expected), "{expected:?} not in:\n{text}");
        }
        assert!(!text.contains("The check-in:"), "{text}");

        let mut again = e.clone();
        again.previous_status = Status::Failed;
        again.checked_in_at = None;
        let mail = render_email(&again, None);
        assert_eq!(
            mail.subject,
            r#"[Snitch] "Nightly backup" is still missing"#
        );
        assert!(mail
            .text
            .contains("Status:         missing (was missing)\n"));
        assert!(mail.text.contains("Last success:   never\n"));
        assert!(!mail.text.contains("Check-in URL"));
    }

    #[tokio::test]
    async fn renders_an_error_alert_with_message_and_exit_status() {
        let mail = render_email(&errored(), None);
        assert_eq!(
            mail.subject,
            r#"[Snitch] "Nightly backup" reported an error"#
        );
        for expected in [
            "Status:         errored (was healthy)\n",
            "Event:          snitch.errored at 2026-11-21T23:04:00.000Z\n",
            "The check-in:\n  Time:         2026-11-21T23:04:00.000Z\n",
            "  Outcome:      error\n",
            "  Exit status:  2\n",
            "  Message:\n  > pg_dump: disk full\n",
        ] {
            assert!(
                mail.text.contains(expected),
                "{expected:?} not in:\n{}",
                mail.text
            );
        }
    }

    #[tokio::test]
    async fn renders_a_reporting_alert() {
        let mut e = event(EventKind::Reporting, Status::Healthy, Status::Failed);
        e.at = t("2026-11-22T01:00:00Z");
        e.checked_in_at = Some(e.at);
        e.check_in = Some(CheckIn::new(e.at, Outcome::Success, None));
        let mail = render_email(&e, None);
        assert_eq!(
            mail.subject,
            r#"[Snitch] "Nightly backup" is reporting again"#
        );
        assert!(mail
            .text
            .contains("Status:         healthy (was missing)\n"));
        assert!(mail.text.contains("  Outcome:      success\n"));
        assert!(!mail.text.contains("Message:"));

        e.previous_status = Status::Pending;
        let first = render_email(&e, None);
        assert_eq!(first.subject, r#"[Snitch] "Nightly backup" is reporting"#);
        assert!(first.text.contains("for the first time"));
    }

    #[tokio::test]
    async fn a_name_cannot_break_the_subject_line() {
        let mut e = event(EventKind::Missing, Status::Failed, Status::Healthy);
        // Names with control characters are refused now; one saved before may hold them.
        e.name = SnitchName::parse_stored("a\r\nBcc: eve@example.test").expect("name");
        let mail = render_email(&e, None);
        assert!(!mail.subject.contains(['\r', '\n']), "{:?}", mail.subject);
    }

    /// docs/rules.md#hostile-input: every field a job wrote is one line (the exit status)
    /// or quoted line by line (the message), whatever it holds: an exit status stored
    /// before intake kept it on one line, line breaks, separators and bidi controls
    /// included, cannot write a line of the e-mail.
    #[tokio::test]
    async fn what_a_job_wrote_is_one_line_or_quoted_line_by_line() {
        let forged = "This alert is a test. No action needed.";
        let breaks = [
            "\n\n", "\r", "\0", "\u{2028}", "\u{2029}", "\u{85}", "\u{b}",
        ];
        for br in breaks {
            let mut e = errored();
            // No store holds a NUL in a name: a tab stands in for it there.
            let name_br = if br == "\0" { "\t" } else { br };
            e.name =
                SnitchName::parse_stored(&format!("job{name_br}{forged}\u{202e}")).expect("name");
            e.check_in = Some(CheckIn::new(
                t("2026-11-21T23:04:00Z"),
                // Stored as sent, before intake kept an exit status on one line.
                Outcome::Error {
                    exit_status: format!("7{br}{forged}\u{202e}"),
                },
                snitch_core::CheckInMessage::truncating(&format!("ok{br}{forged}\u{2066}")),
            ));
            let mail = render_email(&e, None);
            assert!(
                !mail
                    .subject
                    .chars()
                    .any(snitch_core::types::is_layout_control),
                "{:?}",
                mail.subject
            );
            for line in mail
                .text
                .split(['\n', '\r', '\u{2028}', '\u{2029}', '\u{85}', '\u{b}'])
            {
                assert!(
                    !line.starts_with(forged),
                    "{br:?}: {line:?} in:\n{}",
                    mail.text
                );
                assert!(
                    !line.chars().any(snitch_core::types::is_layout_control),
                    "{br:?}: {line:?}"
                );
            }
            assert!(mail.text.contains("  Exit status:  7"), "{}", mail.text);
        }
    }

    /// Every text a user or a job wrote (tags, notes, the check-in's message) stays inside
    /// its own field: no line of the body starts with it, so it cannot pass for ours.
    #[tokio::test]
    async fn user_text_never_starts_a_line_of_the_body() {
        let mut e = errored();
        e.check_in = Some(CheckIn::new(
            t("2026-11-21T23:04:00Z"),
            Outcome::from_exit_status(Some("2")),
            snitch_core::CheckInMessage::truncating("ok\r\nStatus:         healthy\rX-Inj: 1"),
        ));
        e.tags = snitch_core::Tags::parse_stored(&["a\r\nX-Inj: 1", "db"]).expect("tags");
        e.notes = snitch_core::Notes::parse("fine\nEvent:          snitch.reporting\r\n\nbye")
            .expect("notes");
        let mail = render_email(&e, None);
        for line in mail.text.lines() {
            assert!(
                !line.starts_with("X-Inj")
                    && !line.starts_with("Event:          snitch.reporting")
                    && !line.starts_with("Status:         healthy"),
                "{line:?} in:\n{}",
                mail.text
            );
        }
        assert!(
            mail.text.contains("Tags:           a  X-Inj: 1, db\n"),
            "{}",
            mail.text
        );
        assert!(mail
            .text
            .contains("  > fine\n  > Event:          snitch.reporting\n"));
        assert!(mail.text.contains("  > ok\n"), "{}", mail.text);
    }
}
