//! Check-ins by e-mail (docs/rules.md#e-mail-check-ins): which words of a message decide
//! its outcome, and the check-in a message becomes. The SMTP listener and the MIME
//! decoding live in the adapter; this module sees a subject and a body already decoded
//! to text.

use std::sync::Arc;

use crate::runs::{CheckInBody, CheckInKind};
use crate::snitch::CheckIn;
use crate::types::{CheckInMessage, Outcome};
use crate::validation::Validation;
use crate::Timestamp;

/// The most keywords one list may hold.
pub const EMAIL_KEYWORDS_MAX: usize = 10;
/// The longest keyword, in characters.
pub const EMAIL_KEYWORD_MAX_CHARS: usize = 100;
/// The exit status an e-mail that matched a failure keyword records.
pub const EMAIL_FAILURE_EXIT_STATUS: &str = "1";

/// Where keywords are looked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeywordScope {
    /// In the subject and in the body's text.
    #[default]
    Both,
    /// In the subject only.
    Subject,
    /// In the body's text only.
    Body,
}

impl KeywordScope {
    /// `both`, `subject` or `body`.
    pub fn parse(raw: &str) -> Result<Self, Validation> {
        match raw {
            "both" => Ok(KeywordScope::Both),
            "subject" => Ok(KeywordScope::Subject),
            "body" => Ok(KeywordScope::Body),
            _ => Err(Validation::new(
                "email_keywords",
                "search must be one of both, subject, body",
            )),
        }
    }

    /// The name [`KeywordScope::parse`] reads.
    pub fn name(self) -> &'static str {
        match self {
            KeywordScope::Both => "both",
            KeywordScope::Subject => "subject",
            KeywordScope::Body => "body",
        }
    }
}

/// A snitch's words that decide what a check-in e-mail means: failure, success or a
/// run's start. Matching ignores case; a keyword matches anywhere in the searched text.
/// Empty lists (the default): every message is a success.
///
/// One pointer wide, shared by clones: every snitch carries one, and a snitch is moved
/// and cloned on each check-in, where the lists themselves are rarely read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EmailKeywords {
    /// `None`: no keyword (the lists are never all empty inside).
    lists: Option<Arc<KeywordLists>>,
}

#[derive(Debug, PartialEq, Eq)]
struct KeywordLists {
    failure: Vec<String>,
    success: Vec<String>,
    start: Vec<String>,
    scope: KeywordScope,
    // Lowercased copies, matched against lowercased text.
    folded: [Vec<String>; 3],
}

/// What an e-mail means for its snitch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmailVerdict {
    /// A run ended well (or no keywords are set).
    Success,
    /// A run failed: a failure keyword matched (failure keywords win over the others).
    Failure,
    /// A run started.
    Start,
    /// Keywords are set and none matched: recorded as output, changes nothing.
    Unmatched,
}

impl EmailKeywords {
    /// Checks three lists of keywords and where to look for them. Each keyword is trimmed;
    /// empty ones, control characters, more than [`EMAIL_KEYWORDS_MAX`] per list or more
    /// than [`EMAIL_KEYWORD_MAX_CHARS`] characters are refused under `email_keywords`.
    pub fn parse(
        failure: &[String],
        success: &[String],
        start: &[String],
        scope: KeywordScope,
    ) -> Result<Self, Validation> {
        let failure = Self::list("failure", failure)?;
        let success = Self::list("success", success)?;
        let start = Self::list("start", start)?;
        if failure.is_empty() && success.is_empty() && start.is_empty() {
            return Ok(EmailKeywords::default());
        }
        let fold = |list: &[String]| list.iter().map(|k| k.to_lowercase()).collect();
        Ok(EmailKeywords {
            lists: Some(Arc::new(KeywordLists {
                folded: [fold(&failure), fold(&success), fold(&start)],
                failure,
                success,
                start,
                scope,
            })),
        })
    }

    fn list(which: &str, raw: &[String]) -> Result<Vec<String>, Validation> {
        let problem = |message: String| Validation::new("email_keywords", message);
        if raw.len() > EMAIL_KEYWORDS_MAX {
            return Err(problem(format!(
                "{which} has more than {EMAIL_KEYWORDS_MAX} keywords"
            )));
        }
        raw.iter()
            .map(|keyword| {
                let keyword = keyword.trim();
                if keyword.is_empty() {
                    Err(problem(format!("{which} has an empty keyword")))
                } else if keyword.chars().count() > EMAIL_KEYWORD_MAX_CHARS {
                    Err(problem(format!(
                        "{which} has a keyword longer than {EMAIL_KEYWORD_MAX_CHARS} characters"
                    )))
                } else if keyword.chars().any(char::is_control) {
                    Err(problem(format!("{which} has a control character")))
                } else {
                    Ok(keyword.to_owned())
                }
            })
            .collect()
    }

    /// Whether no keyword is set (every message is then a success).
    pub fn is_empty(&self) -> bool {
        self.lists.is_none()
    }

    /// The failure keywords, as given.
    pub fn failure(&self) -> &[String] {
        self.lists.as_ref().map_or(&[], |l| &l.failure)
    }

    /// The success keywords, as given.
    pub fn success(&self) -> &[String] {
        self.lists.as_ref().map_or(&[], |l| &l.success)
    }

    /// The start keywords, as given.
    pub fn start(&self) -> &[String] {
        self.lists.as_ref().map_or(&[], |l| &l.start)
    }

    /// Where keywords are looked for.
    pub fn scope(&self) -> KeywordScope {
        self.lists.as_ref().map_or(KeywordScope::Both, |l| l.scope)
    }

    /// What a message with `subject` and `body` means: failure keywords first, then
    /// success, then start (healthchecks' order); with keywords set and none found, the
    /// message is [`EmailVerdict::Unmatched`].
    pub fn classify(&self, subject: &str, body: &str) -> EmailVerdict {
        let Some(lists) = &self.lists else {
            return EmailVerdict::Success;
        };
        let subject = match lists.scope {
            KeywordScope::Both | KeywordScope::Subject => subject.to_lowercase(),
            KeywordScope::Body => String::new(),
        };
        let body = match lists.scope {
            KeywordScope::Both | KeywordScope::Body => body.to_lowercase(),
            KeywordScope::Subject => String::new(),
        };
        let found = |list: &[String]| {
            list.iter()
                .any(|k| subject.contains(k.as_str()) || body.contains(k.as_str()))
        };
        let [failure, success, start] = &lists.folded;
        if found(failure) {
            EmailVerdict::Failure
        } else if found(success) {
            EmailVerdict::Success
        } else if found(start) {
            EmailVerdict::Start
        } else {
            EmailVerdict::Unmatched
        }
    }
}

/// The check-in an e-mail becomes: its subject is the message, its body's text the run's
/// output (the first `body_limit` bytes), its outcome the `verdict` its snitch's keywords
/// gave ([`EmailKeywords::classify`]). Its time is set when it is saved.
pub fn email_check_in(
    verdict: EmailVerdict,
    subject: &str,
    body: &str,
    body_limit: usize,
) -> CheckIn {
    let (kind, outcome) = match verdict {
        EmailVerdict::Success => (CheckInKind::End, Outcome::Success),
        EmailVerdict::Failure => (
            CheckInKind::End,
            Outcome::from_exit_status(Some(EMAIL_FAILURE_EXIT_STATUS)),
        ),
        EmailVerdict::Start => (CheckInKind::Start, Outcome::Success),
        EmailVerdict::Unmatched => (CheckInKind::Log, Outcome::Success),
    };
    CheckIn::new(
        Timestamp::default(),
        outcome,
        CheckInMessage::truncating(subject.trim()),
    )
    .with_kind(kind)
    .with_body(CheckInBody::truncating(body.as_bytes(), body_limit))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    fn keywords(failure: &[&str], success: &[&str], start: &[&str]) -> EmailKeywords {
        EmailKeywords::parse(
            &words(failure),
            &words(success),
            &words(start),
            KeywordScope::Both,
        )
        .unwrap()
    }

    #[test]
    fn without_keywords_every_message_is_a_success() {
        let none = EmailKeywords::default();
        assert!(none.is_empty());
        assert_eq!(none.classify("FAILED", "error"), EmailVerdict::Success);
    }

    #[test]
    fn failure_wins_then_success_then_start_ignoring_case() {
        let k = keywords(&["failed"], &["Completed"], &["starting"]);
        assert_eq!(
            k.classify("Backup COMPLETED", "1 job FAILED"),
            EmailVerdict::Failure
        );
        assert_eq!(k.classify("backup completed", ""), EmailVerdict::Success);
        assert_eq!(
            k.classify("", "Starting; will complete"),
            EmailVerdict::Start
        );
        assert_eq!(k.classify("hello", "world"), EmailVerdict::Unmatched);
        // Non-ASCII folds too.
        let k = keywords(&["ÉCHEC"], &[], &[]);
        assert_eq!(k.classify("sauvegarde échec", ""), EmailVerdict::Failure);
    }

    #[test]
    fn the_scope_limits_where_keywords_are_looked_for() {
        let subject_only = EmailKeywords::parse(
            &words(&["fail"]),
            &words(&["ok"]),
            &[],
            KeywordScope::Subject,
        )
        .unwrap();
        assert_eq!(
            subject_only.classify("ok", "0 failures"),
            EmailVerdict::Success
        );
        let body_only =
            EmailKeywords::parse(&words(&["fail"]), &words(&["ok"]), &[], KeywordScope::Body)
                .unwrap();
        assert_eq!(body_only.classify("fail", "all ok"), EmailVerdict::Success);
        assert_eq!(KeywordScope::parse("subject"), Ok(KeywordScope::Subject));
        assert!(KeywordScope::parse("headers").is_err());
    }

    #[test]
    fn bad_keywords_are_refused_under_one_attribute() {
        let too_many: Vec<String> = (0..=EMAIL_KEYWORDS_MAX).map(|i| i.to_string()).collect();
        for (failure, why) in [
            (vec![" ".to_owned()], "empty"),
            (vec!["a\0b".to_owned()], "control"),
            (vec!["x".repeat(EMAIL_KEYWORD_MAX_CHARS + 1)], "longer"),
            (too_many, "more than"),
        ] {
            let problem =
                EmailKeywords::parse(&failure, &[], &[], KeywordScope::Both).expect_err(why);
            assert_eq!(problem.attribute, "email_keywords");
            assert!(problem.message.contains(why), "{}", problem.message);
        }
        let trimmed = keywords(&["  FAILED "], &[], &[]);
        assert_eq!(trimmed.failure(), ["FAILED"]);
    }

    #[test]
    fn a_message_becomes_a_check_in_of_its_verdict() {
        let k = keywords(&["failed"], &["ok"], &["start"]);
        let check_in = |subject: &str, body: &str, limit: usize| {
            email_check_in(k.classify(subject, body), subject, body, limit)
        };
        let failed = check_in(" Backup failed ", "disk full", 10_000);
        assert_eq!(failed.kind, CheckInKind::End);
        assert!(!failed.outcome.is_success());
        assert_eq!(failed.message.unwrap().as_str(), "Backup failed");
        assert_eq!(failed.body.unwrap().as_str(), "disk full");
        assert_eq!(check_in("start", "", 10).kind, CheckInKind::Start);
        let ignored = check_in("weekly report", "", 10);
        assert_eq!(ignored.kind, CheckInKind::Log);
        assert!(ignored.message.is_some() && ignored.body.is_none());
        // The body is cut at the limit, on a character boundary.
        let cut = email_check_in(EmailVerdict::Success, "", "ééé", 3);
        assert_eq!(cut.body.unwrap().as_str(), "é");
        assert!(cut.message.is_none());
    }
}
