//! The admin commands of the server binary (`cases …`, `keys …`, `migrate`): what they
//! check, what they change in the store, and what they print.
//!
//! Each command opens the store the configuration names, exactly as `serve` does
//! ([`Config::store_location`]: the SQLite file `data_path`, or `database_url`), runs its
//! migrations, does one thing and closes the store. Input is checked with the API's rules
//! (case ids, e-mail addresses, plan numbers); every failure is one line of text
//! ([`AdminError`]), never a panic. The in-memory store is refused: it would keep nothing
//! beyond the command.
//!
//! Keys are made by [`ApiKeys::create`], the same path the server's `demo` key takes:
//! random, printed once, stored as a SHA-256 digest with a 6-character prefix (so a person
//! can tell keys apart in `keys list`, which never prints a key). Running servers pick up
//! a new or revoked key within [`snitch_http::REFRESH_EVERY`].

use std::io::Write;
use std::sync::Arc;

use chrono::SecondsFormat;
use snitch_core::{
    AlertEmails, ApiKeyRecord, Case, CaseId, Plan, Storage, StorageError, SystemClock, Timestamp,
};
use snitch_http::ApiKeys;
#[cfg(feature = "postgres")]
use snitch_store_postgres::PgStorage;
#[cfg(feature = "sqlite")]
use snitch_store_sqlite::SqliteStorage;

#[cfg(feature = "postgres")]
use crate::server::open_postgres;
#[cfg(feature = "sqlite")]
use crate::server::open_sqlite;
use crate::server::{Config, ServerError, StoreLocation};

/// The longest label a key may have, in characters.
pub const LABEL_MAX_CHARS: usize = 100;

/// One admin command, with its arguments as given on the command line (checked when run).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdminCommand {
    /// Lists every case with its members, plan and hold flag.
    CasesList,
    /// Makes a case; an existing one is an error.
    CasesCreate {
        /// The case id.
        name: String,
        /// Its settings.
        options: CaseOptions,
    },
    /// Changes the given settings of an existing case.
    CasesUpdate {
        /// The case id.
        name: String,
        /// The settings to change.
        options: CaseOptions,
    },
    /// Makes a key for a case and prints it once.
    KeysCreate {
        /// The case id.
        case: String,
        /// What the key is for.
        label: String,
    },
    /// Lists a case's keys (never the keys themselves).
    KeysList {
        /// The case id.
        case: String,
    },
    /// Revokes a key by its id.
    KeysRevoke {
        /// The key's id, as `keys list` shows it.
        id: String,
    },
    /// Runs the store's migrations.
    Migrate,
}

/// The settings of `cases create` and `cases update`, as text: `None` leaves a setting as
/// it is (or at its default, for a new case).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CaseOptions {
    /// Comma-separated e-mail addresses; an empty string clears the list.
    pub members: Option<String>,
    /// A whole number: the most snitches the case may have.
    pub max_snitches: Option<String>,
    /// `true` or `false`.
    pub error_notices: Option<String>,
    /// `true` or `false`.
    pub on_hold: Option<String>,
}

impl CaseOptions {
    fn is_empty(&self) -> bool {
        self == &CaseOptions::default()
    }

    /// `case` with these settings applied, each checked like API input.
    fn apply_to(&self, mut case: Case) -> Result<Case, AdminError> {
        if let Some(members) = &self.members {
            let parsed = AlertEmails::parse_comma_separated(members)
                .map_err(|v| AdminError::Invalid(format!("--members: {}", v.message)))?;
            case.members = parsed.as_slice().to_vec();
        }
        if let Some(max) = &self.max_snitches {
            case.plan.max_snitches = max.trim().parse::<u32>().map_err(|_| {
                AdminError::Invalid(format!(
                    "--max-snitches: {max:?} is not a whole number from 0 to {}",
                    u32::MAX
                ))
            })?;
        }
        if let Some(flag) = &self.error_notices {
            case.plan.error_notices = parse_flag("--error-notices", flag)?;
        }
        if let Some(flag) = &self.on_hold {
            case.on_hold = parse_flag("--on-hold", flag)?;
        }
        Ok(case)
    }
}

fn parse_flag(option: &str, raw: &str) -> Result<bool, AdminError> {
    match raw.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(AdminError::Invalid(format!(
            "{option}: {raw:?} is not true or false"
        ))),
    }
}

/// Why an admin command failed: one line, printed on stderr by the binary.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// The input breaks a rule (a case id, an e-mail address, a number, a label).
    #[error("{0}")]
    Invalid(String),
    /// The case or key named does not exist, or the case to create does.
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    /// The case to create exists already.
    Exists(String),
    /// The configuration, or opening the store, failed.
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("storage failed: {0}")]
    /// The store failed.
    Storage(#[from] StorageError),
    #[error("cannot write the output: {0}")]
    /// The output could not be written.
    Output(#[from] std::io::Error),
}

/// The admin commands over one store: what [`run`] does once it has opened it.
pub struct Admin {
    storage: Arc<dyn Storage>,
    keys: ApiKeys,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").finish_non_exhaustive()
    }
}

impl Admin {
    /// The admin commands over `storage`.
    pub fn new(storage: Arc<dyn Storage>) -> Self {
        let keys = ApiKeys::with_storage(storage.clone(), Arc::new(SystemClock));
        Admin { storage, keys }
    }

    /// Every case, by id.
    pub async fn cases(&self) -> Result<Vec<Case>, AdminError> {
        Ok(self.storage.cases().await?)
    }

    /// Makes the case `name` with `options` over the defaults of a configured case.
    pub async fn create_case(&self, name: &str, options: &CaseOptions) -> Result<Case, AdminError> {
        let id = case_id(name)?;
        let case = options.apply_to(Case::new(id.clone()))?;
        if self.storage.case(&id).await?.is_some() {
            return Err(AdminError::Exists(format!(
                "case {:?} exists already (change it with `cases update`)",
                id.as_str()
            )));
        }
        self.storage.upsert_case(&case).await?;
        Ok(case)
    }

    /// Changes the given settings of the case `name`.
    pub async fn update_case(&self, name: &str, options: &CaseOptions) -> Result<Case, AdminError> {
        let id = case_id(name)?;
        if options.is_empty() {
            return Err(AdminError::Invalid(
                "nothing to change: give --members, --max-snitches, --error-notices or --on-hold"
                    .into(),
            ));
        }
        let stored = self.stored_case(&id).await?;
        let case = options.apply_to(stored)?;
        self.storage.upsert_case(&case).await?;
        Ok(case)
    }

    /// Makes a key for the case `case`: the key (shown once) and its record.
    pub async fn create_key(
        &self,
        case: &str,
        label: &str,
    ) -> Result<(String, ApiKeyRecord), AdminError> {
        let id = case_id(case)?;
        check_label(label)?;
        self.stored_case(&id).await?;
        let made = self.keys.create(&id, label).await?;
        Ok((made.key, made.record))
    }

    /// The keys of the case `case`, revoked ones included, oldest first.
    pub async fn keys(&self, case: &str) -> Result<Vec<ApiKeyRecord>, AdminError> {
        let id = case_id(case)?;
        self.stored_case(&id).await?;
        Ok(self.storage.api_keys(Some(id)).await?)
    }

    /// Revokes the key `id`: its record as it was before (so `revoked` says whether it
    /// already was).
    pub async fn revoke_key(&self, id: &str) -> Result<ApiKeyRecord, AdminError> {
        let unknown = || AdminError::NotFound(format!("no API key with id {id:?}"));
        if id.trim().is_empty() {
            return Err(unknown());
        }
        let record = self
            .storage
            .api_keys(None)
            .await?
            .into_iter()
            .find(|k| k.id == id)
            .ok_or_else(unknown)?;
        if !self.storage.revoke_api_key(id).await? {
            return Err(unknown());
        }
        Ok(record)
    }

    async fn stored_case(&self, id: &CaseId) -> Result<Case, AdminError> {
        self.storage.case(id).await?.ok_or_else(|| {
            AdminError::NotFound(format!(
                "no case {:?} (see `cases list`; make one with `cases create`)",
                id.as_str()
            ))
        })
    }
}

fn case_id(name: &str) -> Result<CaseId, AdminError> {
    CaseId::parse(name).map_err(|v| AdminError::Invalid(format!("case {name:?}: {}", v.message)))
}

fn check_label(label: &str) -> Result<(), AdminError> {
    if label.chars().any(char::is_control) {
        return Err(AdminError::Invalid(
            "--label: can't contain control characters".into(),
        ));
    }
    if label.chars().count() > LABEL_MAX_CHARS {
        return Err(AdminError::Invalid(format!(
            "--label: is too long (maximum is {LABEL_MAX_CHARS} characters)"
        )));
    }
    Ok(())
}

/// An open durable store and how to close it.
enum Opened {
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
    /// A build with neither durable store opens none: [`Opened::open`] refuses first.
    #[cfg(not(any(feature = "sqlite", feature = "postgres")))]
    #[allow(dead_code)]
    None(std::convert::Infallible),
}

impl Opened {
    async fn open(config: &Config) -> Result<(Opened, String), AdminError> {
        match config.store_location()? {
            StoreLocation::Memory => Err(AdminError::Invalid(
                "admin commands need a durable store: store = \"memory\" keeps nothing \
                 beyond this command"
                    .into(),
            )),
            #[cfg(feature = "postgres")]
            StoreLocation::Postgres(url) => Ok((
                Opened::Postgres(open_postgres(config, &url).await?),
                "the PostgreSQL database of database_url".into(),
            )),
            #[cfg(not(feature = "postgres"))]
            StoreLocation::Postgres(_) => {
                Err(crate::server::bootstrap::not_compiled("PostgreSQL", "postgres").into())
            }
            #[cfg(not(feature = "sqlite"))]
            StoreLocation::SqliteFile(_) | StoreLocation::SqliteUrl(_) => {
                Err(crate::server::bootstrap::not_compiled("SQLite", "sqlite").into())
            }
            #[cfg(feature = "sqlite")]
            location => {
                let what = match &location {
                    StoreLocation::SqliteFile(path) => {
                        format!("the SQLite database {}", path.display())
                    }
                    _ => "the SQLite database of database_url".into(),
                };
                Ok((Opened::Sqlite(open_sqlite(config, &location).await?), what))
            }
        }
    }

    fn storage(&self) -> Arc<dyn Storage> {
        match self {
            #[cfg(feature = "sqlite")]
            Opened::Sqlite(pool) => Arc::new(SqliteStorage::new(pool.clone())),
            #[cfg(feature = "postgres")]
            Opened::Postgres(pool) => Arc::new(PgStorage::new(pool.clone())),
            #[cfg(not(any(feature = "sqlite", feature = "postgres")))]
            Opened::None(never) => match *never {},
        }
    }

    /// The newest migration of this kind of store, as `<version> (<description>)`.
    fn schema_version(&self) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Opened::Sqlite(_) => newest_migration(&snitch_store_sqlite::MIGRATOR),
            #[cfg(feature = "postgres")]
            Opened::Postgres(_) => newest_migration(&snitch_store_postgres::MIGRATOR),
            #[cfg(not(any(feature = "sqlite", feature = "postgres")))]
            Opened::None(never) => match *never {},
        }
    }

    async fn close(self) {
        match self {
            #[cfg(feature = "sqlite")]
            Opened::Sqlite(pool) => pool.close().await,
            #[cfg(feature = "postgres")]
            Opened::Postgres(pool) => pool.close().await,
            #[cfg(not(any(feature = "sqlite", feature = "postgres")))]
            Opened::None(never) => match never {},
        }
    }
}

/// `<version> (<description>)` of the newest migration of `migrator`.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn newest_migration(migrator: &sqlx::migrate::Migrator) -> String {
    migrator
        .iter()
        .max_by_key(|m| m.version)
        .map_or_else(String::new, |m| {
            format!("{} ({})", m.version, m.description)
        })
}

/// Runs `command` on the store of `config`: results on `out`, notes for the person at the
/// terminal (what was done, warnings) on `notes`.
pub async fn run(
    config: &Config,
    command: &AdminCommand,
    out: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<(), AdminError> {
    let (opened, what) = Opened::open(config).await?;
    let admin = Admin::new(opened.storage());
    let result = execute(config, &admin, command, out, notes).await;
    if result.is_ok() && *command == AdminCommand::Migrate {
        writeln!(out, "{what} is migrated to {}", opened.schema_version())?;
    }
    opened.close().await;
    result
}

async fn execute(
    config: &Config,
    admin: &Admin,
    command: &AdminCommand,
    out: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<(), AdminError> {
    let configured = |name: &str| config.cases.iter().any(|c| c.name == name);
    match command {
        AdminCommand::Migrate => {}
        AdminCommand::CasesList => {
            let mut rows = vec![case_header()];
            for case in admin.cases().await? {
                rows.push(case_row(&case));
            }
            write!(out, "{}", table(&rows))?;
        }
        AdminCommand::CasesCreate { name, options } => {
            let case = admin.create_case(name, options).await?;
            writeln!(notes, "made case {:?}", case.id.as_str())?;
            write!(out, "{}", table(&[case_header(), case_row(&case)]))?;
        }
        AdminCommand::CasesUpdate { name, options } => {
            let case = admin.update_case(name, options).await?;
            writeln!(notes, "updated case {:?}", case.id.as_str())?;
            if configured(case.id.as_str()) {
                writeln!(
                    notes,
                    "warning: case {:?} is also in the configuration file, whose settings \
                     are applied again at every server start",
                    case.id.as_str()
                )?;
            }
            write!(out, "{}", table(&[case_header(), case_row(&case)]))?;
        }
        AdminCommand::KeysCreate { case, label } => {
            let (key, record) = admin.create_key(case, label).await?;
            writeln!(
                notes,
                "made API key {} for case {:?}; it is shown only now, and running servers \
                 accept it within a second:",
                record.id,
                record.case_id.as_str()
            )?;
            writeln!(out, "{key}")?;
        }
        AdminCommand::KeysList { case } => {
            let mut rows = vec![columns(&[
                "ID",
                "LABEL",
                "PREFIX",
                "CREATED",
                "LAST_USED",
                "REVOKED",
            ])];
            for key in admin.keys(case).await? {
                rows.push(vec![
                    key.id.clone(),
                    or_dash(&key.label),
                    format!("{}…", key.prefix),
                    time(key.created_at),
                    key.last_used_at.map_or_else(|| "never".into(), time),
                    if key.revoked { "yes" } else { "no" }.into(),
                ]);
            }
            write!(out, "{}", table(&rows))?;
        }
        AdminCommand::KeysRevoke { id } => {
            let before = admin.revoke_key(id).await?;
            let case = before.case_id.as_str();
            if before.revoked {
                writeln!(out, "API key {id} of case {case:?} was already revoked")?;
            } else {
                writeln!(
                    out,
                    "revoked API key {id} of case {case:?}; running servers refuse it within \
                     a second"
                )?;
            }
        }
    }
    Ok(())
}

fn columns(names: &[&str]) -> Vec<String> {
    names.iter().map(|&n| n.to_owned()).collect()
}

fn case_header() -> Vec<String> {
    columns(&[
        "NAME",
        "MEMBERS",
        "MAX_SNITCHES",
        "ERROR_NOTICES",
        "ON_HOLD",
    ])
}

fn case_row(case: &Case) -> Vec<String> {
    let members: Vec<&str> = case.members.iter().map(|m| m.as_str()).collect();
    let Plan {
        max_snitches,
        error_notices,
    } = case.plan;
    vec![
        case.id.as_str().to_owned(),
        or_dash(&members.join(",")),
        max_snitches.to_string(),
        error_notices.to_string(),
        case.on_hold.to_string(),
    ]
}

fn or_dash(text: &str) -> String {
    if text.is_empty() {
        "-".into()
    } else {
        text.to_owned()
    }
}

fn time(at: Timestamp) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Rows as left-aligned columns two spaces apart.
fn table(rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = Vec::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            let w = cell.chars().count();
            match widths.get_mut(i) {
                Some(max) => *max = (*max).max(w),
                None => widths.push(w),
            }
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 < row.len() {
                let pad = widths[i] - cell.chars().count();
                line += &format!("{cell}{}  ", " ".repeat(pad));
            } else {
                line += cell;
            }
        }
        out += line.trim_end();
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use snitch_http::KeyDigest;
    use snitch_store_memory::MemoryStorage;

    fn admin() -> (Admin, Arc<dyn Storage>) {
        let storage: Arc<dyn Storage> = Arc::new(MemoryStorage::new());
        (Admin::new(storage.clone()), storage)
    }

    fn options(members: &str, max: &str, errors: &str, hold: &str) -> CaseOptions {
        let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        CaseOptions {
            members: some(members),
            max_snitches: some(max),
            error_notices: some(errors),
            on_hold: some(hold),
        }
    }

    #[tokio::test]
    async fn cases_are_made_and_updated_with_the_api_rules() {
        let (admin, storage) = admin();
        let made = admin
            .create_case("acme", &options("a@acme.test, b@acme.test", "5", "", ""))
            .await
            .expect("made");
        assert_eq!(made.members.len(), 2);
        assert_eq!(made.plan.max_snitches, 5);
        assert!(made.plan.error_notices && !made.on_hold, "defaults kept");
        assert!(matches!(
            admin.create_case("acme", &CaseOptions::default()).await,
            Err(AdminError::Exists(_))
        ));

        let updated = admin
            .update_case("acme", &options("", "", "false", "true"))
            .await
            .expect("updated");
        assert_eq!(updated.members, made.members, "members left as they were");
        assert!(!updated.plan.error_notices && updated.on_hold);
        assert_eq!(
            storage
                .case(&CaseId::parse("acme").expect("valid"))
                .await
                .expect("read"),
            Some(updated)
        );
        let cleared = CaseOptions {
            members: Some(String::new()),
            ..CaseOptions::default()
        };
        assert!(admin
            .update_case("acme", &cleared)
            .await
            .expect("cleared")
            .members
            .is_empty());

        for (name, bad) in [
            ("no spaces", CaseOptions::default()),
            ("beta", options("not-an-address", "", "", "")),
            ("beta", options("", "-1", "", "")),
            ("beta", options("", "lots", "", "")),
            ("beta", options("", "", "yes", "")),
            ("beta", options("", "", "", "1")),
        ] {
            let err = admin.create_case(name, &bad).await.expect_err(name);
            assert!(matches!(err, AdminError::Invalid(_)), "{err}");
            assert!(!err.to_string().contains('\n'), "one line: {err}");
        }
        assert!(matches!(
            admin.update_case("ghost", &options("", "3", "", "")).await,
            Err(AdminError::NotFound(_))
        ));
        assert!(matches!(
            admin.update_case("acme", &CaseOptions::default()).await,
            Err(AdminError::Invalid(_))
        ));
        assert_eq!(admin.cases().await.expect("list").len(), 1);
    }

    #[tokio::test]
    async fn keys_are_stored_as_digests_listed_without_the_key_and_revoked() {
        let (admin, storage) = admin();
        admin
            .create_case("acme", &CaseOptions::default())
            .await
            .expect("made");
        let (key, record) = admin.create_key("acme", "ci").await.expect("made");
        assert!(key.len() >= 32);
        assert_eq!(record.digest, KeyDigest::of(&key).to_hex());
        assert_eq!(record.prefix.chars().count(), snitch_http::PREFIX_CHARS);
        let listed = admin.keys("acme").await.expect("list");
        assert_eq!(listed, vec![record.clone()]);

        let before = admin.revoke_key(&record.id).await.expect("revoked");
        assert!(!before.revoked);
        assert!(admin.revoke_key(&record.id).await.expect("again").revoked);
        assert!(storage.api_keys(None).await.expect("list")[0].revoked);

        assert!(matches!(
            admin.create_key("ghost", "").await,
            Err(AdminError::NotFound(_))
        ));
        assert!(matches!(
            admin.create_key("acme", "line\nbreak").await,
            Err(AdminError::Invalid(_))
        ));
        assert!(matches!(
            admin.keys("ghost").await,
            Err(AdminError::NotFound(_))
        ));
        assert!(matches!(
            admin.revoke_key("nosuchkey").await,
            Err(AdminError::NotFound(_))
        ));
    }

    #[test]
    fn tables_align_their_columns() {
        let rows = vec![
            columns(&["ID", "LABEL"]),
            columns(&["abc", "-"]),
            columns(&["x", "long label"]),
        ];
        assert_eq!(table(&rows), "ID   LABEL\nabc  -\nx    long label\n");
    }
}
