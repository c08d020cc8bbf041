//! Domain values, each built only by parsing, with the limits of docs/rules.md#limits.
//!
//! A value of one of these types is valid by construction: code that holds a `Tag` never
//! checks its length again. Parse errors are [`Validation`]s naming the API attribute.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::calendar::Interval;
use crate::validation::Validation;

/// The longest snitch name, in characters.
pub const NAME_MAX_CHARS: usize = 255;
/// The longest tag, in characters.
pub const TAG_MAX_CHARS: usize = 64;
/// The most tags on one snitch.
pub const TAGS_MAX: usize = 50;
/// The longest notes, in characters.
pub const NOTES_MAX_CHARS: usize = 10_000;
/// The most alert e-mail addresses on one snitch.
pub const ALERT_EMAILS_MAX: usize = 20;
/// The longest check-in message kept, in characters (longer ones are cut).
pub const CHECK_IN_MESSAGE_MAX_CHARS: usize = 256;
/// The shortest token, in characters.
pub const TOKEN_MIN_CHARS: usize = 16;
/// Tokens are generated with this many characters; longer ones are accepted when parsed.
pub const TOKEN_CHARS: usize = 20;

/// The validation message of a missing or blank attribute.
pub const BLANK: &str = "can't be blank";
/// Text fields of the API refuse U+0000: no store has to hold it, and stores that cannot
/// (PostgreSQL) behave as the others do (docs/rules.md#hostile-input).
pub const CONTAINS_NUL: &str = "can't contain a NUL character";

/// Refuses text with a NUL character, naming `attribute`.
pub(crate) fn refuse_nul(attribute: &str, raw: &str) -> Result<(), Validation> {
    if raw.contains('\0') {
        Err(Validation::new(attribute, CONTAINS_NUL))
    } else {
        Ok(())
    }
}

/// Names and tags refuse control characters (line breaks, tabs, escapes): they are shown
/// on one line in alerts, chat messages and pages, where a line break would let a name
/// pass for a line of ours (docs/rules.md#hostile-input).
pub const CONTAINS_CONTROL: &str = "can't contain control characters";

/// Refuses text with a NUL character (named as such) or another control character.
fn refuse_control(attribute: &str, raw: &str) -> Result<(), Validation> {
    refuse_nul(attribute, raw)?;
    if raw.chars().any(char::is_control) {
        Err(Validation::new(attribute, CONTAINS_CONTROL))
    } else {
        Ok(())
    }
}

/// Whether `c` breaks a line or reorders the text around it: a control character (C0,
/// DEL, C1: line feed, carriage return, NEL, tab, escape, …), U+2028 LINE SEPARATOR,
/// U+2029 PARAGRAPH SEPARATOR, or a bidirectional control (U+061C, U+200E, U+200F,
/// U+202A to U+202E, U+2066 to U+2069). Text that must stay on one line, in the order it
/// was written, holds none (docs/rules.md#hostile-input).
pub fn is_layout_control(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}'
                | '\u{2029}'
                | '\u{61c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// Text a job sent that is kept, never refused: NUL becomes U+FFFD, since not every store
/// can hold it.
fn replace_nul(raw: &str) -> String {
    raw.replace('\0', "\u{FFFD}")
}

fn too_long(max: usize) -> String {
    format!("is too long (maximum is {max} characters)")
}

/// What a snitch monitors. 1 to 255 characters after trimming.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SnitchName(Arc<str>);

impl SnitchName {
    /// Parses a name: trimmed, not blank, at most [`NAME_MAX_CHARS`], no control
    /// character.
    pub fn parse(raw: &str) -> Result<Self, Validation> {
        refuse_control("name", raw)?;
        Self::parse_stored(raw)
    }

    /// A name as a store holds it: the rules of [`SnitchName::parse`] but for control
    /// characters, which names saved before they were refused may hold.
    pub fn parse_stored(raw: &str) -> Result<Self, Validation> {
        refuse_nul("name", raw)?;
        let name = raw.trim();
        if name.is_empty() {
            return Err(Validation::new("name", BLANK));
        }
        if name.chars().count() > NAME_MAX_CHARS {
            return Err(Validation::new("name", too_long(NAME_MAX_CHARS)));
        }
        Ok(SnitchName(name.into()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A keyword tag: 1 to 64 characters after trimming, no commas (they separate tags in
/// the list filter).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag(Arc<str>);

impl Tag {
    /// Parses a tag: trimmed, not blank, no comma, at most [`TAG_MAX_CHARS`], no control
    /// character.
    pub fn parse(raw: &str) -> Result<Self, Validation> {
        refuse_control("tags", raw)?;
        Self::parse_stored(raw)
    }

    /// A tag as a store holds it: the rules of [`Tag::parse`] but for control characters,
    /// which tags saved before they were refused may hold.
    pub fn parse_stored(raw: &str) -> Result<Self, Validation> {
        refuse_nul("tags", raw)?;
        let tag = raw.trim();
        if tag.is_empty() {
            return Err(Validation::new("tags", BLANK));
        }
        if tag.contains(',') {
            return Err(Validation::new(
                "tags",
                format!("{tag:?} can't contain a comma"),
            ));
        }
        if tag.chars().count() > TAG_MAX_CHARS {
            return Err(Validation::new(
                "tags",
                format!("{tag:?} is too long (maximum is {TAG_MAX_CHARS} characters)"),
            ));
        }
        Ok(Tag(tag.into()))
    }

    /// The tag.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The tags of one snitch: in the order given, duplicates dropped (first wins), at most 50.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Tags(Arc<[Tag]>);

impl Tags {
    /// Parses a whole list; the first problem found is reported. Blank tags (empty or
    /// whitespace only) are dropped, not refused: some clients send `[""]` for "no tag".
    pub fn parse<S: AsRef<str>>(raw: &[S]) -> Result<Self, Validation> {
        let mut tags = Tags::default();
        tags.extend_parsed(raw)?;
        Ok(tags)
    }

    /// A list as a store holds it (see [`Tag::parse_stored`]).
    pub fn parse_stored<S: AsRef<str>>(raw: &[S]) -> Result<Self, Validation> {
        let mut tags = Vec::with_capacity(raw.len());
        for r in raw {
            let tag = Tag::parse_stored(r.as_ref())?;
            if !tags.contains(&tag) {
                tags.push(tag);
            }
        }
        Ok(Tags(tags.into()))
    }

    /// Appends tags not already present, keeping order, dropping blank ones; fails
    /// without change if a tag is invalid or the result would exceed the limit.
    pub fn extend_parsed<S: AsRef<str>>(&mut self, raw: &[S]) -> Result<(), Validation> {
        let mut next = self.0.to_vec();
        for r in raw.iter().filter(|r| !r.as_ref().trim().is_empty()) {
            let tag = Tag::parse(r.as_ref())?;
            if !next.contains(&tag) {
                next.push(tag);
            }
        }
        if next.len() > TAGS_MAX {
            return Err(Validation::new(
                "tags",
                format!("has too many tags (maximum is {TAGS_MAX})"),
            ));
        }
        self.0 = next.into();
        Ok(())
    }

    /// Removes a tag; `false` if it was not there.
    pub fn remove(&mut self, tag: &Tag) -> bool {
        if !self.0.contains(tag) {
            return false;
        }
        self.0 = self.0.iter().filter(|t| *t != tag).cloned().collect();
        true
    }

    /// Whether `tag` is among them.
    pub fn contains(&self, tag: &Tag) -> bool {
        self.0.contains(tag)
    }

    /// True when every tag of `filter` is here (the list filter, docs/rules.md#listing).
    pub fn contains_all(&self, filter: &[Tag]) -> bool {
        filter.iter().all(|t| self.contains(t))
    }

    /// The tags, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Tag> {
        self.0.iter()
    }

    /// The tags, in order.
    pub fn as_slice(&self) -> &[Tag] {
        &self.0
    }

    /// How many tags there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Free text from the user, at most 10,000 characters. Empty when absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Notes(Arc<str>);

impl Notes {
    /// Parses notes: at most [`NOTES_MAX_CHARS`], no NUL.
    pub fn parse(raw: &str) -> Result<Self, Validation> {
        refuse_nul("notes", raw)?;
        if raw.chars().count() > NOTES_MAX_CHARS {
            return Err(Validation::new("notes", too_long(NOTES_MAX_CHARS)));
        }
        Ok(Notes(raw.into()))
    }

    /// The notes.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One valid e-mail address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EmailAddress(Arc<str>);

impl EmailAddress {
    /// Parses an e-mail address (trimmed).
    pub fn parse(raw: &str) -> Result<Self, Validation> {
        refuse_nul("alert_email", raw)?;
        let address = raw.trim();
        if email_address::EmailAddress::is_valid(address) {
            Ok(EmailAddress(address.into()))
        } else {
            Err(Validation::new(
                "alert_email",
                format!("{address:?} is not a valid e-mail address"),
            ))
        }
    }

    /// The address.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EmailAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The override list of alert recipients: empty means "all team members". At most 20.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct AlertEmails(Arc<[EmailAddress]>);

impl AlertEmails {
    /// Parses a list of addresses; blank entries are skipped and duplicates dropped, so
    /// `"a@x.test, "` (a trailing comma in the string form) is accepted.
    pub fn parse<S: AsRef<str>>(raw: &[S]) -> Result<Self, Validation> {
        let mut list: Vec<EmailAddress> = Vec::new();
        for r in raw.iter().map(AsRef::as_ref) {
            if r.trim().is_empty() {
                continue;
            }
            let address = EmailAddress::parse(r)?;
            if !list.contains(&address) {
                list.push(address);
            }
        }
        if list.len() > ALERT_EMAILS_MAX {
            return Err(Validation::new(
                "alert_email",
                format!("has too many addresses (maximum is {ALERT_EMAILS_MAX})"),
            ));
        }
        Ok(AlertEmails(list.into()))
    }

    /// Parses the comma-separated string form (docs/rules.md#request-parsing).
    pub fn parse_comma_separated(raw: &str) -> Result<Self, Validation> {
        let parts: Vec<&str> = raw.split(',').collect();
        Self::parse(&parts)
    }

    /// The addresses, in order.
    pub fn iter(&self) -> impl Iterator<Item = &EmailAddress> {
        self.0.iter()
    }

    /// The addresses, in order.
    pub fn as_slice(&self) -> &[EmailAddress] {
        &self.0
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// How the deadline is set: `basic` (end of the next period) or `smart` (learned).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AlertType {
    /// The deadline is the end of the period after the last check-in's.
    #[default]
    Basic,
    /// The deadline is learned from when the job usually checks in.
    Smart,
}

impl AlertType {
    /// Parses `basic` or `smart`.
    pub fn parse(raw: &str) -> Result<Self, Validation> {
        match raw {
            "basic" => Ok(AlertType::Basic),
            "smart" => Ok(AlertType::Smart),
            _ => Err(Validation::new("alert_type", "must be basic or smart")),
        }
    }

    /// The name: `basic` or `smart`.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertType::Basic => "basic",
            AlertType::Smart => "smart",
        }
    }
}

/// The message for an interval that is not one of the 17 names.
pub fn interval_not_allowed_message() -> String {
    let names: Vec<&str> = Interval::ALL.iter().map(|i| i.as_str()).collect();
    format!("must be one of: {}", names.join(", "))
}

/// Parses the `interval` attribute: blank and unknown values are validation problems.
pub fn parse_interval(raw: &str) -> Result<Interval, Validation> {
    if raw.trim().is_empty() {
        return Err(Validation::new("interval", BLANK));
    }
    raw.parse()
        .map_err(|_| Validation::new("interval", interval_not_allowed_message()))
}

/// The validation message of `smart` with an interval shorter than an hour.
pub const SMART_NEEDS_HOUR: &str = "smart alerts need an interval of an hour or longer";

/// `smart` is allowed only for `hourly` and longer intervals (docs/rules.md#smart-alerts).
pub fn check_alert_type_fits(alert_type: AlertType, interval: Interval) -> Result<(), Validation> {
    if alert_type == AlertType::Smart && interval.is_sub_hourly() {
        Err(Validation::new("alert_type", SMART_NEEDS_HOUR))
    } else {
        Ok(())
    }
}

/// The secret identifier of a snitch, used in API paths and its check-in URL:
/// at least 16 characters from `[a-z0-9]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(Arc<str>);

/// The text is not a well-formed token (so no snitch can have it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a snitch token")]
pub struct InvalidToken;

impl Token {
    /// Parses a token: at least [`TOKEN_MIN_CHARS`] characters from `[a-z0-9]`.
    pub fn parse(raw: &str) -> Result<Self, InvalidToken> {
        let well_formed = raw.len() >= TOKEN_MIN_CHARS
            && raw.len() <= 64
            && raw
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if well_formed {
            Ok(Token(raw.into()))
        } else {
            Err(InvalidToken)
        }
    }

    /// The token.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Token {
    type Err = InvalidToken;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Token::parse(s)
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A snitch's status as the API shows it (docs/rules.md#statuses).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// Created, never checked in.
    #[default]
    Pending,
    /// Checked in on time.
    Healthy,
    /// Missed its deadline (webhooks call it `missing`).
    Failed,
    /// Its last check-in reported an error.
    Errored,
    /// Paused: no alerts until resumed.
    Paused,
}

impl Status {
    /// Every status, in the API's order.
    pub const ALL: [Status; 5] = [
        Status::Pending,
        Status::Healthy,
        Status::Failed,
        Status::Errored,
        Status::Paused,
    ];

    /// The name the API shows, e.g. `healthy`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Healthy => "healthy",
            Status::Failed => "failed",
            Status::Errored => "errored",
            Status::Paused => "paused",
        }
    }

    /// The name in webhook payloads, where `failed` is called `missing`.
    pub fn webhook_name(self) -> &'static str {
        match self {
            Status::Failed => "missing",
            other => other.as_str(),
        }
    }

    /// The status with this API name.
    pub fn parse(raw: &str) -> Option<Status> {
        [
            Status::Pending,
            Status::Healthy,
            Status::Failed,
            Status::Errored,
            Status::Paused,
        ]
        .into_iter()
        .find(|s| s.as_str() == raw)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The name of a case (the account that owns snitches): 1 to 64 characters from
/// `[A-Za-z0-9_.-]`, unique on a server.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CaseId(Arc<str>);

impl CaseId {
    /// Parses a case id: 1 to 64 characters from `[A-Za-z0-9_.-]`.
    pub fn parse(raw: &str) -> Result<Self, Validation> {
        let ok = !raw.is_empty()
            && raw.len() <= 64
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if ok {
            Ok(CaseId(raw.into()))
        } else {
            Err(Validation::new(
                "case",
                "must be 1 to 64 characters of letters, digits, '_', '.' or '-'",
            ))
        }
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a case's plan allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Plan {
    /// Creating a snitch beyond this many gives `plan_limit_reached`.
    pub max_snitches: u32,
    /// Whether error check-ins make a snitch `errored` (else they count as success).
    pub error_notices: bool,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            max_snitches: 100,
            error_notices: true,
        }
    }
}

/// The account that owns snitches, with its team and plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// The case's id.
    pub id: CaseId,
    /// Team members who receive alerts when a snitch has no `alert_email` override.
    pub members: Vec<EmailAddress>,
    /// The case's plan and its limits.
    pub plan: Plan,
    /// On hold after failed payments: every API call is refused, check-ins still count.
    pub on_hold: bool,
}

impl Case {
    /// An active case with no members and the default plan.
    pub fn new(id: CaseId) -> Self {
        Case {
            id,
            members: Vec::new(),
            plan: Plan::default(),
            on_hold: false,
        }
    }
}

/// The optional message of a check-in (`m`), cut to 256 characters: a check-in is never
/// refused for its message.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CheckInMessage(Arc<str>);

impl CheckInMessage {
    /// `None` for an absent or empty message. Never refused: cut to 256 characters, NUL
    /// replaced by U+FFFD.
    pub fn truncating(raw: &str) -> Option<Self> {
        if raw.is_empty() {
            return None;
        }
        let cut: String = raw.chars().take(CHECK_IN_MESSAGE_MAX_CHARS).collect();
        Some(CheckInMessage(replace_nul(&cut).into()))
    }

    /// The message.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// How a job reported: `s` absent, empty or `0` is success, anything else an error.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Outcome {
    /// The run succeeded.
    #[default]
    Success,
    /// The exit status the job sent, cut to 64 characters, on one line
    /// ([`Outcome::from_exit_status`]).
    Error {
        /// The exit status the job sent.
        exit_status: String,
    },
}

impl Outcome {
    /// The outcome of the `s` parameter: absent, empty or `0` is success. Never refused:
    /// an exit status is cut to 64 characters and kept on one line, every NUL, control
    /// character, line or paragraph separator and bidirectional control replaced by
    /// U+FFFD ([`is_layout_control`]), so no alert can show part of it as a line of its
    /// own (docs/rules.md#check-ins).
    pub fn from_exit_status(s: Option<&str>) -> Outcome {
        match s.map(str::trim) {
            None | Some("") | Some("0") => Outcome::Success,
            Some(other) => Outcome::Error {
                exit_status: other
                    .chars()
                    .take(64)
                    .map(|c| if is_layout_control(c) { '\u{FFFD}' } else { c })
                    .collect(),
            },
        }
    }

    /// The exit status of a failed run; `None` for a success.
    pub fn exit_status(&self) -> Option<&str> {
        match self {
            Outcome::Success => None,
            Outcome::Error { exit_status } => Some(exit_status),
        }
    }

    /// Whether it is [`Outcome::Success`].
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Success)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_trimmed_and_bounded() {
        assert_eq!(
            SnitchName::parse("  backup ").map(|n| n.0),
            Ok("backup".into())
        );
        assert_eq!(
            SnitchName::parse("   "),
            Err(Validation::new("name", BLANK))
        );
        assert!(SnitchName::parse(&"é".repeat(255)).is_ok());
        assert_eq!(
            SnitchName::parse(&"é".repeat(256)),
            Err(Validation::new(
                "name",
                "is too long (maximum is 255 characters)"
            ))
        );
    }

    #[test]
    fn tags_keep_order_and_drop_duplicates() {
        let tags = Tags::parse(&["b", "a", "b", " a "]).expect("valid tags");
        let names: Vec<&str> = tags.iter().map(Tag::as_str).collect();
        assert_eq!(names, ["b", "a"]);
    }

    #[test]
    fn tags_reject_blank_commas_length_and_count() {
        assert_eq!(Tag::parse(""), Err(Validation::new("tags", BLANK)));
        // In a list, blank tags are dropped: some clients send `[""]` for "no tags".
        assert!(Tags::parse(&["", "  "]).expect("dropped").is_empty());
        let tags = Tags::parse(&["a", "", " \t ", "b"]).expect("dropped");
        assert_eq!(tags.iter().map(Tag::as_str).collect::<Vec<_>>(), ["a", "b"]);
        assert!(Tags::parse(&["a,b"]).is_err());
        assert!(Tags::parse(&["x".repeat(64)]).is_ok());
        assert!(Tags::parse(&["x".repeat(65)]).is_err());
        let fifty: Vec<String> = (0..50).map(|i| format!("t{i}")).collect();
        let mut tags = Tags::parse(&fifty).expect("fifty tags are allowed");
        assert!(
            tags.extend_parsed(&["t1"]).is_ok(),
            "a duplicate adds nothing"
        );
        assert!(tags.extend_parsed(&["t50"]).is_err());
        assert_eq!(tags.len(), 50, "a failed extend changes nothing");
    }

    #[test]
    fn names_and_tags_refuse_control_characters_notes_keep_line_breaks() {
        fn control<T>(attribute: &str) -> Result<T, Validation> {
            Err(Validation::new(attribute, CONTAINS_CONTROL))
        }
        for raw in [
            "a\r\nX-Inj: 1",
            "tab\there",
            "esc\u{1b}[31m",
            "del\u{7f}",
            "c1\u{85}",
        ] {
            assert_eq!(SnitchName::parse(raw), control("name"), "{raw:?}");
            assert_eq!(Tag::parse(raw), control("tags"), "{raw:?}");
            assert_eq!(Tags::parse(&[raw]), control("tags"), "{raw:?}");
            // What a store held before the rule still reads back.
            assert!(SnitchName::parse_stored(raw).is_ok());
            assert!(Tags::parse_stored(&[raw]).is_ok());
        }
        // NUL keeps its own message.
        assert_eq!(
            SnitchName::parse("a\0"),
            Err(Validation::new("name", CONTAINS_NUL))
        );
        assert!(Notes::parse("line one\r\nline two\tindented").is_ok());
    }

    #[test]
    fn notes_are_bounded_in_characters() {
        assert!(Notes::parse(&"ü".repeat(10_000)).is_ok());
        assert!(Notes::parse(&"ü".repeat(10_001)).is_err());
    }

    #[test]
    fn alert_emails_parse_lists_and_strings() {
        let list = AlertEmails::parse_comma_separated("a@x.test, b@y.test,").expect("valid");
        let got: Vec<&str> = list.iter().map(EmailAddress::as_str).collect();
        assert_eq!(got, ["a@x.test", "b@y.test"]);
        assert!(AlertEmails::parse(&["not an address"]).is_err());
        let many: Vec<String> = (0..21).map(|i| format!("u{i}@x.test")).collect();
        assert!(AlertEmails::parse(&many).is_err());
        assert!(AlertEmails::parse(&many[..20]).is_ok());
        assert!(AlertEmails::parse::<&str>(&[]).expect("empty").is_empty());
    }

    #[test]
    fn interval_messages() {
        assert_eq!(parse_interval(""), Err(Validation::new("interval", BLANK)));
        let err = parse_interval("fortnightly").expect_err("not an interval");
        assert_eq!(err.attribute, "interval");
        assert!(err.message.contains("1_minute") && err.message.contains("monthly"));
        assert_eq!(parse_interval("weekly"), Ok(Interval::Weekly));
    }

    #[test]
    fn smart_needs_an_hour() {
        assert!(check_alert_type_fits(AlertType::Smart, Interval::Minute30).is_err());
        assert!(check_alert_type_fits(AlertType::Smart, Interval::Hourly).is_ok());
        assert!(check_alert_type_fits(AlertType::Basic, Interval::Minute1).is_ok());
    }

    #[test]
    fn tokens_are_lowercase_alphanumeric_and_long_enough() {
        assert!(Token::parse("abcdefghij012345").is_ok());
        assert!(Token::parse("abcdefghij01234").is_err());
        assert!(Token::parse("ABCDEFGHIJ012345").is_err());
        assert!(Token::parse("abcdefghij01234-").is_err());
        assert!(Token::parse("../../etc/passwd0").is_err());
    }

    #[test]
    fn outcomes_from_exit_status() {
        assert_eq!(Outcome::from_exit_status(None), Outcome::Success);
        assert_eq!(Outcome::from_exit_status(Some("")), Outcome::Success);
        assert_eq!(Outcome::from_exit_status(Some("0")), Outcome::Success);
        assert_eq!(
            Outcome::from_exit_status(Some("1")),
            Outcome::Error {
                exit_status: "1".into()
            }
        );
    }

    #[test]
    fn messages_are_truncated_not_refused() {
        assert_eq!(CheckInMessage::truncating(""), None);
        let long = "ß".repeat(300);
        let m = CheckInMessage::truncating(&long).expect("non-empty");
        assert_eq!(m.as_str().chars().count(), 256);
    }

    #[test]
    fn text_fields_refuse_nul_naming_the_attribute() {
        fn nul<T>(attribute: &str) -> Result<T, Validation> {
            Err(Validation::new(attribute, CONTAINS_NUL))
        }
        assert_eq!(SnitchName::parse("a\0b"), nul("name"));
        assert_eq!(Tag::parse("\0"), nul("tags"));
        assert_eq!(Notes::parse("x\0"), nul("notes"));
        assert_eq!(AlertEmails::parse(&["a\0@example.com"]), nul("alert_email"));
    }

    /// docs/rules.md#check-ins: an exit status is kept on one line, bounded, with no
    /// character that breaks or reorders a line, so no reader can take part of it for
    /// text of ours.
    #[test]
    fn an_exit_status_is_one_bounded_line_without_control_characters() {
        for hostile in [
            "7\n\nThis alert is a test. No action needed.",
            "7\r\nStatus: healthy",
            "7\u{2028}next\u{2029}para\u{85}nel\u{b}\u{c}\u{1b}[2J",
            "7\u{202e}\u{2066}\u{2067}\u{2068}\u{2069}\u{200e}\u{200f}\u{61c}\u{202a}",
            "7\t\0x",
        ] {
            let outcome = Outcome::from_exit_status(Some(hostile));
            let kept = outcome.exit_status().expect("an error");
            assert!(
                !kept.chars().any(is_layout_control),
                "{hostile:?} kept as {kept:?}"
            );
            assert!(
                kept.starts_with('7') && kept.contains('\u{FFFD}'),
                "{kept:?}"
            );
        }
        assert_eq!(
            Outcome::from_exit_status(Some("7\n\nThis alert")).exit_status(),
            Some("7\u{FFFD}\u{FFFD}This alert")
        );
        let long = Outcome::from_exit_status(Some(&format!("7{}", "\u{202e}".repeat(1000))));
        assert_eq!(long.exit_status().map(|s| s.chars().count()), Some(64));
    }

    #[test]
    fn check_in_text_keeps_nul_as_a_replacement_character() {
        let m = CheckInMessage::truncating("a\0b").expect("non-empty");
        assert_eq!(m.as_str(), "a\u{FFFD}b");
        assert_eq!(
            Outcome::from_exit_status(Some("\0")),
            Outcome::Error {
                exit_status: "\u{FFFD}".to_owned()
            }
        );
    }
}
