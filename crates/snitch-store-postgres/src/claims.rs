//! The claim of deliveries: the three fairness rounds of [`ClaimLimits`]
//! (docs/rules.md#delivery-isolation), set-based, in two ways that take the same rows.
//!
//! Every rank a round gives a delivery (its place in its (case, channel kind), among its
//! destination's, in its budget) counts only deliveries due before it. So the rounds
//! over the first `n` due deliveries of a budget, in time order, choose exactly what the
//! rounds over all of them choose among those `n`. The claim reads that window first
//! (`EARLIEST_FIRST`); it settles the claim when nothing after it could be chosen: the
//! window holds every due delivery of the budget, or the budget is full, or (for HTTP)
//! every later one goes to a destination already at its cap. That is the claim of a mass
//! miss, whose alerts all go to a few destinations. Only when the window does not settle
//! it does the claim walk every (case, channel kind) with pending deliveries
//! (`BY_KEY`), which reads each key's first few: 5 ms a claim with 100 such keys, 210 ms
//! with 10,000, against about 2 ms for a window of 256 at either and 0.7 ms for one of 64
//! (execution only, at 100,000 pending webhooks and as many e-mails over 100 cases).

use std::sync::LazyLock;

use snitch_core::{ClaimLimits, Delivery, StorageError, Timestamp};
use sqlx::postgres::{PgArguments, PgPool};
use sqlx::query::QueryAs;
use sqlx::Postgres;

use crate::records::{DeliveryRow, DELIVERY_COLUMNS};
use crate::{backend, limit};

/// Claims the deliveries due at `now` that `limits` let through, leased until
/// `lease_until`, earliest first; `window` is how many due deliveries of each budget the
/// claim reads before it walks the keys (at least a budget: [`ClaimLimits::window`]).
pub(crate) async fn claim_deliveries(
    pool: &PgPool,
    now: Timestamp,
    lease_until: Timestamp,
    limits: &ClaimLimits,
    window: usize,
) -> Result<Vec<Delivery>, StorageError> {
    let busy = InFlight::of(limits);
    let mut tx = pool.begin().await.map_err(backend)?;
    sqlx::query(PLAN_BY_INDEX)
        .execute(&mut *tx)
        .await
        .map_err(backend)?;
    let (chosen, settled): (Vec<String>, bool) = busy
        .bind(sqlx::query_as(&EARLIEST_FIRST).bind(now), limits)
        .bind(limit(limits.window(window)))
        .fetch_one(&mut *tx)
        .await
        .map_err(backend)?;
    let claimed: Vec<DeliveryRow> = if !settled {
        let query = busy
            .bind(sqlx::query_as(&BY_KEY).bind(now).bind(lease_until), limits)
            // Planned afresh each time, for the outbox as it is now: a connection's
            // prepared statement keeps the generic plan it made after five runs, and the
            // outbox is empty most of the time.
            .persistent(false);
        query.fetch_all(&mut *tx).await.map_err(backend)?
    } else if chosen.is_empty() {
        Vec::new()
    } else {
        let query = sqlx::query_as(&LEASE_CHOSEN)
            .bind(now)
            .bind(lease_until)
            .bind(chosen);
        query.fetch_all(&mut *tx).await.map_err(backend)?
    };
    tx.commit().await.map_err(backend)?;
    claimed
        .into_iter()
        .map(DeliveryRow::into_delivery)
        .collect()
}

/// A claim's statements read the outbox by index only. A mass miss fills it faster than
/// autovacuum analyzes it, and on statistics that still saw a few rows the planner read
/// every due delivery by bitmap and sorted them (7 ms a claim at 3,400 due, growing with
/// the outbox) where an index gives the first few in order, and found 16 chosen ids by
/// bitmap over 2,201 due rows instead of by primary key (9 ms; `auto_explain`, row 3d).
const PLAN_BY_INDEX: &str = "SELECT set_config('enable_bitmapscan', 'off', true), \
     set_config('enable_seqscan', 'off', true)";

/// What a dispatcher has in flight, as the arrays the statements take.
struct InFlight {
    cases: Vec<String>,
    kinds: Vec<&'static str>,
    case_counts: Vec<i64>,
    destinations: Vec<String>,
    destination_counts: Vec<i64>,
}

impl InFlight {
    fn of(limits: &ClaimLimits) -> Self {
        let (cases, kinds, case_counts) = limits
            .case_channels_in_flight
            .iter()
            .map(|(case, kind, n)| (case.as_str().to_owned(), kind.as_str(), limit(*n)))
            .collect();
        let (destinations, destination_counts) = limits
            .destinations_in_flight
            .iter()
            .map(|(d, n)| (d.clone(), limit(*n)))
            .collect();
        InFlight {
            cases,
            kinds,
            case_counts,
            destinations,
            destination_counts,
        }
    }

    /// `query` with the nine parameters both claims take after their first ones: the
    /// (case, channel, count) in flight, the room per (case, channel), the (destination,
    /// count) in flight, the room per destination, the HTTP and e-mail budgets.
    fn bind<'q, O>(
        &'q self,
        query: QueryAs<'q, Postgres, O, PgArguments>,
        limits: &ClaimLimits,
    ) -> QueryAs<'q, Postgres, O, PgArguments> {
        query
            .bind(&self.cases)
            .bind(&self.kinds)
            .bind(&self.case_counts)
            .bind(limit(limits.per_case_channel))
            .bind(&self.destinations)
            .bind(&self.destination_counts)
            .bind(limit(limits.per_destination))
            .bind(limit(limits.webhooks))
            .bind(limit(limits.emails))
    }
}

/// The (case, channel kind) and destination counts in flight, summed per key, from the
/// arrays in parameters `$c`, `$c+1`, `$c+2` and `$d`, `$d+1`.
fn in_flight_ctes(c: usize, d: usize) -> String {
    format!(
        "busy_case AS ( \
           SELECT case_id, channel, sum(n) AS n \
           FROM unnest(${c}::text[], ${}::text[], ${}::int8[]) AS b(case_id, channel, n) \
           GROUP BY case_id, channel), \
         busy_destination AS ( \
           SELECT destination, sum(n) AS n \
           FROM unnest(${d}::text[], ${}::int8[]) AS b(destination, n) \
           GROUP BY destination)",
        c + 1,
        c + 2,
        d + 1
    )
}

/// Locks the deliveries whose ids the CTE `chosen` lists, if they are still pending and
/// due at `$1` (skipping rows another dispatcher is claiming right now: they are not
/// waited for; a row it already leased fails the recheck), leases them until `$2` and
/// returns them earliest first. They are found by primary key alone: as a semi-join, the
/// planner, misled by an outbox that grew since it was last analyzed, walked every due
/// delivery against the chosen few (170 ms and more at 100,000 pending), and with the ids
/// in an array it still walked a partial index of pending deliveries that its statistics
/// thought nearly empty (7–11 ms for one row in row 3d). Written as `coalesce(…)`, the
/// recheck of the state no longer matches those indexes' predicate.
fn lease_chosen() -> String {
    format!(
        "picked AS ( \
           SELECT d.id, d.next_attempt_at AS due_at, d.seq FROM snitch.deliveries d \
           WHERE d.id = ANY(ARRAY(SELECT id FROM chosen)) \
             AND coalesce(d.state = 'pending', false) AND d.next_attempt_at <= $1 \
           FOR UPDATE OF d SKIP LOCKED), \
         claimed AS ( \
           UPDATE snitch.deliveries d SET next_attempt_at = $2 FROM picked \
           WHERE d.id = picked.id \
           RETURNING d.*, picked.due_at) \
         SELECT {DELIVERY_COLUMNS} FROM claimed ORDER BY due_at, seq"
    )
}

/// The rounds over the first `$11` due deliveries of each budget, in time order: `$1`
/// now, `$2`–`$4` the (case, channel, count) in flight, `$5` the room per (case, channel),
/// `$6`–`$7` the (destination, count) in flight, `$8` the room per destination, `$9` and
/// `$10` the HTTP deliveries (every kind but e-mail, which alone has no destination) and
/// e-mails to take. One row: the chosen ids, earliest first, and whether they settle the
/// claim. Read-only: `LEASE_CHOSEN` takes them. Whether a later due delivery goes to a
/// destination with room is asked of each destination with `LIMIT 1`: as a semi-join,
/// on statistics from before a mass miss, the planner hashed every due delivery to the
/// destination (70,101 rows, 36 of a claim's 38 ms in row 8).
static EARLIEST_FIRST: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH RECURSIVE budgets AS ( \
           SELECT * FROM (VALUES (false, $9::int8), (true, $10::int8)) AS b(is_email, budget) \
           WHERE budget > 0), \
         early AS ( \
           SELECT b.is_email, b.budget, w.*, \
             row_number() OVER (PARTITION BY b.is_email \
                                ORDER BY w.next_attempt_at, w.seq) AS place \
           FROM budgets b, LATERAL ( \
             SELECT id, case_id, channel, destination, next_attempt_at, seq \
             FROM snitch.deliveries \
             WHERE state = 'pending' AND (destination IS NULL) = b.is_email \
               AND next_attempt_at <= $1 \
             ORDER BY next_attempt_at, seq \
             LIMIT $11) w), \
         {}, \
         case_ok AS ( \
           SELECT * FROM ( \
             SELECT e.*, greatest($5 - coalesce(b.n, 0), 0) AS room, \
               row_number() OVER (PARTITION BY e.case_id, e.channel \
                                  ORDER BY e.next_attempt_at, e.seq) AS n \
             FROM early e LEFT JOIN busy_case b \
               ON b.case_id = e.case_id AND b.channel = e.channel) ranked \
           WHERE n <= room), \
         destination_ranked AS ( \
           SELECT c.*, $8 - coalesce(b.n, 0) AS destination_room, \
             row_number() OVER (PARTITION BY c.destination \
                                ORDER BY c.next_attempt_at, c.seq) AS destination_n \
           FROM case_ok c LEFT JOIN busy_destination b ON b.destination = c.destination), \
         chosen AS ( \
           SELECT * FROM ( \
             SELECT d.*, row_number() OVER (PARTITION BY d.is_email \
                                            ORDER BY d.next_attempt_at, d.seq) AS budget_n \
             FROM destination_ranked d \
             WHERE d.destination IS NULL OR d.destination_n <= d.destination_room) passed \
           WHERE budget_n <= budget), \
         full_destinations AS ( \
           SELECT destination FROM destination_ranked WHERE destination IS NOT NULL \
           GROUP BY destination, destination_room HAVING count(*) >= destination_room \
           UNION ALL \
           SELECT destination FROM busy_destination WHERE n >= $8), \
         destinations AS ( \
           (SELECT destination FROM snitch.deliveries \
            WHERE state = 'pending' AND destination IS NOT NULL \
            ORDER BY destination DESC LIMIT 1) \
           UNION ALL \
           SELECT next.destination FROM destinations d, LATERAL ( \
             SELECT destination FROM snitch.deliveries \
             WHERE state = 'pending' AND destination < d.destination \
             ORDER BY destination DESC LIMIT 1) next), \
         settled AS ( \
           SELECT CASE \
             WHEN last.id IS NULL OR taken.n >= b.budget THEN true \
             WHEN b.is_email THEN false \
             ELSE NOT EXISTS ( \
               SELECT 1 FROM destinations d, LATERAL ( \
                 SELECT 1 FROM snitch.deliveries x \
                 WHERE x.state = 'pending' AND x.destination = d.destination \
                   AND x.next_attempt_at <= $1 \
                   AND (x.next_attempt_at, x.seq) > (last.next_attempt_at, last.seq) \
                 LIMIT 1) later \
               WHERE NOT EXISTS ( \
                 SELECT 1 FROM full_destinations f WHERE f.destination = d.destination)) \
             END AS settled \
           FROM budgets b \
           LEFT JOIN early last ON last.is_email = b.is_email AND last.place = $11, \
           LATERAL (SELECT count(*) AS n FROM chosen c WHERE c.is_email = b.is_email) taken) \
         SELECT \
           coalesce((SELECT array_agg(id ORDER BY next_attempt_at, seq) FROM chosen), '{{}}'), \
           coalesce((SELECT bool_and(settled) FROM settled), true)",
        in_flight_ctes(2, 6)
    )
});

/// Leases the deliveries `$3` (ids) if still pending and due at `$1`, until `$2`.
static LEASE_CHOSEN: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH chosen AS (SELECT unnest($3::text[]) AS id), {}",
        lease_chosen()
    )
});

/// The rounds by walking the keys: the (case, channel) keys with pending deliveries down
/// their index, each key's first due ones, as many as the key has room for now (so the
/// reading is bounded by the keys, not by how many wait; numbering every key's first
/// `per_case_channel` and filtering them after cost a sort of all of them, 0.45 ms of a
/// 3.3 ms claim), ranked per destination, then per budget. `$1` now, `$2` the lease's
/// end, `$3`–`$5` the (case, channel, count) in flight, `$6` the room per (case, channel),
/// `$7`–`$8` the (destination, count) in flight, `$9` the room per destination, `$10` and
/// `$11` the HTTP deliveries and e-mails to take.
static BY_KEY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH RECURSIVE keys AS ( \
               (SELECT case_id, channel FROM snitch.deliveries WHERE state = 'pending' \
                ORDER BY case_id, channel LIMIT 1) \
               UNION ALL \
               SELECT successor.case_id, successor.channel FROM keys k, LATERAL ( \
                 SELECT case_id, channel FROM snitch.deliveries \
                 WHERE state = 'pending' AND (case_id, channel) > (k.case_id, k.channel) \
                 ORDER BY case_id, channel LIMIT 1) successor), \
             {}, \
             case_ok AS ( \
               SELECT head.*, \
                 row_number() OVER (PARTITION BY head.destination \
                                    ORDER BY head.next_attempt_at, head.seq) AS n \
               FROM keys k LEFT JOIN busy_case b \
                 ON b.case_id = k.case_id AND b.channel = k.channel, LATERAL ( \
                 SELECT id, next_attempt_at, seq, channel, destination \
                 FROM snitch.deliveries \
                 WHERE state = 'pending' AND case_id = k.case_id AND channel = k.channel \
                   AND next_attempt_at <= $1 \
                 ORDER BY next_attempt_at, seq \
                 LIMIT greatest($6 - coalesce(b.n, 0), 0)) head), \
             destination_ok AS ( \
               SELECT c.id, c.channel, \
                 row_number() OVER (PARTITION BY c.channel = 'email' \
                                    ORDER BY c.next_attempt_at, c.seq) AS n \
               FROM case_ok c LEFT JOIN busy_destination b ON b.destination = c.destination \
               WHERE c.destination IS NULL OR c.n <= $9 - coalesce(b.n, 0)), \
             chosen AS ( \
               SELECT id FROM destination_ok \
               WHERE n <= CASE WHEN channel = 'email' THEN $11 ELSE $10 END), \
             {}",
        in_flight_ctes(3, 7),
        lease_chosen()
    )
});
