//! Opening the configured store (migrated) and loading the configured cases into it.

#[cfg(feature = "sqlite")]
use std::path::Path;
use std::sync::Arc;
#[cfg(feature = "postgres")]
use std::time::Duration;

use snitch_core::{AlertEmails, Case, CaseId, Plan, SnitchService, Storage, WebhookUrl};
use snitch_http::ApiKeys;
use snitch_store_memory::MemoryStorage;
#[cfg(feature = "postgres")]
use snitch_store_postgres::PgStorage;
#[cfg(feature = "sqlite")]
use snitch_store_sqlite::SqliteStorage;

use super::{Config, ServerError, StoreLocation};

/// Adds the configured channels the case does not have yet: one of the same kind and
/// settings already stored is kept (with its id, so a restart adds nothing).
async fn ensure_channels(
    service: &SnitchService,
    case: &Case,
    channels: &[serde_json::Map<String, serde_json::Value>],
) -> Result<(), String> {
    use snitch_core::service::ListedChannel;
    use snitch_core::{ChannelKind, ChannelSettings};
    let stored = service.channels(case).await.map_err(|e| e.to_string())?;
    for (n, raw) in channels.iter().enumerate() {
        let described = |e: String| format!("channel {}: {e}", n + 1);
        let input = snitch_http::channel_input(Some(&serde_json::Value::Object(raw.clone())))
            .map_err(|v| described(v.to_string()))?;
        let kind = input
            .kind
            .as_deref()
            .and_then(ChannelKind::parse)
            .ok_or_else(|| described("kind: must be a channel kind".to_owned()))?;
        let present = match kind {
            ChannelKind::Webhook => false,
            _ => {
                let settings = ChannelSettings::parse(
                    kind,
                    input.settings.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                )
                .map_err(|v| described(v.to_string()))?;
                stored.iter().any(|s| match s {
                    ListedChannel::Channel(c) => c.settings == settings,
                    ListedChannel::Webhook(_) => false,
                })
            }
        };
        let webhook_present = kind == ChannelKind::Webhook
            && stored.iter().any(|s| match s {
                ListedChannel::Webhook(h) => input
                    .settings
                    .iter()
                    .any(|(k, v)| k == "url" && WebhookUrl::parse(v).is_ok_and(|u| u == h.url)),
                ListedChannel::Channel(_) => false,
            });
        if present || webhook_present {
            continue;
        }
        service
            .create_channel(case, &input)
            .await
            .map_err(|e| described(e.to_string()))?;
    }
    Ok(())
}

/// The store of [`Config::store_location`], opened and migrated.
pub async fn open_storage(config: &Config) -> Result<Arc<dyn Storage>, ServerError> {
    Ok(match config.store_location()? {
        StoreLocation::Memory => {
            tracing::info!("using the in-memory store: data is lost when the server stops");
            Arc::new(MemoryStorage::new())
        }
        #[cfg(feature = "postgres")]
        StoreLocation::Postgres(url) => {
            Arc::new(PgStorage::new(open_postgres(config, &url).await?))
        }
        #[cfg(not(feature = "postgres"))]
        StoreLocation::Postgres(_) => return Err(not_compiled("PostgreSQL", "postgres")),
        #[cfg(feature = "sqlite")]
        location => Arc::new(SqliteStorage::new(open_sqlite(config, &location).await?)),
        #[cfg(not(feature = "sqlite"))]
        StoreLocation::SqliteFile(_) | StoreLocation::SqliteUrl(_) => {
            return Err(not_compiled("SQLite", "sqlite"))
        }
    })
}

/// The error for a store this build was compiled without.
#[cfg_attr(all(feature = "postgres", feature = "sqlite"), allow(dead_code))]
pub(crate) fn not_compiled(store: &str, feature: &str) -> ServerError {
    ServerError::Config(format!(
        "the configuration asks for the {store} store, but this build of Snitch was compiled \
         without the `{feature}` feature (set store = \"memory\", or rebuild with it)"
    ))
}

/// How long a pooled Postgres connection may sit idle before it is pinged on its next
/// use.
#[cfg(feature = "postgres")]
const POOL_PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// A pool on PostgreSQL at `url`, migrated.
#[cfg(feature = "postgres")]
pub async fn open_postgres(config: &Config, url: &str) -> Result<sqlx::PgPool, ServerError> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(config.database_max_connections)
        .acquire_timeout(Duration::from_secs(10))
        // A connection is pinged before use only after it sat idle for a while (the
        // database may have restarted meanwhile): under load the ping was a round trip
        // per batch of check-ins, about 4 % of the server's time. A connection that
        // broke while in use, or within a second of its last use (the database
        // restarted under load), fails its statement, and the pool drops it: those
        // check-ins are answered 503 and their jobs try again.
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for > POOL_PING_AFTER_IDLE {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
        .connect(url)
        .await
        // The URL may hold a password: name the failure, not the URL.
        .map_err(|e| ServerError::Config(format!("cannot connect to database_url: {e}")))?;
    snitch_store_postgres::MIGRATOR
        .run(&pool)
        .await
        .map_err(|e| ServerError::Config(format!("cannot migrate the database: {e}")))?;
    tracing::info!("using PostgreSQL storage");
    Ok(pool)
}

/// A pool on the SQLite database of `location` (a file, created with its directory if
/// missing, or a `sqlite:` URL), migrated.
#[cfg(feature = "sqlite")]
pub async fn open_sqlite(
    config: &Config,
    location: &StoreLocation,
) -> Result<sqlx::SqlitePool, ServerError> {
    let connections = config.database_max_connections;
    let pool = match location {
        StoreLocation::SqliteFile(path) => {
            create_parent_dir(path)?;
            snitch_store_sqlite::connect(path, connections)
                .await
                .map_err(|e| ServerError::Config(format!("cannot open {}: {e}", path.display())))?
        }
        StoreLocation::SqliteUrl(url) => {
            snitch_store_sqlite::connect_url(url, connections)
                .await
                .map_err(|e| ServerError::Config(format!("cannot open database_url: {e}")))?
        }
        other => {
            return Err(ServerError::Config(format!(
                "not a SQLite location: {other:?}"
            )))
        }
    };
    snitch_store_sqlite::MIGRATOR
        .run(&pool)
        .await
        .map_err(|e| ServerError::Config(format!("cannot migrate the database: {e}")))?;
    match location {
        StoreLocation::SqliteFile(path) => {
            tracing::info!(path = %path.display(), "using SQLite storage");
        }
        _ => tracing::info!("using SQLite storage at database_url"),
    }
    Ok(pool)
}

/// Creates the directory a database file goes in, if missing.
#[cfg(feature = "sqlite")]
fn create_parent_dir(path: &Path) -> Result<(), ServerError> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir).map_err(|e| {
            ServerError::Config(format!(
                "cannot create the directory {}: {e}",
                dir.display()
            ))
        }),
        _ => Ok(()),
    }
}

/// Stores the configured cases, their keys (once) and hooks; with none configured and none
/// stored, makes a `demo` case with a key on the first start and returns that key (`None`
/// on later starts, or when the admin commands made cases).
pub(super) async fn load_cases(
    config: &Config,
    service: &SnitchService,
    keys: &ApiKeys,
) -> Result<Option<String>, ServerError> {
    let invalid = |case: &str, what: String| ServerError::Config(format!("case {case:?}: {what}"));
    if config.cases.is_empty() {
        // Made once, on the first start, and kept: a later start finds it with its key.
        let id = CaseId::parse("demo").map_err(|v| invalid("demo", v.message))?;
        let storage = service.storage();
        let stored = storage.cases().await?;
        let demo_ready = stored.iter().any(|c| c.id == id)
            && !storage.api_keys(Some(id.clone())).await?.is_empty();
        // Cases made with the admin commands are the store's own: no demo beside them.
        if demo_ready || stored.iter().any(|c| c.id != id) {
            return Ok(None);
        }
        storage.upsert_case(&Case::new(id.clone())).await?;
        return Ok(Some(keys.create(&id, "demo").await?.key));
    }
    for c in &config.cases {
        let id = CaseId::parse(&c.name).map_err(|v| invalid(&c.name, v.message))?;
        let members = AlertEmails::parse(&c.members)
            .map_err(|v| invalid(&c.name, format!("members: {}", v.message)))?;
        let case = Case {
            id: id.clone(),
            members: members.as_slice().to_vec(),
            plan: Plan {
                max_snitches: c.max_snitches,
                error_notices: c.error_notices,
            },
            on_hold: c.on_hold,
        };
        service.storage().upsert_case(&case).await?;
        for key in &c.api_keys {
            keys.ensure_plain(key, &id, "configuration")
                .await
                .map_err(|e| invalid(&c.name, e))?;
        }
        // Hooks go through the service so they are validated like API input; a case on
        // hold still gets its configured hooks, and one already stored is kept.
        let mut active = case.clone();
        active.on_hold = false;
        let stored: Vec<String> = service
            .webhooks(&active)
            .await
            .map_err(|e| invalid(&c.name, e.to_string()))?
            .into_iter()
            .map(|h| h.url.to_string())
            .collect();
        for url in &c.webhooks {
            let parsed = WebhookUrl::parse(url)
                .map_err(|v| invalid(&c.name, format!("webhook {url:?}: {}", v.message)))?;
            if stored.contains(&parsed.to_string()) {
                continue;
            }
            service
                .create_webhook(&active, url, None)
                .await
                .map_err(|e| invalid(&c.name, format!("webhook {url:?}: {e}")))?;
        }
        ensure_channels(service, &active, &c.channels)
            .await
            .map_err(|e| invalid(&c.name, e))?;
    }
    Ok(None)
}
