//! The claim of deliveries: the three fairness rounds of [`ClaimLimits`]
//! (docs/rules.md#delivery-isolation), set-based, in two ways that take the same rows, as
//! on Postgres (whose `claims.rs` says why they agree).
//!
//! A claim first ranks the earliest due deliveries of each budget (HTTP, e-mail), a window
//! of [`SqliteStorageOptions::claim_window`](crate::SqliteStorageOptions::claim_window)
//! read in time order (`EARLIEST_FIRST`), and takes what the rounds choose there when
//! nothing after the window could be chosen: the window holds every due one, or the budget
//! is full, or every later HTTP delivery goes to a destination at its cap. Otherwise it
//! walks every (case, channel kind) with pending deliveries (`BY_KEY`): 335 ms a claim at
//! 100,000 pending over 10,000 cases, against 3–4 ms for a window of 256 and 2 ms for one
//! of 64 (the `sqlite3` shell, three runs each). The claim is a write transaction, so every
//! check-in waits for it.

use std::sync::LazyLock;

use snitch_core::{ClaimLimits, Delivery, StorageError, Timestamp};
use snitch_store_sql::records::{DeliveryRow, DELIVERY_COLUMNS};
use snitch_store_sql::{backend, fetch, limit, Dialect};
use sqlx::query::QueryAs;
use sqlx::sqlite::SqliteArguments;
use sqlx::types::Json;
use sqlx::Sqlite;

use crate::records_lite::Lite;
use crate::writer::Writer;

/// Claims the deliveries due at `now` that `limits` let through, leased until
/// `lease_until`, earliest first; `window` is how many due deliveries of each budget the
/// claim reads before it walks the keys (at least a budget: [`ClaimLimits::window`]).
pub(crate) async fn claim_deliveries(
    writer: &Writer,
    now: Timestamp,
    lease_until: Timestamp,
    limits: &ClaimLimits,
    window: usize,
) -> Result<Vec<Delivery>, StorageError> {
    let busy_cases: Vec<(&str, &str, i64)> = limits
        .case_channels_in_flight
        .iter()
        .map(|(case, kind, n)| (case.as_str(), kind.as_str(), limit(*n)))
        .collect();
    let busy_destinations: Vec<(&str, i64)> = limits
        .destinations_in_flight
        .iter()
        .map(|(d, n)| (d.as_str(), limit(*n)))
        .collect();
    let mut w = writer.begin().await?;
    let rounds = Rounds {
        now,
        busy_cases: &busy_cases,
        busy_destinations: &busy_destinations,
        limits,
    };
    let (Json(chosen), settled): (Json<Vec<String>>, bool) = rounds
        .bind(&EARLIEST_FIRST)
        .bind(limit(limits.window(window)))
        .fetch_one(&mut *w.tx)
        .await
        .map_err(backend)?;
    let mut claimed = if !settled {
        let query = rounds.bind(&BY_KEY);
        fetch::all(query, &mut *w.tx, DeliveryRow::<Lite>::into_delivery).await?
    } else if chosen.is_empty() {
        Vec::new()
    } else {
        let query = sqlx::query_as(&CHOSEN).bind(Json(&chosen));
        fetch::all(query, &mut *w.tx, DeliveryRow::<Lite>::into_delivery).await?
    };
    if !claimed.is_empty() {
        let ids: Vec<&str> = claimed.iter().map(|d| d.id.as_str()).collect();
        sqlx::query(
            "UPDATE snitch_deliveries SET next_attempt_at = ?1 \
             WHERE id IN (SELECT value FROM json_each(?2))",
        )
        .bind(Lite::time(lease_until))
        .bind(Json(ids))
        .execute(&mut *w.tx)
        .await
        .map_err(backend)?;
    }
    w.commit().await?;
    for d in &mut claimed {
        d.next_attempt_at = Some(lease_until);
    }
    Ok(claimed)
}

/// What both claim statements take: `?1` now, then the in-flight counts and the limits.
struct Rounds<'a> {
    now: Timestamp,
    busy_cases: &'a [(&'a str, &'a str, i64)],
    busy_destinations: &'a [(&'a str, i64)],
    limits: &'a ClaimLimits,
}

impl<'a> Rounds<'a> {
    /// `statement` with its parameters `?1`–`?7` bound.
    fn bind<O>(&self, statement: &'a str) -> QueryAs<'a, Sqlite, O, SqliteArguments<'a>>
    where
        O: for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>,
    {
        sqlx::query_as(statement)
            .bind(Lite::time(self.now))
            .bind(Json(self.busy_cases))
            .bind(limit(self.limits.per_case_channel))
            .bind(Json(self.busy_destinations))
            .bind(limit(self.limits.per_destination))
            .bind(limit(self.limits.webhooks))
            .bind(limit(self.limits.emails))
    }
}

/// The in-flight counts from JSON: `?2` the (case, channel, count) triples, `?4` the
/// (destination, count) pairs, summed per key.
const IN_FLIGHT: &str = "busy_case AS ( \
       SELECT value ->> 0 AS case_id, value ->> 1 AS channel, sum(value ->> 2) AS n \
       FROM json_each(?2) GROUP BY 1, 2), \
     busy_destination AS ( \
       SELECT value ->> 0 AS destination, sum(value ->> 1) AS n \
       FROM json_each(?4) GROUP BY 1)";

/// The first `?8` due deliveries of one budget (`{is_email}`: 0 HTTP, 1 e-mail), down
/// `snitch_deliveries_due_by_class`.
fn window_of(is_email: u8, budget: &str) -> String {
    format!(
        "SELECT {is_email} AS is_email, {budget} AS budget, w.* FROM ( \
           SELECT id, case_id, channel, destination, next_attempt_at, seq \
           FROM snitch_deliveries \
           WHERE state = 'pending' AND (destination IS NULL) = {is_email} \
             AND next_attempt_at <= ?1 \
           ORDER BY next_attempt_at, seq LIMIT ?8) w \
         WHERE {budget} > 0"
    )
}

/// The rounds over the first `?8` due deliveries of each budget, in time order: `?1` now,
/// `?2` the (case, channel, count) in flight as JSON, `?3` the room per (case, channel),
/// `?4` the (destination, count) in flight as JSON, `?5` the room per destination, `?6`
/// and `?7` the HTTP deliveries (every kind but e-mail, which alone has no destination:
/// `Delivery::destination`) and e-mails to take. One row: the chosen ids as JSON, and
/// whether they settle the claim. The destinations with pending deliveries are found by a
/// skip-scan down `snitch_deliveries_pending_by_destination`, each asked for one due after
/// the window.
static EARLIEST_FIRST: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH RECURSIVE budgets(is_email, budget) AS ( \
           SELECT 0, ?6 WHERE ?6 > 0 UNION ALL SELECT 1, ?7 WHERE ?7 > 0), \
         early AS ({} UNION ALL {}), \
         placed AS ( \
           SELECT e.*, row_number() OVER (PARTITION BY e.is_email \
                                          ORDER BY e.next_attempt_at, e.seq) AS place \
           FROM early e), \
         {IN_FLIGHT}, \
         case_ok AS ( \
           SELECT * FROM ( \
             SELECT p.*, max(?3 - coalesce(b.n, 0), 0) AS room, \
               row_number() OVER (PARTITION BY p.case_id, p.channel \
                                  ORDER BY p.next_attempt_at, p.seq) AS n \
             FROM placed p LEFT JOIN busy_case b \
               ON b.case_id = p.case_id AND b.channel = p.channel) \
           WHERE n <= room), \
         destination_ranked AS ( \
           SELECT c.*, ?5 - coalesce(b.n, 0) AS destination_room, \
             row_number() OVER (PARTITION BY c.destination \
                                ORDER BY c.next_attempt_at, c.seq) AS destination_n \
           FROM case_ok c LEFT JOIN busy_destination b ON b.destination = c.destination), \
         chosen AS ( \
           SELECT * FROM ( \
             SELECT d.*, row_number() OVER (PARTITION BY d.is_email \
                                            ORDER BY d.next_attempt_at, d.seq) AS budget_n \
             FROM destination_ranked d \
             WHERE d.destination IS NULL OR d.destination_n <= d.destination_room) \
           WHERE budget_n <= budget), \
         full_destinations AS ( \
           SELECT destination FROM destination_ranked WHERE destination IS NOT NULL \
           GROUP BY destination, destination_room HAVING count(*) >= destination_room \
           UNION ALL \
           SELECT destination FROM busy_destination WHERE n >= ?5), \
         destinations(destination) AS ( \
           SELECT (SELECT destination FROM snitch_deliveries \
                   WHERE state = 'pending' AND destination IS NOT NULL \
                   ORDER BY destination DESC LIMIT 1) \
           UNION ALL \
           SELECT (SELECT x.destination FROM snitch_deliveries x \
                   WHERE x.state = 'pending' AND x.destination IS NOT NULL \
                     AND x.destination < d.destination \
                   ORDER BY x.destination DESC LIMIT 1) \
           FROM destinations d WHERE d.destination IS NOT NULL), \
         settled AS ( \
           SELECT CASE \
             WHEN last.id IS NULL \
               OR (SELECT count(*) FROM chosen c WHERE c.is_email = b.is_email) >= b.budget \
               THEN 1 \
             WHEN b.is_email THEN 0 \
             ELSE NOT EXISTS ( \
               SELECT 1 FROM destinations d \
               WHERE d.destination IS NOT NULL \
                 AND d.destination NOT IN (SELECT destination FROM full_destinations) \
                 AND EXISTS ( \
                   SELECT 1 FROM snitch_deliveries x \
                   WHERE x.state = 'pending' AND x.destination = d.destination \
                     AND x.next_attempt_at <= ?1 \
                     AND (x.next_attempt_at, x.seq) > (last.next_attempt_at, last.seq))) \
             END AS settled \
           FROM budgets b \
           LEFT JOIN placed last ON last.is_email = b.is_email AND last.place = ?8) \
         SELECT (SELECT json_group_array(id) FROM chosen), \
           coalesce((SELECT min(settled) FROM settled), 1)",
        window_of(0, "?6"),
        window_of(1, "?7"),
    )
});

/// The deliveries whose ids `?1` (JSON) lists, earliest first.
static CHOSEN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {DELIVERY_COLUMNS} FROM snitch_deliveries \
         WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY next_attempt_at, seq"
    )
});

/// The rounds by walking the keys: the (case, channel) keys with pending deliveries down
/// their index, each key's first due ones (no more than a key may ever hold, so the
/// reading is bounded by the keys, not by how many wait) and those under the key's room,
/// ranked per destination, then per budget. Parameters `?1`–`?7` as `EARLIEST_FIRST`'s.
static BY_KEY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH RECURSIVE keys(case_id, channel) AS ( \
           SELECT * FROM (SELECT case_id, channel FROM snitch_deliveries \
                          WHERE state = 'pending' ORDER BY case_id, channel LIMIT 1) \
           UNION ALL \
           SELECT successor.case_id, successor.channel \
           FROM keys k JOIN snitch_deliveries successor ON successor.seq = coalesce( \
             (SELECT seq FROM snitch_deliveries \
              WHERE state = 'pending' AND case_id = k.case_id AND channel > k.channel \
              ORDER BY channel LIMIT 1), \
             (SELECT seq FROM snitch_deliveries \
              WHERE state = 'pending' AND case_id > k.case_id \
              ORDER BY case_id, channel LIMIT 1))), \
         due AS ( \
           SELECT head.id, head.next_attempt_at, head.seq, head.case_id, head.channel, \
             head.destination, \
             row_number() OVER (PARTITION BY head.case_id, head.channel \
                                ORDER BY head.next_attempt_at, head.seq) AS n \
           FROM keys k JOIN snitch_deliveries head ON head.seq IN ( \
             SELECT seq FROM snitch_deliveries \
             WHERE state = 'pending' AND case_id = k.case_id AND channel = k.channel \
               AND next_attempt_at <= ?1 \
             ORDER BY next_attempt_at, seq LIMIT ?3)), \
         {IN_FLIGHT}, \
         case_ok AS ( \
           SELECT due.id, due.next_attempt_at, due.seq, due.channel, due.destination, \
             row_number() OVER (PARTITION BY due.destination \
                                ORDER BY due.next_attempt_at, due.seq) AS n \
           FROM due LEFT JOIN busy_case b \
             ON b.case_id = due.case_id AND b.channel = due.channel \
           WHERE due.n <= ?3 - coalesce(b.n, 0)), \
         destination_ok AS ( \
           SELECT c.id, c.channel, c.next_attempt_at, c.seq, \
             row_number() OVER (PARTITION BY c.channel = 'email' \
                                ORDER BY c.next_attempt_at, c.seq) AS n \
           FROM case_ok c LEFT JOIN busy_destination b ON b.destination = c.destination \
           WHERE c.destination IS NULL OR c.n <= ?5 - coalesce(b.n, 0)) \
         SELECT {} FROM destination_ok x JOIN snitch_deliveries d ON d.id = x.id \
         WHERE x.n <= CASE WHEN x.channel = 'email' THEN ?7 ELSE ?6 END \
         ORDER BY x.next_attempt_at, x.seq",
        DELIVERY_COLUMNS
            .split(", ")
            .map(|c| format!("d.{c}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
});
