//! The storage contract test suite: one set of tests that every [`Storage`] runs.
//!
//! A store crate calls [`storage_contract_tests!`](crate::storage_contract_tests) in a test
//! module with an async function that makes a fresh, empty store; the macro expands to one
//! `#[tokio::test]` per contract test, so a failure names the broken rule. The crate needs
//! `tokio` (with `macros` and `rt`) as a dev-dependency.
//!
//! ```text
//! #[cfg(test)]
//! mod contract {
//!     snitch_core::storage_contract_tests!(|| async { my_store::MyStorage::new() });
//! }
//! ```
//!
//! The tests use only the [`Storage`] trait and assume nothing its documentation does not
//! promise. Every instant is a whole number of milliseconds, so a store may keep
//! timestamps at millisecond precision. Concurrent calls are issued with
//! [`futures::future::join_all`] on one task: a store that awaits I/O (a database) really
//! runs them interleaved, while a store that never yields runs them one after another.

use std::sync::Arc;

use chrono::Duration;
use futures::future::join_all;

use crate::calendar::{Interval, Timestamp};
use crate::channel::{ChannelConfig, ChannelKey, ChannelSettings, EventFilter};
use crate::check_in_step::PendingCheckIns;
use crate::clock::ManualClock;
use crate::error::ServiceError;
use crate::liveness::{CaseOutage, Outage};
use crate::machine;
use crate::outbox::{
    deliveries_for, AttemptResult, Channel, ChannelKind, ClaimLimits, Delivery, DeliveryState,
    Targets,
};
use crate::service::{SnitchFields, SnitchService};
use crate::snitch::{CheckIn, Event, EventKind, PauseUntil, Snitch, CHECK_INS_KEPT};
use crate::storage::{Change, Storage, StorageError, StoreStats};
use crate::types::{
    AlertEmails, Case, CaseId, CheckInMessage, EmailAddress, Notes, Outcome, Plan, SnitchName,
    Status, Tags, Token, CONTAINS_NUL,
};
use crate::validation::Validation;
use crate::webhook::Webhook;

mod fixtures;
pub use fixtures::*;

/// What a store's maker returns to the contract suite: the store, or the store and what it
/// needs kept until the test ends (a guard that drops its database, say).
pub trait ContractStore {
    /// The store, and what to keep alive beside it (dropped after the test).
    fn into_parts(self) -> (Arc<dyn Storage>, Box<dyn std::any::Any>);
}

impl<S: Storage + 'static> ContractStore for S {
    fn into_parts(self) -> (Arc<dyn Storage>, Box<dyn std::any::Any>) {
        (Arc::new(self), Box::new(()))
    }
}

impl<S: Storage + 'static, K: 'static> ContractStore for (S, K) {
    fn into_parts(self) -> (Arc<dyn Storage>, Box<dyn std::any::Any>) {
        (Arc::new(self.0), Box::new(self.1))
    }
}

/// Expands to one test per rule of the storage contract, each run on a store made by
/// `$make`, an expression callable as `$make()` that returns a future of the store, or of
/// the store and what must outlive the test's use of it ([`ContractStore`]).
#[macro_export]
macro_rules! storage_contract_tests {
    ($make:expr) => {
        $crate::storage_contract_tests!(@each $make;
            // Cases.
            case_round_trip,
            cases_are_kept_apart,
            // Inserting snitches.
            insert_snitch_round_trips_every_field,
            a_saved_change_keeps_text_exactly,
            insert_snitch_into_unknown_case_fails,
            insert_snitch_with_taken_token_fails,
            insert_snitch_respects_the_limit_per_case,
            insert_snitch_with_limit_zero_refuses_the_first,
            insert_snitch_limit_holds_under_concurrency,
            insert_snitches_is_all_or_nothing,
            // Listing a case's snitches.
            snitches_lists_only_the_case_own,
            snitches_are_oldest_first,
            a_long_list_comes_whole_and_in_order,
            snitches_filter_requires_every_tag,
            snitches_of_unknown_case_is_empty,
            // Saving changes.
            save_applies_the_new_state,
            save_replaces_every_field,
            a_cron_snitch_keeps_its_schedule_through_every_save,
            runs_keep_their_check_ins_output_and_timeouts_through_every_save,
            save_of_stale_version_conflicts_and_changes_nothing,
            save_of_missing_snitch_is_not_found,
            concurrent_saves_from_one_read_let_exactly_one_win,
            save_all_answers_each_change_of_a_mixed_batch,
            new_settings_saved_beside_check_ins_are_kept,
            email_keywords_round_trip_through_create_update_and_read,
            stepping_in_place_saves_what_a_read_and_save_would,
            // History.
            check_ins_are_newest_first_and_limited,
            check_ins_keep_the_most_recent_ones,
            a_change_with_several_check_ins_keeps_them_in_order,
            the_history_length_is_the_changes_keep_check_ins,
            a_history_trimmed_again_and_again_keeps_the_newest,
            a_longer_history_never_brings_back_what_a_shorter_one_cut,
            a_sweep_keeps_the_servers_history_and_tells_the_hooks,
            // Trust under fire (docs/rules.md#trust-under-fire), through the service.
            concurrent_check_ins_of_one_snitch_are_all_recorded,
            check_ins_and_api_writes_of_one_snitch_all_succeed,
            nul_in_api_text_is_refused_on_every_store,
            nul_in_check_ins_is_kept_as_a_replacement_character,
            events_are_newest_first_and_limited,
            history_of_unknown_snitch_is_empty,
            // Deleting.
            delete_snitch_reports_whether_it_existed,
            delete_snitch_removes_it_and_its_history,
            delete_snitch_frees_a_plan_slot,
            // The deadline index.
            empty_store_has_nothing_due,
            pending_snitch_is_never_due,
            snitch_is_due_from_its_deadline_on,
            due_is_earliest_first_and_limited,
            due_follows_a_saved_deadline,
            a_batch_keeping_and_moving_deadlines_is_due_as_saved,
            open_ended_pause_is_never_due,
            timed_pause_is_due_when_it_ends,
            // Sweep leases.
            claim_due_leases_until_the_lease_ends_or_a_save,
            concurrent_claims_share_the_due_snitches,
            // Webhooks.
            webhooks_round_trip_oldest_first_per_case,
            webhook_ids_are_unique_and_cases_must_exist,
            delete_webhook_only_of_its_case,
            // Channels.
            channels_round_trip_change_and_delete_per_case,
            channel_deliveries_keep_their_settings_and_key,
            // Badge keys.
            badge_keys_are_one_per_case_and_unique,
            the_first_badge_key_stored_is_the_one_every_first_use_gets,
            // The outbox.
            saved_deliveries_are_claimed_earliest_first_under_a_lease,
            attempts_are_recorded_and_decide_what_follows,
            a_refused_save_stores_no_deliveries,
            deliveries_outlive_their_snitch_until_finished,
            attempts_recorded_at_once_are_each_recorded,
            // Liveness and outages.
            a_gap_in_heartbeats_over_the_threshold_is_an_outage,
            a_clean_stop_is_the_last_moment_alive,
            one_live_server_means_no_outage,
            servers_racing_after_an_outage_find_it_once,
            deferred_snitches_are_counted_per_case_and_outage,
            a_flooded_case_does_not_keep_others_out_of_a_claim,
            claims_take_what_is_in_flight_into_account,
            destination_caps_count_only_what_the_case_caps_let_through,
            claims_choose_what_the_three_rounds_choose,
            // Operators.
            stats_count_snitches_by_status_and_unfinished_deliveries,
            status_counts_follow_every_write,
            a_migrated_store_is_ready,
            // Cases and API keys.
            cases_are_listed_by_id,
            api_keys_round_trip_oldest_first_per_case,
            api_key_ids_and_digests_are_unique_and_cases_must_exist,
            revoked_api_keys_stay_listed_as_revoked,
            api_key_use_keeps_the_latest_time,
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                // What the store needs kept until the test ends (its database, say)
                // comes along as the second value, and is dropped last.
                let (store, _kept) = $crate::contract::ContractStore::into_parts(($make)().await);
                $crate::contract::$name(store).await;
            }
        )*
    };
}

/// Expands to a module `claims_through_a_small_window` whose tests run the contract's
/// delivery claims on stores that rank a window of one, two and five due deliveries per
/// budget before they walk every key (a store whose claim reads the earliest first), so
/// that the claims settle every way: in the window (a full budget, every later one to a
/// full destination) and by the walk. `$make` is callable as `$make(window)` and returns
/// what `storage_contract_tests!`'s maker does.
#[macro_export]
macro_rules! claim_window_tests {
    ($make:expr) => {
        mod claims_through_a_small_window {
            #[allow(unused_imports)]
            use super::*;

            $crate::claim_window_tests!(@each $make;
                claims_choose_what_the_three_rounds_choose,
                a_flooded_case_does_not_keep_others_out_of_a_claim,
                claims_take_what_is_in_flight_into_account,
                destination_caps_count_only_what_the_case_caps_let_through,
                saved_deliveries_are_claimed_earliest_first_under_a_lease,
            );
        }
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                for window in [1, 2, 5] {
                    let (store, _kept) =
                        $crate::contract::ContractStore::into_parts(($make)(window).await);
                    $crate::contract::$name(store).await;
                }
            }
        )*
    };
}

// ---------------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------------

/// A case reads back as stored; an upsert replaces its members, plan and hold flag.
pub async fn case_round_trip(store: Arc<dyn Storage>) {
    let mut acme = case("acme");
    assert_eq!(store.case(&acme.id).await.expect("read"), None);
    store.upsert_case(&acme).await.expect("insert");
    assert_eq!(
        store.case(&acme.id).await.expect("read"),
        Some(acme.clone())
    );

    acme.members = vec![
        EmailAddress::parse("ann@acme.test").expect("valid address"),
        EmailAddress::parse("bob@acme.test").expect("valid address"),
    ];
    acme.plan = Plan {
        max_snitches: 3,
        error_notices: false,
    };
    acme.on_hold = true;
    store.upsert_case(&acme).await.expect("update");
    assert_eq!(
        store.case(&acme.id).await.expect("read"),
        Some(acme.clone())
    );

    acme.members.truncate(1);
    acme.on_hold = false;
    store.upsert_case(&acme).await.expect("update again");
    assert_eq!(store.case(&acme.id).await.expect("read"), Some(acme));
}

/// Cases are independent; an unknown id reads as `None`.
pub async fn cases_are_kept_apart(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let mut globex = case("globex.corp_2");
    globex.on_hold = true;
    store.upsert_case(&globex).await.expect("insert");

    assert_eq!(store.case(&acme.id).await.expect("read"), Some(acme));
    assert_eq!(store.case(&globex.id).await.expect("read"), Some(globex));
    let unknown = CaseId::parse("initech").expect("valid id");
    assert_eq!(store.case(&unknown).await.expect("read"), None);
}

// ---------------------------------------------------------------------------------------
// Inserting snitches
// ---------------------------------------------------------------------------------------

/// Every field of a new snitch reads back as inserted, whatever its state.
pub async fn insert_snitch_round_trips_every_field(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let pending = snitch(&acme, 1, t0());
    let healthy = checked_in(&snitch(&acme, 2, at(-30)), at(10)).snitch;
    let rich = rich_snitch(&acme, 3);
    let until_healthy = {
        let s = checked_in(&snitch(&acme, 4, t0()), at(10)).snitch;
        paused(&s, PauseUntil::Healthy, at(20)).snitch
    };
    let until_unpaused = {
        let s = checked_in(&snitch(&acme, 5, t0()), at(10)).snitch;
        paused(&s, PauseUntil::Unpaused, at(20)).snitch
    };
    let all = [pending, healthy, rich, until_healthy, until_unpaused];

    for s in &all {
        insert(&store, s).await;
    }
    for s in &all {
        assert_eq!(stored(&store, &s.token).await.as_ref(), Some(s));
    }
}

/// Text a user or a job wrote is stored as written by every save, however it looks to
/// the store's own encodings: quotes, backslashes, braces, the word NULL, line breaks,
/// non-ASCII (a store that sends arrays as literals must quote them).
pub async fn a_saved_change_keeps_text_exactly(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let mut s = snitch(&acme, 1, t0());
    insert(&store, &s).await;
    s.name = SnitchName::parse(r#"say "hi" \ {x} NULL"#).expect("valid name");
    s.tags = Tags::parse(&[
        r#"a"b"#,
        r"back\slash",
        "{braces}",
        "NULL",
        "null",
        "two words",
        "ü ✓",
    ])
    .expect("valid tags");
    s.notes = Notes::parse("line 1\nline \"2\" \\ {}").expect("valid notes");
    s.alert_email =
        AlertEmails::parse(&["o'brien@example.test", "x+{y}@example.test"]).expect("valid");
    let renamed = Change::new(
        &stored(&store, &s.token).await.expect("stored"),
        s,
        vec![],
        vec![],
    );
    store.save(&renamed).await.expect("saved");
    assert_eq!(
        stored(&store, &token(1)).await.as_ref(),
        Some(renamed.snitch())
    );
    // Check-ins keep their text too: one that turns the snitch healthy (it emits an
    // event), then one that changes nothing else (it emits none: a store may save such
    // changes another way).
    let healthy = checked_in(renamed.snitch(), at(5));
    assert!(!healthy.events().is_empty(), "fixture: pending to healthy");
    store.save(&healthy).await.expect("saved");
    let check_in = CheckIn {
        message: CheckInMessage::truncating(r#"done "ok" \ {1,2} NULL"#),
        ..failure(at(6), r#"1 "x" \ {}"#, "unused")
    };
    let quiet = Plan {
        error_notices: false,
        ..Plan::default()
    };
    let step = machine::check_in(healthy.snitch(), &check_in, &quiet);
    let checked = Change::new(healthy.snitch(), step.snitch, vec![check_in], step.events);
    assert!(checked.events().is_empty(), "fixture: emits nothing");
    store.save(&checked).await.expect("saved");
    assert_eq!(
        stored(&store, &token(1)).await.as_ref(),
        Some(checked.snitch())
    );
    let history = store.check_ins(&token(1), 10).await.expect("read");
    assert_eq!(history.first(), checked.check_ins().last(), "newest first");
}

/// A snitch of a case that is not stored is refused and not stored.
pub async fn insert_snitch_into_unknown_case_fails(store: Arc<dyn Storage>) {
    with_case(&store, "acme").await;
    let ghost = case("ghost");
    let result = store
        .insert_snitch(&snitch(&ghost, 1, t0()), NO_LIMIT)
        .await;
    assert!(
        matches!(&result, Err(StorageError::UnknownCase(id)) if *id == ghost.id),
        "expected UnknownCase(ghost), got {result:?}"
    );
    assert_eq!(stored(&store, &token(1)).await, None);
}

/// Tokens are unique across the whole store; the first snitch is kept.
pub async fn insert_snitch_with_taken_token_fails(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let globex = with_case(&store, "globex").await;
    let first = snitch(&acme, 1, t0());
    insert(&store, &first).await;

    let mut again = snitch(&acme, 1, at(5));
    again.name = SnitchName::parse("impostor").expect("valid name");
    for other in [again.clone(), snitch(&globex, 1, at(5))] {
        let result = store.insert_snitch(&other, NO_LIMIT).await;
        assert!(
            matches!(result, Err(StorageError::DuplicateToken)),
            "expected DuplicateToken, got {result:?}"
        );
    }
    assert_eq!(stored(&store, &first.token).await, Some(first));
    assert_eq!(listed(&store, &acme, &[]).await, tokens_of(&[1]));
    assert_eq!(listed(&store, &globex, &[]).await, vec![]);
}

/// A case holding `max_snitches` refuses another; other cases count their own.
pub async fn insert_snitch_respects_the_limit_per_case(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let globex = with_case(&store, "globex").await;
    for n in [1, 2] {
        store
            .insert_snitch(&snitch(&acme, n, t0()), 2)
            .await
            .expect("below the limit");
    }

    let result = store.insert_snitch(&snitch(&acme, 3, t0()), 2).await;
    assert!(
        matches!(result, Err(StorageError::LimitReached { max: 2 })),
        "expected LimitReached {{ max: 2 }}, got {result:?}"
    );
    assert_eq!(stored(&store, &token(3)).await, None);
    assert_eq!(listed(&store, &acme, &[]).await, tokens_of(&[1, 2]));

    for n in [4, 5] {
        store
            .insert_snitch(&snitch(&globex, n, t0()), 2)
            .await
            .expect("another case has its own count");
    }
    store
        .insert_snitch(&snitch(&acme, 3, t0()), 3)
        .await
        .expect("the limit is the one passed in");
    assert_eq!(listed(&store, &acme, &[]).await, tokens_of(&[1, 2, 3]));
}

/// A limit of zero refuses even the first snitch.
pub async fn insert_snitch_with_limit_zero_refuses_the_first(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let result = store.insert_snitch(&snitch(&acme, 1, t0()), 0).await;
    assert!(
        matches!(result, Err(StorageError::LimitReached { max: 0 })),
        "expected LimitReached {{ max: 0 }}, got {result:?}"
    );
    assert_eq!(stored(&store, &token(1)).await, None);
}

/// Counting and inserting are one atomic step: concurrent inserts never overshoot.
pub async fn insert_snitch_limit_holds_under_concurrency(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let candidates: Vec<Snitch> = (1..=20).map(|n| snitch(&acme, n, t0())).collect();
    let results = join_all(candidates.iter().map(|s| store.insert_snitch(s, 5))).await;

    let mut inserted = Vec::new();
    for (s, result) in candidates.iter().zip(&results) {
        match result {
            Ok(()) => inserted.push(s.token.clone()),
            Err(StorageError::LimitReached { max: 5 }) => {}
            Err(e) => panic!("expected Ok or LimitReached {{ max: 5 }}, got {e:?}"),
        }
    }
    assert_eq!(inserted.len(), 5, "exactly the limit gets in");
    let mut listed = listed(&store, &acme, &[]).await;
    listed.sort();
    inserted.sort();
    assert_eq!(listed, inserted);
}

/// A bulk insert keeps the order given and stores all or nothing: a case that would go
/// over its limit, a taken token or one given twice, or an unknown case stores none.
pub async fn insert_snitches_is_all_or_nothing(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let globex = with_case(&store, "globex").await;
    let first: Vec<Snitch> = [1, 2, 3]
        .into_iter()
        .map(|n| snitch(&acme, n, t0()))
        .chain([snitch(&globex, 4, t0())])
        .collect();
    store
        .insert_snitches(&first, 4)
        .await
        .expect("under the limit");
    assert_eq!(listed(&store, &acme, &[]).await, tokens_of(&[1, 2, 3]));
    assert_eq!(listed(&store, &globex, &[]).await, tokens_of(&[4]));
    assert_eq!(stored(&store, &token(2)).await, Some(first[1].clone()));
    store
        .insert_snitches(&[], 0)
        .await
        .expect("nothing to insert");

    // globex has room, acme does not: neither gets any.
    let over = [
        snitch(&globex, 5, t0()),
        snitch(&acme, 6, t0()),
        snitch(&acme, 7, t0()),
    ];
    let result = store.insert_snitches(&over, 4).await;
    assert!(
        matches!(result, Err(StorageError::LimitReached { max: 4 })),
        "expected LimitReached {{ max: 4 }}, got {result:?}"
    );
    let taken = [snitch(&globex, 8, t0()), snitch(&globex, 1, at(5))];
    let twice = [snitch(&globex, 9, t0()), snitch(&globex, 9, t0())];
    for batch in [&taken[..], &twice[..]] {
        let result = store.insert_snitches(batch, NO_LIMIT).await;
        assert!(
            matches!(result, Err(StorageError::DuplicateToken)),
            "expected DuplicateToken, got {result:?}"
        );
    }
    let unknown = [
        snitch(&globex, 10, t0()),
        snitch(&case("initech"), 11, t0()),
    ];
    let result = store.insert_snitches(&unknown, NO_LIMIT).await;
    assert!(
        matches!(result, Err(StorageError::UnknownCase(_))),
        "expected UnknownCase, got {result:?}"
    );
    assert_eq!(listed(&store, &acme, &[]).await, tokens_of(&[1, 2, 3]));
    assert_eq!(listed(&store, &globex, &[]).await, tokens_of(&[4]));
    assert_eq!(stored(&store, &token(1)).await, Some(first[0].clone()));
    for n in [5, 6, 7, 8, 9, 10, 11] {
        assert_eq!(stored(&store, &token(n)).await, None, "snitch {n}");
    }
}

// ---------------------------------------------------------------------------------------
// Listing a case's snitches
// ---------------------------------------------------------------------------------------

/// A case lists its own snitches and no others.
pub async fn snitches_lists_only_the_case_own(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let globex = with_case(&store, "globex").await;
    insert(&store, &snitch(&acme, 1, at(0))).await;
    insert(&store, &snitch(&globex, 2, at(1))).await;
    insert(&store, &snitch(&acme, 3, at(2))).await;
    insert(&store, &snitch(&globex, 4, at(3))).await;

    let acme_snitches = store.snitches(&acme.id, &[]).await.expect("list");
    assert_eq!(
        acme_snitches,
        vec![snitch(&acme, 1, at(0)), snitch(&acme, 3, at(2))]
    );
    assert_eq!(listed(&store, &globex, &[]).await, tokens_of(&[2, 4]));
}

/// Oldest first by `created_at`, then by order of insertion (not by token); a save does
/// not reorder, and the listing shows the saved state.
pub async fn snitches_are_oldest_first(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let globex = with_case(&store, "globex").await;
    insert(&store, &snitch(&acme, 1, at(120))).await;
    insert(&store, &snitch(&acme, 2, at(0))).await;
    insert(&store, &snitch(&acme, 9, at(60))).await;
    insert(&store, &snitch(&globex, 5, at(60))).await;
    insert(&store, &snitch(&acme, 3, at(60))).await;
    insert(&store, &snitch(&acme, 4, at(-60))).await;
    let expected = tokens_of(&[4, 2, 9, 3, 1]);
    assert_eq!(listed(&store, &acme, &[]).await, expected);

    let before = stored(&store, &token(9)).await.expect("stored");
    let saved = apply(&store, checked_in(&before, at(70))).await;
    let after = store.snitches(&acme.id, &[]).await.expect("list");
    assert_eq!(tokens(&after), expected, "a save does not reorder");
    assert_eq!(after[2], saved, "the listing shows the saved state");
}

/// A case of thousands lists every snitch once, oldest first and by insertion among equal
/// instants, with and without a filter; a store may read a long list in pages, and ties of
/// `created_at` then lie across the pages' edges.
pub async fn a_long_list_comes_whole_and_in_order(store: Arc<dyn Storage>) {
    const SNITCHES: u64 = 5_001;
    let acme = with_case(&store, "acme").await;
    let globex = with_case(&store, "globex").await;
    // Three instants, taken in turn, so each has a third of the case; every tenth snitch is
    // globex's, and every other one of acme's is tagged.
    let created = |n: u64| at(-((n % 3) as i64));
    let all: Vec<Snitch> = (1..=SNITCHES)
        .map(|n| {
            let owner = if n % 10 == 0 { &globex } else { &acme };
            let mut s = snitch(owner, n, created(n));
            if n % 2 == 0 {
                s.tags = Tags::parse(&["db"]).expect("valid tags");
            }
            s
        })
        .collect();
    for batch in all.chunks(1_000) {
        store
            .insert_snitches(batch, SNITCHES as u32)
            .await
            .expect("insert a batch");
    }
    let expected = |keep: &dyn Fn(u64) -> bool| {
        let mut numbers: Vec<u64> = (1..=SNITCHES).filter(|n| keep(*n)).collect();
        // Oldest first; the sort is stable, so insertion order among ties.
        numbers.sort_by_key(|n| created(*n));
        tokens_of(&numbers)
    };
    let acme_all = expected(&|n| n % 10 != 0);
    assert_eq!(acme_all.len(), 4_501);
    assert_eq!(listed(&store, &acme, &[]).await, acme_all);
    let acme_tagged = expected(&|n| n % 10 != 0 && n % 2 == 0);
    assert_eq!(acme_tagged.len(), 2_000);
    assert_eq!(listed(&store, &acme, &["db"]).await, acme_tagged);
    assert_eq!(
        listed(&store, &globex, &[]).await,
        expected(&|n| n % 10 == 0)
    );
}

/// A tag filter keeps the snitches that carry every one of its tags; none means all.
pub async fn snitches_filter_requires_every_tag(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let tagged = [
        (1, &["a"][..]),
        (2, &["a", "b"]),
        (3, &["b", "c"]),
        (4, &[]),
    ];
    for (n, tags) in tagged {
        let mut s = snitch(&acme, n, at(n as i64));
        s.tags = Tags::parse(tags).expect("valid tags");
        insert(&store, &s).await;
    }

    assert_eq!(listed(&store, &acme, &[]).await, tokens_of(&[1, 2, 3, 4]));
    assert_eq!(listed(&store, &acme, &["a"]).await, tokens_of(&[1, 2]));
    assert_eq!(listed(&store, &acme, &["b"]).await, tokens_of(&[2, 3]));
    assert_eq!(listed(&store, &acme, &["b", "a"]).await, tokens_of(&[2]));
    assert_eq!(listed(&store, &acme, &["a", "c"]).await, vec![]);
    assert_eq!(listed(&store, &acme, &["nope"]).await, vec![]);
}

/// A case that is not stored lists nothing.
pub async fn snitches_of_unknown_case_is_empty(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    insert(&store, &snitch(&acme, 1, t0())).await;
    assert_eq!(listed(&store, &case("ghost"), &[]).await, vec![]);
    assert_eq!(listed(&store, &case("ghost"), &["a"]).await, vec![]);
}

// ---------------------------------------------------------------------------------------
// Saving changes
// ---------------------------------------------------------------------------------------

/// A save stores the new state with the next version, and the next change builds on it.
pub async fn save_applies_the_new_state(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let fresh = snitch(&acme, 1, t0());
    insert(&store, &fresh).await;

    let first = checked_in(&fresh, at(10));
    assert_eq!(first.snitch.version, 2);
    assert_eq!(first.snitch.status(), Status::Healthy);
    store.save(&first).await.expect("save from version 1");
    let read = stored(&store, &fresh.token).await.expect("stored");
    assert_eq!(read, first.snitch);
    assert_eq!(
        store.snitches(&acme.id, &[]).await.expect("list"),
        vec![first.snitch.clone()]
    );

    let second = checked_in_with(&read, failure(at(20), "1", "boom"));
    assert_eq!(second.snitch.version, 3);
    store.save(&second).await.expect("save from version 2");
    assert_eq!(stored(&store, &fresh.token).await, Some(second.snitch));
}

/// The change `pending` saved through `step_in_place`, for a store that steps in place
/// and saves.
async fn stepped_in_place(
    store: &Arc<dyn Storage>,
    token: &Token,
    pending: &mut PendingCheckIns,
) -> Change {
    store
        .step_in_place(token, pending)
        .await
        .expect("this store steps in place")
        .expect("saved")
        .expect("a change")
}

/// A step in place answered `expected`'s snitch and stored it, with `history` (newest
/// first) as the snitch's whole check-in history.
async fn assert_step_saved(
    store: &Arc<dyn Storage>,
    saved: &Change,
    expected: &Change,
    history: Vec<CheckIn>,
) {
    let token = expected.snitch().token();
    assert_eq!(saved.snitch(), expected.snitch());
    assert_eq!(stored(store, token).await.as_ref(), Some(expected.snitch()));
    assert_eq!(store.check_ins(token, 10).await.expect("read"), history);
}

/// Targets of these webhooks and no channel.
fn only_hooks(hooks: Vec<Webhook>) -> Targets {
    Targets {
        hooks,
        channels: Vec::new(),
    }
}

/// A store that steps check-ins in place (`step_in_place`) saves what a read and a save
/// would: nothing when the step needs the case's webhooks first, the whole change (new
/// state, check-in, event) otherwise, and `NotFound` for an unknown token. A store that
/// cannot answers `None`, every time, and changes nothing.
pub async fn stepping_in_place_saves_what_a_read_and_save_would(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let fresh = snitch(&acme, 1, t0());
    insert(&store, &fresh).await;
    let pending = |hooks: Option<Vec<Webhook>>| {
        PendingCheckIns::new(vec![success(at(10))], Vec::new(), hooks.map(only_hooks), 10)
    };

    // Pending to healthy emits `snitch.reporting`: without the webhooks, nothing is saved.
    let Some(answer) = store.step_in_place(&fresh.token, &mut pending(None)).await else {
        for token in [&fresh.token, &token(2)] {
            let answer = store
                .step_in_place(token, &mut pending(Some(Vec::new())))
                .await;
            assert!(
                answer.is_none(),
                "a store that cannot never does: {answer:?}"
            );
        }
        assert_eq!(stored(&store, &fresh.token).await, Some(fresh));
        return;
    };
    assert!(matches!(answer, Ok(None)), "{answer:?}");
    assert_eq!(stored(&store, &fresh.token).await.as_ref(), Some(&fresh));
    assert!(store
        .check_ins(&fresh.token, 10)
        .await
        .expect("read")
        .is_empty());

    let saved = stepped_in_place(&store, &fresh.token, &mut pending(Some(Vec::new()))).await;
    let expected = numbered_check_in(&fresh, success(at(10)));
    assert_step_saved(
        &store,
        &saved,
        &expected,
        vec![success(at(10)).with_number(1)],
    )
    .await;
    let events = store.events(&fresh.token, 10).await.expect("read");
    assert_eq!(events, expected.events());

    let unknown = store
        .step_in_place(&token(2), &mut pending(Some(Vec::new())))
        .await;
    assert!(
        matches!(unknown, Some(Err(StorageError::NotFound))),
        "{unknown:?}"
    );

    // The usual check-in emits nothing and needs no webhooks; the history is cut to the
    // change's `keep_check_ins`, and the deadline index follows the new deadline.
    let mut quiet = PendingCheckIns::new(vec![success(at(20))], Vec::new(), None, 1);
    let healthy = stored(&store, &fresh.token).await.expect("stored");
    let second = stepped_in_place(&store, &fresh.token, &mut quiet).await;
    let expected = numbered_check_in(&healthy, success(at(20)));
    assert!(expected.events().is_empty(), "fixture: healthy to healthy");
    assert_step_saved(
        &store,
        &second,
        &expected,
        vec![success(at(20)).with_number(2)],
    )
    .await;
    assert_eq!(next_wake_at(&store).await, expected.snitch().wake_at());
    assert_eq!(store.events(&fresh.token, 10).await.expect("read").len(), 1);

    // With a webhook, the event's delivery is stored with it.
    let other = snitch(&acme, 3, t0());
    insert(&store, &other).await;
    let hook = webhook(&acme, 1, None);
    let mut hooked = PendingCheckIns::new(
        vec![success(at(30))],
        Vec::new(),
        Some(only_hooks(vec![hook])),
        10,
    );
    let saved = stepped_in_place(&store, &other.token, &mut hooked).await;
    let ids: Vec<String> = saved.events().iter().map(|e| e.id.clone()).collect();
    assert_eq!(ids.len(), 1, "pending to healthy");
    let deliveries = store.deliveries(&ids).await.expect("read");
    assert_eq!(deliveries.len(), saved.deliveries().len());
    assert!(
        deliveries
            .iter()
            .any(|d| matches!(d.channel, Channel::Webhook { .. })),
        "{deliveries:?}"
    );
}

/// A save replaces every field, setting and clearing optional ones alike.
pub async fn save_replaces_every_field(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let plain = snitch(&acme, 1, t0());
    insert(&store, &plain).await;

    let rich = apply(
        &store,
        Change::new(&plain, rich_snitch(&acme, 1), Vec::new(), vec![]),
    )
    .await;
    assert_eq!(stored(&store, &plain.token).await.as_ref(), Some(&rich));

    let cleared = apply(
        &store,
        Change::new(&rich, plain.clone(), Vec::new(), vec![]),
    )
    .await;
    assert_eq!(cleared.version, 3);
    assert_eq!(stored(&store, &plain.token).await, Some(cleared));
}

/// A cron snitch keeps its expression, time zone, grace and early span through an insert,
/// a check-in's save and a save that changes them; it turns into an interval snitch and
/// back; and it is due at its run's deadline like any other.
pub async fn a_cron_snitch_keeps_its_schedule_through_every_save(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let mut cron = snitch(&acme, 1, t0());
    cron.cadence = cron_cadence("30 2 * * MON-FRI", "Australia/Lord_Howe", 5_400, 120);
    insert(&store, &cron).await;
    assert_eq!(stored(&store, &cron.token).await.as_ref(), Some(&cron));

    let checked = apply(&store, checked_in(&cron, at(10))).await;
    assert_eq!(stored(&store, &cron.token).await.as_ref(), Some(&checked));
    let deadline = checked
        .state
        .deadline_at
        .expect("a deadline after a check-in");
    assert!(store
        .due(deadline - Duration::milliseconds(1), 10)
        .await
        .expect("due")
        .is_empty());
    let due = store.due(deadline, 10).await.expect("due");
    assert_eq!(
        due.iter().map(|s| &s.token).collect::<Vec<_>>(),
        [&cron.token]
    );
    // Its missing event keeps when the run was expected, in UTC and in its zone.
    let missed = advanced(&checked, deadline);
    assert!(
        missed.events()[0].expected_at_local.is_some(),
        "fixture: a schedule's missing event"
    );
    let checked = apply(&store, missed.clone()).await;
    assert_eq!(
        store.events(&cron.token, 1).await.expect("events"),
        missed.events()
    );

    let mut moved = checked.clone();
    moved.cadence = cron_cadence("*/20 9-17 * * *", "Asia/Kathmandu", 60, 0);
    let moved = apply(&store, Change::new(&checked, moved, Vec::new(), vec![])).await;
    assert_eq!(stored(&store, &cron.token).await.as_ref(), Some(&moved));

    let mut hourly = moved.clone();
    hourly.cadence = Interval::Hourly.into();
    let hourly = apply(&store, Change::new(&moved, hourly, Vec::new(), vec![])).await;
    assert_eq!(stored(&store, &cron.token).await.as_ref(), Some(&hourly));
    let mut back = hourly.clone();
    back.cadence = cron_cadence("@daily", "UTC", 31_536_000, 3_600);
    let back = apply(&store, Change::new(&hourly, back, Vec::new(), vec![])).await;
    assert_eq!(stored(&store, &cron.token).await, Some(back));
}

/// Runs through a store: a snitch's maximum runtime, open runs and last run; check-ins of
/// every kind with their number, run id, reported duration and output (10,000 bytes of
/// two-byte characters, a replaced NUL); the reason and run of events; and a run's
/// timeout as the snitch's wake-up time.
pub async fn runs_keep_their_check_ins_output_and_timeouts_through_every_save(
    store: Arc<dyn Storage>,
) {
    use crate::runs::{AlertReason, CheckInBody, CheckInKind, RunId};
    let acme = with_case(&store, "acme").await;
    let mut fresh = snitch(&acme, 1, t0());
    fresh.max_runtime_seconds = Some(600);
    insert(&store, &fresh).await;
    assert_eq!(stored(&store, &fresh.token).await.as_ref(), Some(&fresh));
    let checked = apply(&store, checked_in(&fresh, at(5))).await;

    let run_id = RunId::parse("5b7c1d2e-0000-4000-8000-000000000001");
    let start = success(at(70))
        .with_kind(CheckInKind::Start)
        .with_run_id(run_id.clone())
        .with_body(CheckInBody::truncating(b"starting \0 up", 10_000))
        .with_number(2);
    let started = apply(&store, checked_in_with(&checked, start.clone())).await;
    assert!(started.state.running(), "fixture: a run is open");
    assert_eq!(stored(&store, &fresh.token).await.as_ref(), Some(&started));
    let timeout = started.wake_at().expect("a wake-up time");
    assert_eq!(timeout, at(80), "the run times out before the deadline");
    let due = store.due(timeout, 10).await.expect("due");
    assert_eq!(due.len(), 1, "due at its run's timeout");

    let output = "é".repeat(6_000);
    let end = failure(at(75), "3", "disk full")
        .with_run_id(run_id)
        .with_duration_ms(Some(299_500))
        .with_body(CheckInBody::truncating(output.as_bytes(), 10_000))
        .with_number(3);
    let change = checked_in_with(&started, end.clone());
    assert_eq!(
        change.events()[0].reason,
        Some(AlertReason::ExitStatus),
        "fixture: an errored run"
    );
    let ended = apply(&store, change.clone()).await;
    assert_eq!(stored(&store, &fresh.token).await.as_ref(), Some(&ended));
    assert_eq!(
        store.check_ins(&fresh.token, 2).await.expect("check-ins"),
        [end.clone(), start.clone()]
    );
    assert_eq!(
        end.body.as_ref().map(|b| b.as_str().len()),
        Some(10_000),
        "fixture: the body is cut at the limit"
    );
    assert_eq!(
        store.events(&fresh.token, 1).await.expect("events"),
        change.events()
    );

    let log = success(at(76))
        .with_kind(CheckInKind::Log)
        .with_body(CheckInBody::truncating(b"a line", 10_000))
        .with_number(4);
    let logged = apply(&store, checked_in_with(&ended, log.clone())).await;
    let hang = success(at(130))
        .with_kind(CheckInKind::Start)
        .with_number(5);
    let hung = apply(&store, checked_in_with(&logged, hang.clone())).await;
    let timed_out = advanced(&hung, at(150));
    assert_eq!(
        timed_out.events()[0].reason,
        Some(AlertReason::Timeout),
        "fixture: a run that timed out"
    );
    let after = apply(&store, timed_out.clone()).await;
    assert_eq!(stored(&store, &fresh.token).await.as_ref(), Some(&after));
    assert_eq!(
        store.events(&fresh.token, 1).await.expect("events"),
        timed_out.events()
    );
    assert_eq!(
        store.check_ins(&fresh.token, 3).await.expect("check-ins"),
        [hang, log, end]
    );
}

/// A change made from a stale read (or claiming any other version) is refused whole: the
/// snitch, its check-ins and its events stay as they were.
pub async fn save_of_stale_version_conflicts_and_changes_nothing(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let fresh = snitch(&acme, 1, t0());
    insert(&store, &fresh).await;

    let mut renamed = fresh.clone();
    renamed.name = SnitchName::parse("renamed").expect("valid name");
    let winner = apply(&store, Change::new(&fresh, renamed, Vec::new(), vec![])).await;

    let stale = checked_in(&fresh, at(10));
    assert!(!stale.events.is_empty(), "fixture: the stale change emits");
    let mut from_the_future = checked_in(&winner, at(10));
    from_the_future.snitch.version = 10;
    for change in [stale, from_the_future] {
        let result = store.save(&change).await;
        assert!(
            matches!(result, Err(StorageError::Conflict)),
            "expected Conflict, got {result:?}"
        );
    }

    assert_eq!(stored(&store, &fresh.token).await, Some(winner));
    assert_eq!(
        store.check_ins(&fresh.token, 10).await.expect("read"),
        vec![]
    );
    assert_eq!(store.events(&fresh.token, 10).await.expect("read"), vec![]);
    assert_eq!(due(&store, far_future(), 10).await, vec![]);
}

/// A change to a snitch that was never stored, or was deleted, is refused and creates
/// nothing.
pub async fn save_of_missing_snitch_is_not_found(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let deleted = snitch(&acme, 1, t0());
    insert(&store, &deleted).await;
    assert!(store.delete_snitch(&deleted.token).await.expect("delete"));
    let never = snitch(&acme, 2, t0());

    for s in [deleted, never] {
        let result = store.save(&checked_in(&s, at(10))).await;
        assert!(
            matches!(result, Err(StorageError::NotFound)),
            "expected NotFound, got {result:?}"
        );
        assert_eq!(stored(&store, &s.token).await, None);
        assert_eq!(store.check_ins(&s.token, 10).await.expect("read"), vec![]);
        assert_eq!(store.events(&s.token, 10).await.expect("read"), vec![]);
    }
    assert_eq!(listed(&store, &acme, &[]).await, vec![]);
    assert_eq!(next_wake_at(&store).await, None);
}

/// Of concurrent changes made from the same read, exactly one is kept, whole.
pub async fn concurrent_saves_from_one_read_let_exactly_one_win(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let fresh = snitch(&acme, 1, t0());
    insert(&store, &fresh).await;
    let read = stored(&store, &fresh.token).await.expect("stored");

    let changes: Vec<Change> = (0..10).map(|i| checked_in(&read, at(10 + i))).collect();
    let results = join_all(changes.iter().map(|c| store.save(c))).await;

    let mut winners = Vec::new();
    for (change, result) in changes.iter().zip(&results) {
        match result {
            Ok(()) => winners.push(change),
            Err(StorageError::Conflict) => {}
            Err(e) => panic!("expected Ok or Conflict, got {e:?}"),
        }
    }
    let [winner] = winners[..] else {
        panic!("expected exactly one save to win, {} did", winners.len());
    };
    assert_eq!(
        stored(&store, &fresh.token).await.as_ref(),
        Some(&winner.snitch)
    );
    let check_ins = store.check_ins(&fresh.token, 100).await.expect("read");
    assert_eq!(check_ins, winner.check_ins.clone());
    let events = store.events(&fresh.token, 100).await.expect("read");
    assert_eq!(events, newest_first(&winner.events));
}

// ---------------------------------------------------------------------------------------
// History
// ---------------------------------------------------------------------------------------

/// Check-ins read back whole, newest first, at most `limit`; a change without a
/// check-in adds none.
pub async fn check_ins_are_newest_first_and_limited(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let mut s = snitch(&acme, 1, t0());
    insert(&store, &s).await;
    let sent = vec![
        success(at(10)),
        failure(at(20), "1", "disk full"),
        CheckIn {
            message: CheckInMessage::truncating("all good ✓"),
            ..success(at(30))
        },
        failure(at(40), "segfault", ""),
        success(at(50)),
    ];
    for check_in in &sent {
        s = apply(&store, checked_in_with(&s, check_in.clone())).await;
    }
    s = apply(&store, paused(&s, PauseUntil::Unpaused, at(55))).await;

    let newest = newest_first(&sent);
    assert_eq!(store.check_ins(&s.token, 10).await.expect("read"), newest);
    assert_eq!(store.check_ins(&s.token, 5).await.expect("read"), newest);
    assert_eq!(
        store.check_ins(&s.token, 2).await.expect("read"),
        newest[..2]
    );
    assert_eq!(store.check_ins(&s.token, 0).await.expect("read"), vec![]);
}

/// `save_all` of a batch mixing snitches, the same snitch twice in a row, a stale
/// version and a missing snitch: each change gets its own answer, the refused ones
/// change nothing, and the second change of one snitch sees the first.
pub async fn save_all_answers_each_change_of_a_mixed_batch(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let a = snitch(&acme, 1, t0());
    let b = snitch(&acme, 2, t0());
    let stale = snitch(&acme, 3, t0());
    let missing = snitch(&acme, 4, t0());
    for s in [&a, &b, &stale] {
        insert(&store, s).await;
    }
    let moved_on = apply(&store, checked_in(&stale, at(1))).await;
    let a1 = checked_in(&a, at(2));
    let a2 = checked_in(&a1.snitch, at(3));
    let batch = vec![
        a1.clone(),
        checked_in(&b, at(2)),
        checked_in(&stale, at(2)),
        checked_in(&missing, at(2)),
        a2.clone(),
    ];
    let results = store.save_all(&batch).await;
    let outcomes: Vec<&str> = results
        .iter()
        .map(|r| match r {
            Ok(()) => "ok",
            Err(StorageError::Conflict) => "conflict",
            Err(StorageError::NotFound) => "not found",
            Err(_) => "other",
        })
        .collect();
    assert_eq!(outcomes, ["ok", "ok", "conflict", "not found", "ok"]);
    let read = |s: &Snitch| {
        let (store, token) = (store.clone(), s.token.clone());
        async move { store.snitch(&token).await.expect("read") }
    };
    assert_eq!(
        read(&a).await,
        Some(a2.snitch.clone()),
        "both changes of a, in order"
    );
    assert_eq!(read(&b).await, Some(batch[1].snitch.clone()));
    assert_eq!(
        read(&stale).await,
        Some(moved_on),
        "the stale change wrote nothing"
    );
    assert_eq!(read(&missing).await, None);
    let a_check_ins = store.check_ins(&a.token, 10).await.expect("read");
    assert_eq!(a_check_ins, newest_first(&[success(at(2)), success(at(3))]));
    let stale_check_ins = store.check_ins(&stale.token, 10).await.expect("read");
    assert_eq!(stale_check_ins.len(), 1, "only the check-in that applied");
}

/// A change of settings (an API update) saved in one batch with check-ins of other
/// snitches stores its settings, and check-ins that follow it keep them: a store that
/// writes only the state of changes that keep the settings must not lose them, nor
/// apply that shortcut to a batch holding a change of settings.
pub async fn new_settings_saved_beside_check_ins_are_kept(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let (a, b, c) = (
        snitch(&acme, 1, t0()),
        snitch(&acme, 2, t0()),
        snitch(&acme, 3, t0()),
    );
    for s in [&a, &b, &c] {
        insert(&store, s).await;
    }
    let mut renamed = rich_snitch(&acme, 1);
    renamed.state = a.state.clone();
    let update = Change::new(&a, renamed, Vec::new(), vec![]);
    assert!(!update.keeps_settings(), "an update of the settings");
    let (b1, c1) = (checked_in(&b, at(1)), checked_in(&c, at(1)));
    assert!(b1.keeps_settings() && c1.keeps_settings(), "check-ins");
    let batch = vec![b1.clone(), update.clone(), c1.clone()];
    let results = store.save_all(&batch).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    for change in &batch {
        let token = change.snitch().token();
        assert_eq!(stored(&store, token).await.as_ref(), Some(change.snitch()));
    }

    // Check-ins after the update, alone and batched: the new settings stay.
    let a1 = checked_in(update.snitch(), at(2));
    let a2 = checked_in(a1.snitch(), at(3));
    let b2 = checked_in(b1.snitch(), at(2));
    let results = store.save_all(&[a1, b2.clone()]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    apply(&store, a2.clone()).await;
    let a_now = stored(&store, a.token()).await.expect("stored");
    assert_eq!(&a_now, a2.snitch());
    assert_eq!(a_now.name(), update.snitch().name());
    assert_eq!(a_now.tags(), update.snitch().tags());
    assert_eq!(a_now.alert_email(), update.snitch().alert_email());
    assert_eq!(stored(&store, b.token()).await.as_ref(), Some(b2.snitch()));
}

/// A snitch's e-mail keywords, set through the service, read back exactly (quotes, an
/// apostrophe, a backslash, non-ASCII) after a create, an update, check-ins that keep
/// the settings and a save that changes them; an update without them keeps them, and
/// empty lists clear them.
pub async fn email_keywords_round_trip_through_create_update_and_read(store: Arc<dyn Storage>) {
    use crate::email::KeywordScope;
    use crate::service::EmailKeywordsInput;
    let (service, acme) = service_with_case(&store).await;
    let words = |list: &[&str]| list.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
    let given = EmailKeywordsInput {
        failure: words(&["FAILED", r#"say "no""#]),
        success: words(&["O'Brien's OK", "réussi ✓", r"back\slash {x}"]),
        start: words(&["NULL"]),
        search: Some("body".into()),
    };
    let fields = SnitchFields {
        name: Some("mailed job".into()),
        interval: Some("hourly".into()),
        email_keywords: Some(given.clone()),
        ..SnitchFields::default()
    };
    let made = service.create(&acme, &fields).await.expect("create");
    let keywords = made.email_keywords().clone();
    assert_eq!(keywords.failure(), given.failure.as_slice());
    assert_eq!(keywords.success(), given.success.as_slice());
    assert_eq!(keywords.start(), given.start.as_slice());
    assert_eq!(keywords.scope(), KeywordScope::Body);
    let token = made.token.clone();
    assert_eq!(stored(&store, &token).await.as_ref(), Some(&made));
    assert_eq!(
        store.snitches(&acme.id, &[]).await.expect("list"),
        std::slice::from_ref(&made)
    );

    // A check-in's save (settings kept) and an update of other fields keep them.
    let checked = service
        .check_in(token.as_str(), Outcome::Success, None)
        .await
        .expect("check in");
    assert_eq!(checked.email_keywords(), &keywords);
    let renamed = SnitchFields {
        name: Some("renamed".into()),
        ..SnitchFields::default()
    };
    let renamed = service
        .update(&acme, token.as_str(), &renamed)
        .await
        .expect("rename");
    assert_eq!(renamed.email_keywords(), &keywords);
    assert_eq!(stored(&store, &token).await.as_ref(), Some(&renamed));

    // An update replaces them.
    let other = EmailKeywordsInput {
        failure: words(&["échec"]),
        search: Some("subject".into()),
        ..EmailKeywordsInput::default()
    };
    let update = SnitchFields {
        email_keywords: Some(other),
        ..SnitchFields::default()
    };
    let changed = service
        .update(&acme, token.as_str(), &update)
        .await
        .expect("update");
    assert_eq!(changed.email_keywords().failure(), ["échec"]);
    assert!(changed.email_keywords().success().is_empty());
    assert_eq!(changed.email_keywords().scope(), KeywordScope::Subject);
    assert_eq!(stored(&store, &token).await.as_ref(), Some(&changed));

    // Bad keywords are a problem of `email_keywords`, and change nothing.
    let bad = SnitchFields {
        email_keywords: Some(EmailKeywordsInput {
            success: vec!["a\u{7}b".to_owned()],
            search: Some("headers".into()),
            ..EmailKeywordsInput::default()
        }),
        ..SnitchFields::default()
    };
    match service.update(&acme, token.as_str(), &bad).await {
        Err(ServiceError::Invalid(v)) => {
            assert!(v.iter().all(|p| p.attribute == "email_keywords"), "{v:?}")
        }
        other => panic!("expected 422, got {other:?}"),
    }
    assert_eq!(stored(&store, &token).await.as_ref(), Some(&changed));

    // Empty lists clear them, whatever the search says.
    let clear = SnitchFields {
        email_keywords: Some(EmailKeywordsInput {
            search: Some("body".into()),
            ..EmailKeywordsInput::default()
        }),
        ..SnitchFields::default()
    };
    let cleared = service
        .update(&acme, token.as_str(), &clear)
        .await
        .expect("clear");
    assert_eq!(
        cleared.email_keywords(),
        &crate::email::EmailKeywords::default()
    );
    assert_eq!(stored(&store, &token).await.as_ref(), Some(&cleared));
}

/// A store keeps the most recent `CHECK_INS_KEPT` check-ins and drops older ones.
pub async fn check_ins_keep_the_most_recent_ones(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let mut s = snitch(&acme, 1, t0());
    insert(&store, &s).await;
    let sent: Vec<CheckIn> = (0..CHECK_INS_KEPT as i64 + 5)
        .map(|i| success(at(i)))
        .collect();
    for check_in in &sent {
        s = apply(&store, checked_in_with(&s, check_in.clone())).await;
    }

    let kept = store.check_ins(&s.token, 1_000).await.expect("read");
    assert_eq!(kept.len(), CHECK_INS_KEPT);
    assert_eq!(kept, newest_first(&sent[5..]));
}

/// A change may carry several check-ins (concurrent ones, saved together): all are kept,
/// in order, and the history still holds only the newest [`CHECK_INS_KEPT`].
pub async fn a_change_with_several_check_ins_keeps_them_in_order(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let s = insert_checked_in(&store, &acme, 1, at(0)).await;
    let three = vec![
        success(at(1)),
        failure(at(1), "2", "disk full"),
        success(at(2)),
    ];
    let s = apply(&store, several_check_ins(&s, &three)).await;
    let kept = store.check_ins(&s.token, 10).await.expect("read");
    assert_eq!(kept[..3], newest_first(&three)[..]);
    assert_eq!(kept.len(), 4, "with the first check-in");

    let many: Vec<CheckIn> = (0..CHECK_INS_KEPT as i64 + 50)
        .map(|i| success(at(3) + Duration::milliseconds(i)))
        .collect();
    let s = apply(&store, several_check_ins(&s, &many)).await;
    let kept = store.check_ins(&s.token, 1_000).await.expect("read");
    assert_eq!(kept, newest_first(&many[50..]));
}

/// The sweep saves with the server's history length, like a check-in: a snitch that went
/// missing keeps every check-in the service keeps (more than the default, so a store that
/// trims lazily would cut it back), and the sweep's events reach the emitted hook (what the
/// metrics count).
pub async fn a_sweep_keeps_the_servers_history_and_tells_the_hooks(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let s = snitch(&acme, 1, t0());
    insert(&store, &s).await;
    let kept_by_server = 2 * CHECK_INS_KEPT + 50;
    let emitted = Arc::new(std::sync::Mutex::new(Vec::<EventKind>::new()));
    let seen = Arc::clone(&emitted);
    let service = SnitchService::new(Arc::clone(&store), Arc::new(ManualClock::new(at(1))))
        .with_check_in_history(kept_by_server)
        // The jump to the deadline is the test's, not an outage of ours.
        .with_outage_threshold(Duration::days(3650))
        .with_emitted_hook(Arc::new(move |events: &[Event]| {
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.extend(events.iter().map(|e| e.kind));
        }));
    for _ in 0..kept_by_server {
        service
            .check_in(s.token.as_str(), Outcome::Success, None)
            .await
            .expect("check-in");
    }
    // Checked in during the first hour: due at at(120).
    let report = service.tick(at(121)).await.expect("sweep");
    assert_eq!(report.events, 1, "one snitch.missing");
    let stored = store.snitch(&s.token).await.expect("read").expect("stored");
    assert_eq!(stored.status(), Status::Failed);
    let kept = store.check_ins(&s.token, 10_000).await.expect("read");
    assert_eq!(
        kept.len(),
        kept_by_server,
        "the sweep kept the server's history"
    );
    let emitted = emitted.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(emitted.last(), Some(&EventKind::Missing), "{emitted:?}");
}

/// A change keeps as many check-ins as its `keep_check_ins` says (a server's
/// `check_in_history`): a shorter history trims at once, a longer one lets it grow; the
/// service sets it on every change it saves.
pub async fn the_history_length_is_the_changes_keep_check_ins(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let mut s = snitch(&acme, 1, t0());
    insert(&store, &s).await;
    let sent: Vec<CheckIn> = (0..10).map(|i| success(at(i))).collect();
    for check_in in &sent {
        let mut change = checked_in_with(&s, check_in.clone());
        change.keep_check_ins = 4;
        s = apply(&store, change).await;
    }
    let kept = store.check_ins(&s.token, 1_000).await.expect("read");
    assert_eq!(kept, newest_first(&sent[6..]));

    // Longer: the history grows past the old length, up to the new one.
    let more: Vec<CheckIn> = (10..20).map(|i| success(at(i))).collect();
    let mut change = several_check_ins(&s, &more);
    change.keep_check_ins = 7;
    s = apply(&store, change).await;
    let kept = store.check_ins(&s.token, 1_000).await.expect("read");
    assert_eq!(kept, newest_first(&more[3..]));

    // Shorter again: trimmed by the next check-in; 0 is taken as 1.
    let mut change = checked_in_with(&s, failure(at(20), "3", "boom"));
    change.keep_check_ins = 0;
    s = apply(&store, change).await;
    let kept = store.check_ins(&s.token, 1_000).await.expect("read");
    assert_eq!(kept, vec![failure(at(20), "3", "boom")]);

    // Through the service: its `check_in_history` is what every store keeps.
    let service = SnitchService::new(Arc::clone(&store), Arc::new(ManualClock::new(at(30))))
        .with_check_in_history(3);
    for i in 0..5 {
        let message = CheckInMessage::truncating(&format!("run {i}"));
        service
            .check_in(s.token.as_str(), Outcome::Success, message)
            .await
            .expect("check-in");
    }
    let kept = store.check_ins(&s.token, 1_000).await.expect("read");
    let messages: Vec<&str> = kept
        .iter()
        .filter_map(|c| c.message.as_ref().map(|m| m.as_str()))
        .collect();
    assert_eq!(messages, ["run 4", "run 3", "run 2"]);
}

/// A short history cut back many times (a store may trim lazily, in steps) always
/// reads as the newest it keeps, in order, and a longer length asked for later shows
/// exactly the check-ins made since, never an older one left behind.
pub async fn a_history_trimmed_again_and_again_keeps_the_newest(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let mut s = snitch(&acme, 1, t0());
    insert(&store, &s).await;
    let mut sent = Vec::new();
    for i in 0..60 {
        let check_in = success(at(i));
        let mut change = checked_in_with(&s, check_in.clone());
        change.keep_check_ins = 3;
        s = apply(&store, change).await;
        sent.push(check_in);
        let kept = store.check_ins(&s.token, 1_000).await.expect("read");
        let newest = &sent[sent.len().saturating_sub(3)..];
        assert_eq!(kept, newest_first(newest), "after {} check-ins", i + 1);
    }

    let more: Vec<CheckIn> = (60..70).map(|i| success(at(i))).collect();
    let mut change = several_check_ins(&s, &more);
    change.keep_check_ins = 20;
    apply(&store, change).await;
    let kept = store.check_ins(&s.token, 1_000).await.expect("read");
    let mut expected = sent[sent.len() - 3..].to_vec();
    expected.extend(more);
    // At most the 3 kept before and the 10 since: nothing older comes back.
    assert!(kept.len() <= 13, "{} check-ins", kept.len());
    assert_eq!(kept, newest_first(&expected[expected.len() - kept.len()..]));
    assert!(kept.len() >= 10, "the 10 new ones are all kept");
}

/// A change that asks for a longer history than the snitch kept shows the check-ins it
/// kept and the new ones, never one the shorter length had cut, however lazily the store
/// deletes them (Postgres trims once a snitch holds twice its length).
pub async fn a_longer_history_never_brings_back_what_a_shorter_one_cut(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let mut s = snitch(&acme, 1, t0());
    insert(&store, &s).await;
    let mut sent = Vec::new();
    for i in 0..5 {
        let check_in = success(at(i));
        let mut change = checked_in_with(&s, check_in.clone());
        change.keep_check_ins = 3;
        s = apply(&store, change).await;
        sent.push(check_in);
    }
    let newer = success(at(5));
    let mut change = checked_in_with(&s, newer.clone());
    change.keep_check_ins = 20;
    s = apply(&store, change).await;
    let mut expected = sent[2..].to_vec();
    expected.push(newer);
    let kept = store.check_ins(&s.token, 1_000).await.expect("read");
    assert_eq!(kept, newest_first(&expected), "the 3 kept and the new one");
    // And it grows from there as check-ins arrive.
    let more: Vec<CheckIn> = (6..30).map(|i| success(at(i))).collect();
    for check_in in &more {
        let mut change = checked_in_with(&s, check_in.clone());
        change.keep_check_ins = 20;
        s = apply(&store, change).await;
    }
    expected.extend(more);
    let kept = store.check_ins(&s.token, 1_000).await.expect("read");
    assert_eq!(kept, newest_first(&expected[expected.len() - 20..]));
}

/// A service over the store, its clock standing at `at(30)`.
async fn service_with_case(store: &Arc<dyn Storage>) -> (SnitchService, Case) {
    let acme = with_case(store, "acme").await;
    let service = SnitchService::new(Arc::clone(store), Arc::new(ManualClock::new(at(30))));
    (service, acme)
}

async fn created(service: &SnitchService, case: &Case) -> Snitch {
    let fields = SnitchFields {
        name: Some("shared job".into()),
        interval: Some("hourly".into()),
        ..SnitchFields::default()
    };
    service.create(case, &fields).await.expect("create")
}

/// docs/rules.md#concurrency: many workers checking in to one snitch at once are all
/// answered and all recorded; the first one reports, the rest are silent.
pub async fn concurrent_check_ins_of_one_snitch_are_all_recorded(store: Arc<dyn Storage>) {
    const WORKERS: usize = 64;
    let (service, acme) = service_with_case(&store).await;
    let s = created(&service, &acme).await;
    let token = s.token.as_str();
    let results = join_all((0..WORKERS).map(|i| {
        let service = &service;
        async move {
            let message = CheckInMessage::truncating(&format!("worker {i}"));
            service.check_in(token, Outcome::Success, message).await
        }
    }))
    .await;
    for (i, result) in results.iter().enumerate() {
        assert!(result.is_ok(), "check-in {i} failed: {result:?}");
    }

    let kept = store.check_ins(&s.token, 1_000).await.expect("read");
    let mut messages: Vec<String> = kept
        .iter()
        .filter_map(|c| c.message.as_ref().map(|m| m.as_str().to_owned()))
        .collect();
    messages.sort();
    let mut sent: Vec<String> = (0..WORKERS).map(|i| format!("worker {i}")).collect();
    sent.sort();
    assert_eq!(messages, sent, "every check-in recorded once");
    let events = store.events(&s.token, 100).await.expect("read");
    assert_eq!(events.len(), 1, "one snitch.reporting: {events:?}");
    let stored = stored(&store, &s.token).await.expect("stored");
    assert_eq!(stored.status(), Status::Healthy);
}

/// No check-in is lost to a conflict with another writer of its snitch, and an API write
/// to a busy snitch succeeds: workers check in while clients add tags and pause and
/// unpause it, all at once; every check-in is recorded and every write applied.
pub async fn check_ins_and_api_writes_of_one_snitch_all_succeed(store: Arc<dyn Storage>) {
    const WORKERS: usize = 8;
    const CHECK_INS_EACH: usize = 12;
    const WRITERS: usize = 4;
    const WRITES_EACH: usize = 6;
    let (service, acme) = service_with_case(&store).await;
    let s = created(&service, &acme).await;
    let token = s.token.as_str();
    let check_ins = join_all((0..WORKERS).map(|w| {
        let service = &service;
        async move {
            let mut failures = Vec::new();
            for n in 0..CHECK_INS_EACH {
                let message = CheckInMessage::truncating(&format!("w{w} #{n}"));
                if let Err(e) = service.check_in(token, Outcome::Success, message).await {
                    failures.push(format!("check-in w{w} #{n}: {e}"));
                }
            }
            failures
        }
    }));
    let writes = join_all((0..WRITERS).map(|w| {
        let (service, acme) = (&service, &acme);
        async move {
            let mut failures = Vec::new();
            for n in 0..WRITES_EACH {
                let tag = vec![format!("t{w}-{n}")];
                if let Err(e) = service.add_tags(acme, token, &tag).await {
                    failures.push(format!("add tag t{w}-{n}: {e}"));
                }
                // Pause and unpause change the status too, not only the settings.
                if let Err(e) = service.pause(acme, token, Some("unpaused")).await {
                    failures.push(format!("pause {w}/{n}: {e}"));
                }
                if let Err(e) = service.unpause(acme, token).await {
                    failures.push(format!("unpause {w}/{n}: {e}"));
                }
            }
            failures
        }
    }));
    let (check_ins, writes) = futures::join!(check_ins, writes);
    let failures: Vec<String> = check_ins.into_iter().chain(writes).flatten().collect();
    assert!(failures.is_empty(), "refused: {failures:#?}");

    let kept = store.check_ins(&s.token, 1_000).await.expect("read");
    let mut messages: Vec<String> = kept
        .iter()
        .filter_map(|c| c.message.as_ref().map(|m| m.as_str().to_owned()))
        .collect();
    messages.sort();
    let mut sent: Vec<String> = (0..WORKERS)
        .flat_map(|w| (0..CHECK_INS_EACH).map(move |n| format!("w{w} #{n}")))
        .collect();
    sent.sort();
    assert_eq!(messages, sent, "every check-in recorded once");
    let stored = stored(&store, &s.token).await.expect("stored");
    let mut tags: Vec<String> = stored.tags.iter().map(|t| t.as_str().to_owned()).collect();
    tags.sort();
    let mut added: Vec<String> = (0..WRITERS)
        .flat_map(|w| (0..WRITES_EACH).map(move |n| format!("t{w}-{n}")))
        .collect();
    added.sort();
    assert_eq!(tags, added, "every tag added");
}

/// docs/rules.md#hostile-input: U+0000 in a text field of the API is a validation problem,
/// decided before any store sees it, so every store answers alike.
pub async fn nul_in_api_text_is_refused_on_every_store(store: Arc<dyn Storage>) {
    let (service, acme) = service_with_case(&store).await;
    let nul = |attribute: &str| Validation::new(attribute, CONTAINS_NUL);
    let fields = SnitchFields {
        name: Some("a\0b".into()),
        interval: Some("hourly".into()),
        notes: Some("\0".into()),
        tags: Some(vec!["ok".into(), "x\0".into()]),
        alert_email: Some(vec!["a\0@example.com".into()]),
        ..SnitchFields::default()
    };
    match service.create(&acme, &fields).await {
        Err(ServiceError::Invalid(v)) => {
            for attribute in ["name", "notes", "tags", "alert_email"] {
                assert!(v.iter().any(|p| *p == nul(attribute)), "{attribute}: {v:?}");
            }
        }
        other => panic!("expected 422, got {other:?}"),
    }
    assert!(listed(&store, &acme, &[]).await.is_empty());

    let s = created(&service, &acme).await;
    let update = SnitchFields {
        name: Some("\0".into()),
        ..SnitchFields::default()
    };
    assert!(matches!(
        service.update(&acme, s.token.as_str(), &update).await,
        Err(ServiceError::Invalid(_))
    ));
    assert!(matches!(
        service
            .add_tags(&acme, s.token.as_str(), &["\0".into()])
            .await,
        Err(ServiceError::Invalid(_))
    ));
    // A tag that cannot exist is not on the snitch: removing it is a no-op.
    let tags = service.remove_tag(&acme, s.token.as_str(), "\0").await;
    assert_eq!(tags.expect("no-op"), Tags::default());
    assert!(matches!(
        SnitchService::parse_tag_filter("a,\0"),
        Err(ServiceError::Invalid(_))
    ));
    for bad in ["\0", "tok\0", "%00"] {
        assert!(matches!(
            service.get(&acme, bad).await,
            Err(ServiceError::NotFound)
        ));
        assert!(matches!(
            service.delete_webhook(&acme, bad).await,
            Err(ServiceError::NotFound)
        ));
    }
    for (url, secret, attribute) in [
        ("https://example.com/\0", None, "url"),
        ("https://example.com/", Some("s\0"), "secret"),
    ] {
        match service.create_webhook(&acme, url, secret).await {
            Err(ServiceError::Invalid(v)) => {
                assert!(v.iter().any(|p| *p == nul(attribute)), "{v:?}")
            }
            other => panic!("expected 422 for {attribute}, got {other:?}"),
        }
    }
    assert!(store.webhooks(&acme.id).await.expect("read").is_empty());
}

/// docs/rules.md#hostile-input: a check-in is never refused for its text; NUL in the
/// message or the exit status is stored as U+FFFD and read back alike on every store.
pub async fn nul_in_check_ins_is_kept_as_a_replacement_character(store: Arc<dyn Storage>) {
    let (service, acme) = service_with_case(&store).await;
    let s = created(&service, &acme).await;
    let message = CheckInMessage::truncating("a\0b");
    service
        .check_in(
            s.token.as_str(),
            Outcome::from_exit_status(Some("\0")),
            message,
        )
        .await
        .expect("recorded");
    assert!(matches!(
        service.check_in("tok\0", Outcome::Success, None).await,
        Err(ServiceError::NotFound)
    ));
    let kept = store.check_ins(&s.token, 10).await.expect("read");
    assert_eq!(kept.len(), 1);
    assert_eq!(
        kept[0].message.as_ref().map(CheckInMessage::as_str),
        Some("a\u{FFFD}b")
    );
    assert_eq!(
        kept[0].outcome,
        Outcome::Error {
            exit_status: "\u{FFFD}".into()
        }
    );
    let events = store.events(&s.token, 10).await.expect("read");
    assert_eq!(events.len(), 1, "the errored alert");
    // The event tells the check-in as DMS does: its time, outcome and message.
    let told = events[0].check_in.as_ref().expect("the errored check-in");
    assert_eq!(
        (told.at, &told.outcome, &told.message),
        (kept[0].at, &kept[0].outcome, &kept[0].message)
    );
}

/// Events read back whole, newest first (in the order emitted within a change), at most
/// `limit`.
pub async fn events_are_newest_first_and_limited(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let fresh = snitch(&acme, 1, t0());
    insert(&store, &fresh).await;

    let mut emitted = Vec::new();
    let mut s = fresh.clone();
    let steps: [fn(&Snitch) -> Change; 5] = [
        |s| checked_in(s, at(10)),
        |s| advanced(s, at(120)),
        // Two more hours missed at once: one catch-up event with `missed_periods: 2`.
        |s| advanced(s, at(250)),
        |s| checked_in_with(s, failure(at(260), "1", "boom")),
        |s| paused(s, PauseUntil::Unpaused, at(270)),
    ];
    for make in steps {
        let change = make(&s);
        emitted.extend(change.events.iter().cloned());
        s = apply(&store, change).await;
    }
    assert!(
        emitted.len() >= 5,
        "fixture: reporting, missing, missing (caught up), errored, paused"
    );
    assert!(
        emitted.iter().any(|e| e.missed_periods == 2),
        "fixture: a catch-up event"
    );

    let newest = newest_first(&emitted);
    assert_eq!(store.events(&s.token, 100).await.expect("read"), newest);
    assert_eq!(store.events(&s.token, 3).await.expect("read"), newest[..3]);
    assert_eq!(store.events(&s.token, 0).await.expect("read"), vec![]);
}

/// An unknown token, or a snitch with no history, has no check-ins and no events.
pub async fn history_of_unknown_snitch_is_empty(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    insert_checked_in(&store, &acme, 1, at(10)).await;
    insert(&store, &snitch(&acme, 2, t0())).await;
    for n in [2, 404] {
        assert_eq!(store.check_ins(&token(n), 10).await.expect("read"), vec![]);
        assert_eq!(store.events(&token(n), 10).await.expect("read"), vec![]);
    }
}

// ---------------------------------------------------------------------------------------
// Deleting
// ---------------------------------------------------------------------------------------

/// `true` for a snitch that was there, `false` after and for one never stored.
pub async fn delete_snitch_reports_whether_it_existed(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    insert(&store, &snitch(&acme, 1, t0())).await;
    assert!(store.delete_snitch(&token(1)).await.expect("delete"));
    assert_eq!(stored(&store, &token(1)).await, None);
    assert!(!store.delete_snitch(&token(1)).await.expect("delete again"));
    assert!(!store
        .delete_snitch(&token(2))
        .await
        .expect("delete unknown"));
}

/// A deleted snitch leaves the listing, the deadline index and the history, and the
/// other snitches stay as they were.
pub async fn delete_snitch_removes_it_and_its_history(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let doomed = insert_checked_in(&store, &acme, 1, at(10)).await;
    let kept = insert_checked_in(&store, &acme, 2, at(70)).await;
    assert_eq!(
        doomed.wake_at(),
        Some(at(120)),
        "fixture: doomed wakes first"
    );
    assert_eq!(kept.wake_at(), Some(at(180)));
    assert_eq!(next_wake_at(&store).await, Some(at(120)));
    let kept_check_ins = store.check_ins(&kept.token, 10).await.expect("read");
    let kept_events = store.events(&kept.token, 10).await.expect("read");
    assert!(!kept_check_ins.is_empty() && !kept_events.is_empty());

    assert!(store.delete_snitch(&doomed.token).await.expect("delete"));

    assert_eq!(stored(&store, &doomed.token).await, None);
    assert_eq!(
        store.check_ins(&doomed.token, 10).await.expect("read"),
        vec![]
    );
    assert_eq!(store.events(&doomed.token, 10).await.expect("read"), vec![]);
    assert_eq!(listed(&store, &acme, &[]).await, tokens_of(&[2]));
    assert_eq!(due(&store, far_future(), 10).await, tokens_of(&[2]));
    assert_eq!(next_wake_at(&store).await, Some(at(180)));

    assert_eq!(stored(&store, &kept.token).await, Some(kept.clone()));
    assert_eq!(
        store.check_ins(&kept.token, 10).await.expect("read"),
        kept_check_ins
    );
    assert_eq!(
        store.events(&kept.token, 10).await.expect("read"),
        kept_events
    );
}

/// A deleted snitch no longer counts towards its case's limit.
pub async fn delete_snitch_frees_a_plan_slot(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    for n in [1, 2] {
        store
            .insert_snitch(&snitch(&acme, n, t0()), 2)
            .await
            .expect("below the limit");
    }
    let full = store.insert_snitch(&snitch(&acme, 3, t0()), 2).await;
    assert!(
        matches!(full, Err(StorageError::LimitReached { max: 2 })),
        "expected LimitReached {{ max: 2 }}, got {full:?}"
    );

    assert!(store.delete_snitch(&token(1)).await.expect("delete"));
    store
        .insert_snitch(&snitch(&acme, 3, t0()), 2)
        .await
        .expect("the deleted snitch freed its slot");
    assert_eq!(listed(&store, &acme, &[]).await, tokens_of(&[2, 3]));
}

// ---------------------------------------------------------------------------------------
// The deadline index
// ---------------------------------------------------------------------------------------

/// An empty store has nothing due and nothing to wake for.
pub async fn empty_store_has_nothing_due(store: Arc<dyn Storage>) {
    assert_eq!(due(&store, far_future(), 10).await, vec![]);
    assert_eq!(next_wake_at(&store).await, None);
}

/// A pending snitch has no deadline: never due.
pub async fn pending_snitch_is_never_due(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    insert(&store, &snitch(&acme, 1, t0())).await;
    assert_eq!(due(&store, far_future(), 10).await, vec![]);
    assert_eq!(next_wake_at(&store).await, None);
}

/// A snitch is due at its deadline exactly, not a millisecond before; `due` returns it
/// whole.
pub async fn snitch_is_due_from_its_deadline_on(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let s = insert_checked_in(&store, &acme, 1, at(10)).await;
    let deadline = at(120);
    assert_eq!(
        s.wake_at(),
        Some(deadline),
        "fixture: due at the end of the next hour"
    );

    assert_eq!(next_wake_at(&store).await, Some(deadline));
    let just_before = deadline - Duration::milliseconds(1);
    assert_eq!(due(&store, just_before, 10).await, vec![]);
    assert_eq!(
        store.due(deadline, 10).await.expect("read due"),
        vec![s.clone()]
    );
    assert_eq!(
        due(&store, deadline + Duration::hours(5), 10).await,
        vec![s.token]
    );
}

/// `due` lists the earliest wake-ups first, at most `limit`; `next_wake_at` is the
/// earliest. Inserted snitches that already have a deadline count too.
pub async fn due_is_earliest_first_and_limited(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    // Checked in at these minutes, so due at the end of the following hour.
    for (n, minute) in [(1, 130), (2, 10), (3, 190), (4, 70)] {
        let s = checked_in(&snitch(&acme, n, t0()), at(minute)).snitch;
        insert(&store, &s).await;
    }
    insert(&store, &snitch(&acme, 5, t0())).await;

    assert_eq!(next_wake_at(&store).await, Some(at(120)));
    let far = far_future();
    assert_eq!(due(&store, far, 10).await, tokens_of(&[2, 4, 1, 3]));
    assert_eq!(due(&store, far, 2).await, tokens_of(&[2, 4]));
    assert_eq!(due(&store, far, 0).await, vec![]);
    assert_eq!(due(&store, at(240), 10).await, tokens_of(&[2, 4, 1]));
    assert_eq!(due(&store, at(239), 10).await, tokens_of(&[2, 4]));
}

/// A save that moves the deadline later takes the snitch off the due list and moves
/// `next_wake_at`.
pub async fn due_follows_a_saved_deadline(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let s = insert_checked_in(&store, &acme, 1, at(10)).await;
    assert_eq!(due(&store, at(120), 10).await, tokens_of(&[1]));

    let later = apply(&store, checked_in(&s, at(70))).await;
    assert_eq!(
        later.wake_at(),
        Some(at(180)),
        "fixture: the deadline moved"
    );
    assert_eq!(due(&store, at(120), 10).await, vec![]);
    assert_eq!(due(&store, at(179), 10).await, vec![]);
    assert_eq!(next_wake_at(&store).await, Some(at(180)));
    assert_eq!(store.due(at(180), 10).await.expect("read due"), vec![later]);
}

/// Check-ins that leave the deadline where it was (repeated within the period) and ones
/// that move it, saved in one batch: the deadline index follows each snitch as saved. A
/// store may leave its `wake_at` index alone for the first kind ([`Change::keeps_wake_at`]),
/// never for the second; then a sweep's change moves a kept deadline.
pub async fn a_batch_keeping_and_moving_deadlines_is_due_as_saved(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let mut snitches = Vec::new();
    for n in 1..=4 {
        snitches.push(insert_checked_in(&store, &acme, n, at(10)).await);
    }
    let kept = [
        checked_in(&snitches[0], at(20)),
        checked_in(&snitches[2], at(30)),
    ];
    let moved = [
        checked_in(&snitches[1], at(70)),
        checked_in(&snitches[3], at(80)),
    ];
    assert!(
        kept.iter().all(Change::keeps_wake_at) && !moved.iter().any(Change::keeps_wake_at),
        "fixture: check-ins in the same hour keep the deadline, in the next one move it"
    );
    let batch = [
        kept[0].clone(),
        moved[0].clone(),
        kept[1].clone(),
        moved[1].clone(),
    ];
    let results = store.save_all(&batch).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    for change in &batch {
        let token = change.snitch().token();
        assert_eq!(stored(&store, token).await.as_ref(), Some(change.snitch()));
    }
    assert_eq!(due(&store, at(119), 10).await, vec![]);
    assert_eq!(due(&store, at(120), 10).await, tokens_of(&[1, 3]));
    // Earliest first: the kept deadlines, then the moved ones.
    assert_eq!(due(&store, at(180), 10).await, tokens_of(&[1, 3, 2, 4]));

    // Kept again, alone in a batch of their own; then the sweep moves them on.
    let again: Vec<Change> = batch
        .iter()
        .filter(|c| c.keeps_wake_at())
        .map(|c| checked_in(c.snitch(), at(40)))
        .collect();
    assert!(
        again.iter().all(Change::keeps_wake_at),
        "fixture: the same hour"
    );
    let results = store.save_all(&again).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(due(&store, at(120), 10).await, tokens_of(&[1, 3]));
    let swept: Vec<Change> = again
        .iter()
        .map(|c| advanced(c.snitch(), at(120)))
        .collect();
    assert!(
        !swept.iter().any(Change::keeps_wake_at),
        "fixture: a missed deadline moves on"
    );
    let results = store.save_all(&swept).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(due(&store, at(120), 10).await, vec![]);
    for change in &swept {
        let token = change.snitch().token();
        assert_eq!(stored(&store, token).await.as_ref(), Some(change.snitch()));
        assert!(
            change.snitch().wake_at() > Some(at(120)),
            "fixture: woken later"
        );
    }
    let expected: Vec<Token> = swept.iter().map(|c| c.snitch().token().clone()).collect();
    let later = swept.iter().filter_map(|c| c.snitch().wake_at()).max();
    let mut at_later = due(&store, later.unwrap_or_else(far_future), 10).await;
    at_later.retain(|t| expected.contains(t));
    assert_eq!(at_later, expected, "due again at their new wake-up");
}

/// A snitch paused until healthy or until unpaused has nothing to wake for.
pub async fn open_ended_pause_is_never_due(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    for (n, until) in [(1, PauseUntil::Healthy), (2, PauseUntil::Unpaused)] {
        let s = insert_checked_in(&store, &acme, n, at(10)).await;
        let p = apply(&store, paused(&s, until, at(20))).await;
        assert_eq!(p.wake_at(), None, "fixture: no wake-up");
    }
    assert_eq!(due(&store, far_future(), 10).await, vec![]);
    assert_eq!(next_wake_at(&store).await, None);
}

/// A snitch paused until an instant wakes at that instant, not at its old deadline.
pub async fn timed_pause_is_due_when_it_ends(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let s = insert_checked_in(&store, &acme, 1, at(10)).await;
    let ends = at(300);
    let p = apply(&store, paused(&s, PauseUntil::At(ends), at(20))).await;
    assert_eq!(
        p.wake_at(),
        Some(ends),
        "fixture: wakes when the pause ends"
    );

    assert_eq!(next_wake_at(&store).await, Some(ends));
    assert_eq!(
        due(&store, at(120), 10).await,
        vec![],
        "the old deadline is gone"
    );
    assert_eq!(
        due(&store, ends - Duration::milliseconds(1), 10).await,
        vec![]
    );
    assert_eq!(store.due(ends, 10).await.expect("read due"), vec![p]);
}

/// Contract: webhooks come back as stored, oldest first, per case.
pub async fn webhooks_round_trip_oldest_first_per_case(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let other = with_case(&store, "other").await;
    assert!(store.webhooks(&acme.id).await.expect("read").is_empty());
    let first = webhook(&acme, 1, Some("s3cret"));
    let second = webhook(&acme, 2, None);
    let theirs = webhook(&other, 3, None);
    for hook in [&first, &second, &theirs] {
        store.insert_webhook(hook).await.expect("insert");
    }
    assert_eq!(
        store.webhooks(&acme.id).await.expect("read"),
        [first, second],
        "every field, secret included, oldest first, only the case's own"
    );
    assert_eq!(store.webhooks(&other.id).await.expect("read"), [theirs]);
}

/// Contract: a taken hook id is refused, and so is a hook of an unknown case.
pub async fn webhook_ids_are_unique_and_cases_must_exist(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let hook = webhook(&acme, 1, None);
    store.insert_webhook(&hook).await.expect("insert");
    assert!(matches!(
        store.insert_webhook(&hook).await,
        Err(StorageError::DuplicateToken)
    ));
    let ghost = webhook(&case("ghost"), 2, None);
    assert!(matches!(
        store.insert_webhook(&ghost).await,
        Err(StorageError::UnknownCase(_))
    ));
    assert_eq!(store.webhooks(&acme.id).await.expect("read").len(), 1);
}

/// Contract: a hook is deleted only through its own case.
pub async fn delete_webhook_only_of_its_case(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let other = with_case(&store, "other").await;
    let hook = webhook(&acme, 1, None);
    store.insert_webhook(&hook).await.expect("insert");
    assert!(!store
        .delete_webhook(&other.id, &hook.id)
        .await
        .expect("delete"));
    assert_eq!(store.webhooks(&acme.id).await.expect("read").len(), 1);
    assert!(store
        .delete_webhook(&acme.id, &hook.id)
        .await
        .expect("delete"));
    assert!(!store
        .delete_webhook(&acme.id, &hook.id)
        .await
        .expect("delete"));
    assert!(store.webhooks(&acme.id).await.expect("read").is_empty());
}

/// A PagerDuty channel of `case` numbered `n`, added at `at(n)`.
fn pagerduty_channel(case: &Case, n: i64) -> ChannelConfig {
    ChannelConfig {
        id: format!("chan{n}"),
        case_id: case.id.clone(),
        name: Some(format!("Pager «{n}» <on-call>")),
        settings: ChannelSettings::parse(
            ChannelKind::Pagerduty,
            [
                ("routing_key", "R0123456789abcdef"),
                ("api_url", "https://pd.example.test/v2/enqueue"),
            ],
        )
        .expect("fixture settings are valid"),
        events: EventFilter::parse(&["missing", "reporting"]).expect("valid"),
        tags: Tags::parse(&["prod", "Ünïcode"]).expect("valid"),
        key: ChannelKey::parse(&format!("key{n:0>20}")).expect("valid"),
        created_at: at(n),
    }
}

/// Contract: channels come back as stored (every field, settings and key included),
/// oldest first, per case; a taken id and an unknown case are refused; a change replaces
/// the channel of its case only; a delete removes it from its own case only.
pub async fn channels_round_trip_change_and_delete_per_case(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let other = with_case(&store, "other").await;
    assert!(store.channels(&acme.id).await.expect("read").is_empty());
    let first = pagerduty_channel(&acme, 1);
    let mut second = pagerduty_channel(&acme, 2);
    second.settings =
        ChannelSettings::parse(ChannelKind::Email, [("to", "a@acme.test, b@acme.test")])
            .expect("valid");
    second.name = None;
    second.tags = Tags::default();
    let theirs = pagerduty_channel(&other, 3);
    for c in [&first, &second, &theirs] {
        store.insert_channel(c).await.expect("insert");
    }
    assert_eq!(
        store.channels(&acme.id).await.expect("read"),
        [first.clone(), second.clone()]
    );
    assert!(matches!(
        store.insert_channel(&first).await,
        Err(StorageError::DuplicateToken)
    ));
    assert!(matches!(
        store
            .insert_channel(&pagerduty_channel(&case("ghost"), 4))
            .await,
        Err(StorageError::UnknownCase(_))
    ));
    let mut changed = first.clone();
    changed.name = Some("renamed".into());
    changed.events = EventFilter::DEFAULT;
    changed.tags = Tags::parse(&["db"]).expect("valid");
    assert!(store.update_channel(&changed).await.expect("update"));
    let mut foreign = changed.clone();
    foreign.case_id = other.id.clone();
    assert!(!store.update_channel(&foreign).await.expect("update"));
    assert_eq!(
        store.channels(&acme.id).await.expect("read"),
        [changed.clone(), second.clone()]
    );
    assert!(!store
        .delete_channel(&other.id, &changed.id)
        .await
        .expect("delete"));
    assert!(store
        .delete_channel(&acme.id, &changed.id)
        .await
        .expect("delete"));
    assert!(!store
        .delete_channel(&acme.id, &changed.id)
        .await
        .expect("delete"));
    assert_eq!(store.channels(&acme.id).await.expect("read"), [second]);
    assert_eq!(store.channels(&other.id).await.expect("read"), [theirs]);
}

/// Contract: first uses of a case's badge key that race each get the key that was
/// stored, never one another write replaced; an existing key is kept; a key another case
/// holds and an unknown case are refused.
pub async fn the_first_badge_key_stored_is_the_one_every_first_use_gets(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let other = with_case(&store, "other").await;
    let racers: Vec<_> = (0..8)
        .map(|n| {
            let store = store.clone();
            let case = acme.id.clone();
            async move {
                store
                    .badge_key_or_insert(&case, &format!("badge-first-{n}"))
                    .await
            }
        })
        .collect();
    let answers: Vec<String> = futures::future::join_all(racers)
        .await
        .into_iter()
        .map(|answer| answer.expect("first use"))
        .collect();
    let stored = store
        .badge_key(&acme.id)
        .await
        .expect("read")
        .expect("a key was stored");
    assert!(stored.starts_with("badge-first-"), "stored {stored}");
    assert!(
        answers.iter().all(|key| *key == stored),
        "every first use answers the stored key {stored}: {answers:?}"
    );
    assert_eq!(
        store
            .badge_key_or_insert(&acme.id, "badge-later")
            .await
            .expect("a later use"),
        stored,
        "a case's key is kept"
    );
    assert_eq!(
        store.case_of_badge_key("badge-later").await.expect("read"),
        None
    );
    let taken = store.badge_key_or_insert(&other.id, &stored).await;
    assert!(
        matches!(taken, Err(StorageError::DuplicateToken)),
        "expected DuplicateToken, got {taken:?}"
    );
    assert_eq!(store.badge_key(&other.id).await.expect("read"), None);
    let unknown = CaseId::parse("nobody").expect("case id");
    let refused = store.badge_key_or_insert(&unknown, "badge-nobody").await;
    assert!(
        matches!(refused, Err(StorageError::UnknownCase(_))),
        "expected UnknownCase, got {refused:?}"
    );
}

/// Contract: a case has at most one badge key, which a new one replaces (the old one then
/// finds nothing); a key belongs to one case only, and an unknown case has none to set.
pub async fn badge_keys_are_one_per_case_and_unique(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let other = with_case(&store, "other").await;
    assert_eq!(store.badge_key(&acme.id).await.expect("read"), None);
    store
        .set_badge_key(&acme.id, "badge-Ünï-0001")
        .await
        .expect("set");
    assert_eq!(
        store.badge_key(&acme.id).await.expect("read").as_deref(),
        Some("badge-Ünï-0001")
    );
    assert_eq!(
        store
            .case_of_badge_key("badge-Ünï-0001")
            .await
            .expect("read"),
        Some(acme.id.clone())
    );
    store
        .set_badge_key(&acme.id, "badge-0002")
        .await
        .expect("replace");
    assert_eq!(
        store.badge_key(&acme.id).await.expect("read").as_deref(),
        Some("badge-0002")
    );
    assert_eq!(
        store
            .case_of_badge_key("badge-Ünï-0001")
            .await
            .expect("read"),
        None,
        "the replaced key finds nothing"
    );
    assert_eq!(
        store.case_of_badge_key("badge-0002").await.expect("read"),
        Some(acme.id.clone())
    );
    store
        .set_badge_key(&acme.id, "badge-0002")
        .await
        .expect("setting the same key again");
    let taken = store.set_badge_key(&other.id, "badge-0002").await;
    assert!(
        matches!(taken, Err(StorageError::DuplicateToken)),
        "expected DuplicateToken, got {taken:?}"
    );
    assert_eq!(store.badge_key(&other.id).await.expect("read"), None);
    let ghost = case("ghost");
    let unknown = store.set_badge_key(&ghost.id, "badge-0003").await;
    assert!(
        matches!(&unknown, Err(StorageError::UnknownCase(id)) if *id == ghost.id),
        "expected UnknownCase(ghost), got {unknown:?}"
    );
    assert_eq!(
        store.case_of_badge_key("badge-0003").await.expect("read"),
        None
    );
    assert_eq!(
        store.case_of_badge_key("no-such-key").await.expect("read"),
        None
    );
    assert_eq!(
        store.badge_key(&acme.id).await.expect("read").as_deref(),
        Some("badge-0002")
    );
}

/// Contract: a delivery through a vendor channel keeps the channel's settings and key as
/// they were when stored, and is claimed like any other.
pub async fn channel_deliveries_keep_their_settings_and_key(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let channel = pagerduty_channel(&acme, 1);
    store.insert_channel(&channel).await.expect("insert");
    let fresh = snitch(&acme, 1, t0());
    insert(&store, &fresh).await;
    let mut change = checked_in(&fresh, at(1));
    let event = change.events[0].clone();
    let native = Delivery {
        id: format!("{}-1", event.id),
        event: event.clone(),
        channel: Channel::Native {
            channel_id: channel.id.clone(),
            settings: channel.settings.clone(),
            key: channel.key.clone(),
        },
        state: DeliveryState::Pending,
        next_attempt_at: Some(at(1)),
        attempts: Vec::new(),
    };
    change.deliveries = vec![native.clone()];
    store.save(&change).await.expect("save");
    assert_eq!(
        store
            .deliveries(std::slice::from_ref(&event.id))
            .await
            .expect("read"),
        std::slice::from_ref(&native)
    );
    let claimed = store
        .claim_deliveries(at(2), at(3), &ClaimLimits::new(1, 0, 1, 1))
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1, "a vendor channel takes an HTTP slot");
    assert_eq!(claimed[0].channel, native.channel);
    assert_eq!(
        claimed[0].destination().as_deref(),
        Some("pd.example.test:443")
    );
}

/// A case with a team member and one hook, stored.
async fn case_with_outbox(store: &Arc<dyn Storage>, name: &str) -> (Case, Vec<Webhook>) {
    let mut c = case(name);
    c.members = vec![EmailAddress::parse("ops@acme.test").expect("valid")];
    store.upsert_case(&c).await.expect("upsert");
    let hook = webhook(&c, 1, Some("s3cret"));
    store.insert_webhook(&hook).await.expect("insert hook");
    (c, vec![hook])
}

/// `stats` counts snitches by status (every status listed) and deliveries not finished;
/// a paused or deleted snitch moves or leaves its count.
pub async fn stats_count_snitches_by_status_and_unfinished_deliveries(store: Arc<dyn Storage>) {
    let count = |stats: &StoreStats, status: Status| {
        stats
            .snitches_by_status
            .iter()
            .find(|(s, _)| *s == status)
            .map(|(_, n)| *n)
    };
    let empty = store.stats().await.expect("stats");
    assert_eq!(empty.snitches_by_status.len(), Status::ALL.len());
    assert!(empty.snitches_by_status.iter().all(|(_, n)| *n == 0));
    assert!(matches!(empty.outbox_depth, None | Some(0)));

    let (acme, hooks) = case_with_outbox(&store, "acme").await;
    insert(&store, &snitch(&acme, 1, t0())).await;
    let deliveries = reporting_with_deliveries(&store, &acme, &hooks, 2, at(1)).await;
    let third = insert_checked_in(&store, &acme, 3, at(1)).await;
    let stats = store.stats().await.expect("stats");
    assert_eq!(count(&stats, Status::Pending), Some(1));
    assert_eq!(count(&stats, Status::Healthy), Some(2));
    assert_eq!(count(&stats, Status::Failed), Some(0));
    assert!(matches!(stats.outbox_depth, None | Some(2)), "{stats:?}");

    apply(&store, paused(&third, PauseUntil::Unpaused, at(2))).await;
    assert!(store.delete_snitch(&token(1)).await.expect("delete"));
    store
        .record_attempt(
            &deliveries[0].id,
            &attempt(at(2), true),
            AttemptResult::Delivered,
        )
        .await
        .expect("record");
    let stats = store.stats().await.expect("stats");
    assert_eq!(count(&stats, Status::Pending), Some(0));
    assert_eq!(count(&stats, Status::Healthy), Some(1));
    assert_eq!(count(&stats, Status::Paused), Some(1));
    assert!(matches!(stats.outbox_depth, None | Some(1)), "{stats:?}");
}

/// The counts of `stats` against a count of every snitch of `cases`, read one by one.
async fn assert_counts_match(store: &Arc<dyn Storage>, cases: &[&Case], when: &str) {
    let mut counted: Vec<(Status, u64)> = Status::ALL.iter().map(|s| (*s, 0)).collect();
    for case in cases {
        for s in store.snitches(&case.id, &[]).await.expect("list") {
            if let Some(slot) = counted.iter_mut().find(|(status, _)| *status == s.status()) {
                slot.1 += 1;
            }
        }
    }
    let stats = store.stats().await.expect("stats");
    assert_eq!(stats.snitches_by_status, counted, "{when}");
}

/// A store may keep its counts by status as writes happen (not count them at each
/// `stats`): they stay exact through every kind of write, through writes that are
/// refused, and through writes and reads of the counts at the same time.
pub async fn status_counts_follow_every_write(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let globex = with_case(&store, "globex").await;
    let cases = [&acme, &globex];
    let fresh: Vec<Snitch> = (1..=8)
        .map(|n| snitch(if n % 2 == 0 { &acme } else { &globex }, n, t0()))
        .collect();
    store
        .insert_snitches(&fresh, NO_LIMIT)
        .await
        .expect("bulk insert");
    assert_counts_match(&store, &cases, "after a bulk insert").await;
    let refused = [snitch(&acme, 9, t0()), snitch(&acme, 1, t0())];
    assert!(store.insert_snitches(&refused, NO_LIMIT).await.is_err());
    insert(&store, &snitch(&globex, 10, t0())).await;
    assert_counts_match(&store, &cases, "after a refused bulk insert and one insert").await;

    let check_ins: Vec<Change> = fresh[..6].iter().map(|s| checked_in(s, at(1))).collect();
    for result in store.save_all(&check_ins).await {
        result.expect("check-in");
    }
    assert_counts_match(&store, &cases, "after check-ins in one batch").await;
    // A stale change (the first check-in again) is refused and moves nothing.
    assert!(matches!(
        store.save(&check_ins[0]).await,
        Err(StorageError::Conflict)
    ));

    // The sweep: claimed (a write that keeps the status), then failed.
    let claimed = store
        .claim_due(far_future(), far_future(), 100)
        .await
        .expect("claim due");
    assert!(!claimed.is_empty());
    let missed: Vec<Change> = claimed.iter().map(|s| advanced(s, far_future())).collect();
    for result in store.save_all(&missed).await {
        result.expect("sweep");
    }
    assert_counts_match(&store, &cases, "after a sweep").await;

    let first = stored(&store, &token(2)).await.expect("stored");
    apply(&store, paused(&first, PauseUntil::Unpaused, far_future())).await;
    assert!(store.delete_snitch(&token(3)).await.expect("delete"));
    assert!(!store.delete_snitch(&token(3)).await.expect("delete again"));
    assert_counts_match(&store, &cases, "after a pause and a deletion").await;

    // Check-ins of distinct snitches and reads of the counts, all at once.
    let more: Vec<Snitch> = (11..=80).map(|n| snitch(&acme, n, t0())).collect();
    store
        .insert_snitches(&more, NO_LIMIT)
        .await
        .expect("bulk insert");
    let check_ins: Vec<Change> = more.iter().map(|s| checked_in(s, at(2))).collect();
    let writes = join_all(check_ins.iter().map(|c| store.save(c)));
    let reads = join_all((0..8).map(|_| store.stats()));
    let (written, read) = futures::join!(writes, reads);
    for result in written {
        result.expect("check-in");
    }
    for result in read {
        result.expect("stats");
    }
    assert_counts_match(&store, &cases, "after concurrent check-ins and reads").await;

    // Many writes one by one (a store keeping changes as rows folds them), then more.
    for s in &more {
        let now = stored(&store, &s.token).await.expect("stored");
        apply(&store, paused(&now, PauseUntil::Unpaused, at(3))).await;
    }
    assert_counts_match(&store, &cases, "after writes one by one").await;
    assert!(store.delete_snitch(&more[0].token).await.expect("delete"));
    assert_counts_match(&store, &cases, "after one more write").await;
}

/// A store that was migrated (every store the suite makes) is ready.
pub async fn a_migrated_store_is_ready(store: Arc<dyn Storage>) {
    store.check_ready().await.expect("ready");
}

/// A first check-in of a new snitch, with its events' deliveries.
async fn reporting_with_deliveries(
    store: &Arc<dyn Storage>,
    case: &Case,
    hooks: &[Webhook],
    n: u64,
    at: Timestamp,
) -> Vec<Delivery> {
    reporting_to(store, case, hooks, None, n, at).await
}

/// A first check-in of a new snitch, with its events' deliveries to `hooks` and the team,
/// and to `channel` too if given (a first report is no page: the rules would not send it
/// to a vendor channel, so it is added here).
async fn reporting_to(
    store: &Arc<dyn Storage>,
    case: &Case,
    hooks: &[Webhook],
    channel: Option<&ChannelConfig>,
    n: u64,
    at: Timestamp,
) -> Vec<Delivery> {
    let fresh = snitch(case, n, t0());
    insert(store, &fresh).await;
    let mut change = checked_in(&fresh, at);
    assert_eq!(change.events.len(), 1, "the first check-in reports");
    let event = change.events[0].clone();
    change.deliveries = deliveries_for(&event, case, &only_hooks(hooks.to_vec()));
    if let Some(c) = channel {
        change.deliveries.push(Delivery {
            id: format!("{}-{}", event.id, c.id),
            channel: Channel::Native {
                channel_id: c.id.clone(),
                settings: c.settings.clone(),
                key: c.key.clone(),
            },
            ..change.deliveries[0].clone()
        });
    }
    store.save(&change).await.expect("save");
    change.deliveries
}

/// A PagerDuty channel of `case` on the vendor's own endpoint (no `api_url` given).
fn default_pagerduty_channel(case: &Case) -> ChannelConfig {
    ChannelConfig {
        id: format!("{}-pager", case.id.as_str()),
        settings: ChannelSettings::parse(ChannelKind::Pagerduty, [("routing_key", "R0123")])
            .expect("valid settings"),
        ..pagerduty_channel(case, 1)
    }
}

/// Contract: saved deliveries are claimed earliest first, under a lease.
pub async fn saved_deliveries_are_claimed_earliest_first_under_a_lease(store: Arc<dyn Storage>) {
    let (acme, hooks) = case_with_outbox(&store, "acme").await;
    assert_eq!(store.next_delivery_at().await.expect("read"), None);
    let later = reporting_with_deliveries(&store, &acme, &hooks, 1, at(5)).await;
    let sooner = reporting_with_deliveries(&store, &acme, &hooks, 2, at(3)).await;
    assert_eq!(later.len(), 2, "one webhook and one e-mail");
    assert!(matches!(later[0].channel, Channel::Webhook { .. }));
    assert!(matches!(later[1].channel, Channel::Email { .. }));
    assert_eq!(store.next_delivery_at().await.expect("read"), Some(at(3)));

    assert!(store
        .claim_deliveries(at(2), at(10), &ClaimLimits::at_most(10))
        .await
        .expect("claim")
        .is_empty());
    let claimed = store
        .claim_deliveries(
            at(5),
            at(10),
            &ClaimLimits {
                webhooks: 2,
                emails: 1,
                ..ClaimLimits::at_most(0)
            },
        )
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 3, "limited per channel kind");
    assert_eq!(ids(&claimed[..2]), ids(&sooner), "earliest first");
    assert_eq!(
        claimed[0],
        Delivery {
            next_attempt_at: Some(at(10)),
            ..sooner[0].clone()
        }
    );
    let rest = store
        .claim_deliveries(at(5), at(10), &ClaimLimits::at_most(10))
        .await
        .expect("claim");
    assert_eq!(rest.len(), 1, "leased ones are not claimed again");
    assert!(store
        .claim_deliveries(at(9), at(20), &ClaimLimits::at_most(10))
        .await
        .expect("claim")
        .is_empty());
    let expired = store
        .claim_deliveries(at(10), at(20), &ClaimLimits::at_most(10))
        .await
        .expect("claim");
    assert_eq!(
        expired.len(),
        4,
        "an expired lease frees them for another dispatcher"
    );
}

/// Contract: attempts are recorded and their result decides what follows.
pub async fn attempts_are_recorded_and_decide_what_follows(store: Arc<dyn Storage>) {
    let (acme, hooks) = case_with_outbox(&store, "acme").await;
    let made = reporting_with_deliveries(&store, &acme, &hooks, 1, at(1)).await;
    let (hook, mail) = (&made[0], &made[1]);
    store
        .claim_deliveries(at(1), at(2), &ClaimLimits::at_most(10))
        .await
        .expect("claim");
    store
        .record_attempt(
            &hook.id,
            &attempt(at(1), false),
            AttemptResult::RetryAt(at(7)),
        )
        .await
        .expect("record");
    store
        .record_attempt(&mail.id, &attempt(at(1), true), AttemptResult::Delivered)
        .await
        .expect("record");
    assert_eq!(store.next_delivery_at().await.expect("read"), Some(at(7)));
    assert!(store
        .claim_deliveries(at(6), at(8), &ClaimLimits::at_most(10))
        .await
        .expect("claim")
        .is_empty());
    let retry = store
        .claim_deliveries(at(7), at(8), &ClaimLimits::at_most(10))
        .await
        .expect("claim");
    assert_eq!(ids(&retry), std::slice::from_ref(&hook.id));
    store
        .record_attempt(&hook.id, &attempt(at(7), false), AttemptResult::GaveUp)
        .await
        .expect("record");
    assert_eq!(store.next_delivery_at().await.expect("read"), None);

    let stored = store
        .deliveries(std::slice::from_ref(&hook.event.id))
        .await
        .expect("read");
    assert_eq!(ids(&stored), ids(&made), "in the order stored");
    assert_eq!(stored[0].state, DeliveryState::Failed);
    assert_eq!(
        stored[0].attempts,
        [attempt(at(1), false), attempt(at(7), false)]
    );
    assert_eq!(stored[0].next_attempt_at, None);
    assert_eq!(stored[1].state, DeliveryState::Delivered);
    assert_eq!(stored[1].attempts, [attempt(at(1), true)]);
    assert!(matches!(
        store
            .record_attempt(
                "no-such-delivery",
                &attempt(at(1), true),
                AttemptResult::Delivered
            )
            .await,
        Err(StorageError::NotFound)
    ));
}

/// Contract: a refused save stores none of its deliveries.
pub async fn a_refused_save_stores_no_deliveries(store: Arc<dyn Storage>) {
    let (acme, hooks) = case_with_outbox(&store, "acme").await;
    let fresh = snitch(&acme, 1, t0());
    insert(&store, &fresh).await;
    let first = checked_in(&fresh, at(1));
    store.save(&first).await.expect("save");
    // A change computed from the same (now stale) read, with deliveries.
    let mut stale = checked_in_with(&fresh, failure(at(2), "1", "boom"));
    stale.deliveries = stale
        .events
        .iter()
        .flat_map(|e| deliveries_for(e, &acme, &only_hooks(hooks.clone())))
        .collect();
    assert!(!stale.deliveries.is_empty());
    assert!(matches!(
        store.save(&stale).await,
        Err(StorageError::Conflict)
    ));
    let event_ids: Vec<String> = stale.events.iter().map(|e| e.id.clone()).collect();
    assert!(store.deliveries(&event_ids).await.expect("read").is_empty());
    assert_eq!(store.next_delivery_at().await.expect("read"), None);
}

/// Contract: deliveries outlive their snitch until they are finished.
pub async fn deliveries_outlive_their_snitch_until_finished(store: Arc<dyn Storage>) {
    let (acme, hooks) = case_with_outbox(&store, "acme").await;
    let made = reporting_with_deliveries(&store, &acme, &hooks, 1, at(1)).await;
    assert!(store.delete_snitch(&token(1)).await.expect("delete"));
    let claimed = store
        .claim_deliveries(at(1), at(2), &ClaimLimits::at_most(10))
        .await
        .expect("an alert already emitted still goes out");
    assert_eq!(ids(&claimed), ids(&made));
    for d in &made {
        store
            .record_attempt(&d.id, &attempt(at(1), true), AttemptResult::Delivered)
            .await
            .expect("record");
    }
    assert_eq!(store.next_delivery_at().await.expect("read"), None);
}

/// Contract: attempts recorded at once (one batch, on a store that groups them) are each
/// recorded as if one after another. A delivery not stored is `NotFound` without failing
/// the others; a delivery named twice gets both attempts; a finished delivery of a deleted
/// snitch is gone, while an unfinished one stays.
pub async fn attempts_recorded_at_once_are_each_recorded(store: Arc<dyn Storage>) {
    let (acme, hooks) = case_with_outbox(&store, "acme").await;
    let mut made = Vec::new();
    for n in 1..=4 {
        made.extend(reporting_with_deliveries(&store, &acme, &hooks, n, at(1)).await);
    }
    assert_eq!(made.len(), 8, "a hook and an e-mail for each snitch");
    let claimed = store
        .claim_deliveries(at(1), at(2), &ClaimLimits::at_most(100))
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 8);
    // Snitch 4's alerts were already emitted: they still go out, then are not kept.
    assert!(store.delete_snitch(&token(4)).await.expect("delete"));
    let results = [
        AttemptResult::RetryAt(at(9)),
        AttemptResult::Delivered,
        AttemptResult::GaveUp,
        AttemptResult::Delivered,
        AttemptResult::Delivered,
        AttemptResult::Delivered,
        AttemptResult::Delivered,
        AttemptResult::RetryAt(at(9)),
    ];
    let (failed, delivered) = (attempt(at(1), false), attempt(at(1), true));
    let tried = |r: &AttemptResult| match r {
        AttemptResult::Delivered => &delivered,
        _ => &failed,
    };
    let mut writes: Vec<_> = made
        .iter()
        .zip(&results)
        .map(|(d, r)| store.record_attempt(&d.id, tried(r), *r))
        .collect();
    writes.insert(
        3,
        store.record_attempt("no-such-delivery", &delivered, AttemptResult::Delivered),
    );
    let answers = join_all(writes).await;
    for (n, answer) in answers.iter().enumerate() {
        if n == 3 {
            assert!(matches!(answer, Err(StorageError::NotFound)), "{answer:?}");
        } else {
            assert!(answer.is_ok(), "attempt {n}: {answer:?}");
        }
    }
    let event_ids: Vec<String> = made.iter().map(|d| d.event.id.clone()).collect();
    let stored = store.deliveries(&event_ids).await.expect("read");
    let kept: Vec<&Delivery> = made[..6].iter().chain(&made[7..]).collect();
    assert_eq!(
        stored.iter().map(|d| &d.id).collect::<Vec<_>>(),
        kept.iter().map(|d| &d.id).collect::<Vec<_>>(),
        "snitch 4's delivered alert is gone, its pending one stays"
    );
    let state = |id: &str| {
        let d = stored.iter().find(|d| d.id == id).expect("stored");
        (d.state, d.next_attempt_at, d.attempts.clone())
    };
    assert_eq!(
        state(&made[0].id),
        (
            DeliveryState::Pending,
            Some(at(9)),
            vec![attempt(at(1), false)]
        )
    );
    assert_eq!(
        state(&made[1].id),
        (DeliveryState::Delivered, None, vec![attempt(at(1), true)])
    );
    assert_eq!(
        state(&made[2].id),
        (DeliveryState::Failed, None, vec![attempt(at(1), false)])
    );
    assert_eq!(
        state(&made[7].id),
        (
            DeliveryState::Pending,
            Some(at(9)),
            vec![attempt(at(1), false)]
        )
    );

    // One delivery named twice at once: both attempts are kept, in either order.
    let retried = &made[0];
    let answers = join_all([
        store.record_attempt(&retried.id, &attempt(at(9), true), AttemptResult::Delivered),
        store.record_attempt(
            &retried.id,
            &attempt(at(10), true),
            AttemptResult::Delivered,
        ),
    ])
    .await;
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    let stored = store
        .deliveries(std::slice::from_ref(&retried.event.id))
        .await
        .expect("read");
    let again = stored
        .iter()
        .find(|d| d.id == retried.id)
        .expect("still stored");
    let mut attempts = again.attempts.clone();
    attempts.sort_by_key(|a| a.at);
    assert_eq!(
        attempts,
        [
            attempt(at(1), false),
            attempt(at(9), true),
            attempt(at(10), true)
        ]
    );
    assert_eq!(again.state, DeliveryState::Delivered);
}

/// A case with `members` (so its events go by e-mail, or not), stored.
async fn case_with_members(store: &Arc<dyn Storage>, name: &str, members: &[&str]) -> Case {
    let mut c = case(name);
    c.members = members
        .iter()
        .map(|m| EmailAddress::parse(m).expect("valid"))
        .collect();
    store.upsert_case(&c).await.expect("upsert");
    c
}

/// Deliveries are claimed at most `per_case_channel` per (case, channel kind), and a case
/// with many due deliveries does not push another case's out of the claim; webhooks and
/// e-mails have separate budgets.
pub async fn a_flooded_case_does_not_keep_others_out_of_a_claim(store: Arc<dyn Storage>) {
    let bully = case_with_members(&store, "bully", &["ops@bully.test"]).await;
    let dead: Vec<Webhook> = (1..=3)
        .map(|n| hook_to(&bully, n, &format!("dead{n}.bully.test")))
        .collect();
    let mut flood = Vec::new();
    for n in 1..=5 {
        flood.push(reporting_with_deliveries(&store, &bully, &dead, n, at(n as i64)).await);
    }
    let acme = case_with_members(&store, "acme", &["ops@acme.test"]).await;
    let acme_hooks = [hook_to(&acme, 1, "hooks.acme.test")];
    let first = reporting_with_deliveries(&store, &acme, &acme_hooks, 10, at(6)).await;
    // Each bully event: three hooks, then an e-mail.
    assert_eq!(flood[0].len(), 4);

    let claimed = store
        .claim_deliveries(at(10), at(20), &limits(4, 4, 2, 100))
        .await
        .expect("claim");
    let expected = vec![
        flood[0][0].id.clone(),
        flood[0][1].id.clone(),
        flood[0][3].id.clone(),
        flood[1][3].id.clone(),
        first[0].id.clone(),
        first[1].id.clone(),
    ];
    assert_eq!(
        ids(&claimed),
        expected,
        "two per case and channel, earliest first; acme's are not crowded out"
    );

    // Only e-mail slots are free: only e-mails are taken.
    let mails = store
        .claim_deliveries(at(10), at(20), &limits(0, 1, 2, 100))
        .await
        .expect("claim");
    assert_eq!(ids(&mails), [flood[2][3].id.clone()]);
}

/// What a dispatcher has in flight counts against the caps: a (case, channel kind) or a
/// destination at its cap is skipped, one below it gets only the room left.
pub async fn claims_take_what_is_in_flight_into_account(store: Arc<dyn Storage>) {
    let bully = case_with_members(&store, "bully", &["ops@bully.test"]).await;
    let dead = [hook_to(&bully, 1, "dead.bully.test")];
    let mut flood = Vec::new();
    for n in 1..=4 {
        flood.push(reporting_with_deliveries(&store, &bully, &dead, n, at(n as i64)).await);
    }
    let acme = case_with_members(&store, "acme", &[]).await;
    let acme_hooks = [hook_to(&acme, 1, "hooks.acme.test")];
    let first = reporting_with_deliveries(&store, &acme, &acme_hooks, 10, at(6)).await;
    assert_eq!(first.len(), 1, "acme has no team: no e-mail");

    let mut busy = limits(10, 10, 3, 10);
    busy.case_channels_in_flight = vec![
        (bully.id.clone(), ChannelKind::Webhook, 3),
        (bully.id.clone(), ChannelKind::Email, 2),
    ];
    let claimed = store
        .claim_deliveries(at(10), at(20), &busy)
        .await
        .expect("claim");
    assert_eq!(
        ids(&claimed),
        [flood[0][1].id.clone(), first[0].id.clone()],
        "the bully's webhooks are at their cap; one e-mail fits"
    );

    let mut busy = limits(10, 10, 10, 3);
    busy.destinations_in_flight = vec![("dead.bully.test:443".to_owned(), 2)];
    let claimed = store
        .claim_deliveries(at(10), at(20), &busy)
        .await
        .expect("claim");
    assert_eq!(
        ids(&claimed),
        [
            flood[0][0].id.clone(),
            flood[1][1].id.clone(),
            flood[2][1].id.clone(),
            flood[3][1].id.clone()
        ],
        "one more to the busy destination; e-mails have no destination cap"
    );
}

/// A destination's room goes to the earliest deliveries that their case's cap lets
/// through: a case at its cap does not use up another case's share of a shared host.
pub async fn destination_caps_count_only_what_the_case_caps_let_through(store: Arc<dyn Storage>) {
    let bully = case_with_members(&store, "bully", &[]).await;
    let shared = [
        hook_to(&bully, 1, "shared.example.test"),
        hook_to(&bully, 2, "shared.example.test"),
    ];
    let mut flood = Vec::new();
    for n in 1..=3 {
        flood.push(reporting_with_deliveries(&store, &bully, &shared, n, at(n as i64)).await);
    }
    let acme = case_with_members(&store, "acme", &[]).await;
    let acme_hooks = [hook_to(&acme, 1, "shared.example.test")];
    let first = reporting_with_deliveries(&store, &acme, &acme_hooks, 10, at(6)).await;

    let mut busy = limits(10, 10, 2, 3);
    busy.case_channels_in_flight = vec![(bully.id.clone(), ChannelKind::Webhook, 2)];
    busy.destinations_in_flight = vec![("shared.example.test:443".to_owned(), 2)];
    let claimed = store
        .claim_deliveries(at(10), at(20), &busy)
        .await
        .expect("claim");
    assert_eq!(
        ids(&claimed),
        [first[0].id.clone()],
        "the host has room for one, and the bully is at its cap"
    );
    let claimed = store
        .claim_deliveries(at(10), at(20), &limits(10, 10, 1, 2))
        .await
        .expect("claim");
    assert_eq!(
        ids(&claimed),
        [flood[0][0].id.clone()],
        "acme's is leased; the bully takes one"
    );
}

/// Claims choose exactly what the three rounds of [`ClaimLimits::select`] choose from the
/// due deliveries, earliest first, over an outbox of cases with e-mail, with webhooks to
/// hosts they share (so a (case, channel kind) holds several destinations) and to a
/// PagerDuty channel (another kind in the HTTP budget, to the vendor's host), many due at
/// the same minute, under caps and counts in flight drawn at random (a fixed seed).
pub async fn claims_choose_what_the_three_rounds_choose(store: Arc<dyn Storage>) {
    let mut seed: u64 = 0x5eed_c1a1_u64;
    let mut draw = move |below: u64| {
        // xorshift64: enough to vary the scenario, the same every run.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    };
    let hosts = ["a.test", "b.test", "c.test"];
    let mut cases = Vec::new();
    for n in 0..4 {
        let members: &[&str] = if n % 2 == 0 { &["ops@team.test"] } else { &[] };
        let c = case_with_members(&store, &format!("case{n}"), members).await;
        let hooks: Vec<Webhook> = (1..=1 + draw(3) as i64)
            .map(|h| hook_to(&c, h, hosts[draw(3) as usize]))
            .collect();
        let pager = (n != 1).then(|| default_pagerduty_channel(&c));
        if let Some(pager) = &pager {
            store.insert_channel(pager).await.expect("insert channel");
        }
        cases.push((c, hooks, pager));
    }
    // The outbox in order of storing, as the model holds it.
    let mut outbox: Vec<Delivery> = Vec::new();
    for n in 1..=40u64 {
        let (c, hooks, pager) = &cases[draw(4) as usize];
        let minute = 1 + draw(12) as i64;
        let pager = pager.as_ref().filter(|_| draw(2) == 0);
        outbox.extend(reporting_to(&store, c, hooks, pager, n, at(minute)).await);
    }
    assert!(
        outbox
            .iter()
            .any(|d| matches!(d.channel, Channel::Native { .. })),
        "the outbox holds deliveries to a vendor channel"
    );
    let lease = at(1_000);
    for round in 0..16 {
        let now = at(4 + draw(10) as i64);
        let mut limits = limits(
            draw(7) as usize,
            draw(4) as usize,
            1 + draw(4) as usize,
            1 + draw(4) as usize,
        );
        for (c, _, _) in &cases {
            for kind in [
                ChannelKind::Webhook,
                ChannelKind::Email,
                ChannelKind::Pagerduty,
            ] {
                if draw(3) == 0 {
                    limits
                        .case_channels_in_flight
                        .push((c.id.clone(), kind, draw(3) as usize));
                }
            }
        }
        for host in hosts {
            if draw(3) == 0 {
                limits
                    .destinations_in_flight
                    .push((format!("{host}:443"), draw(4) as usize));
            }
        }
        let mut due: Vec<(usize, &Delivery)> = outbox
            .iter()
            .enumerate()
            .filter(|(_, d)| d.next_attempt_at.is_some_and(|t| t <= now))
            .collect();
        due.sort_by_key(|(stored, d)| (d.next_attempt_at, *stored));
        let ranked: Vec<&Delivery> = due.iter().map(|(_, d)| *d).collect();
        let expected: Vec<String> = limits
            .select(&ranked)
            .into_iter()
            .map(|i| ranked[i].id.clone())
            .collect();
        let claimed = store
            .claim_deliveries(now, lease, &limits)
            .await
            .expect("claim");
        assert_eq!(
            ids(&claimed),
            expected,
            "claim {round} at {now} under {limits:?}"
        );
        for d in outbox.iter_mut().filter(|d| expected.contains(&d.id)) {
            d.next_attempt_at = Some(lease);
        }
    }
    assert!(
        outbox.iter().any(|d| d.next_attempt_at == Some(lease)),
        "the scenario claims something"
    );
}

async fn claim(
    store: &Arc<dyn Storage>,
    now: Timestamp,
    lease: Timestamp,
    limit: usize,
) -> Vec<Token> {
    tokens(&store.claim_due(now, lease, limit).await.expect("claim due"))
}

/// A claimed snitch is not claimed again until its lease ends or it is saved; `due` still
/// lists it.
pub async fn claim_due_leases_until_the_lease_ends_or_a_save(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let first = insert_checked_in(&store, &acme, 1, at(10)).await;
    let second = insert_checked_in(&store, &acme, 2, at(70)).await;
    let deadline = at(120);
    assert_eq!(
        claim(&store, deadline - Duration::milliseconds(1), at(200), 10).await,
        vec![]
    );
    assert_eq!(
        claim(&store, deadline, at(150), 10).await,
        vec![first.token.clone()]
    );
    assert_eq!(claim(&store, deadline, at(150), 10).await, vec![], "held");
    assert_eq!(due(&store, deadline, 10).await, vec![first.token.clone()]);
    let later = at(180);
    assert_eq!(
        claim(&store, later, at(300), 10).await,
        vec![first.token.clone(), second.token.clone()],
        "the lease ended at 150; the second became due at 180"
    );
    // Saving the first ends its lease: once due again it can be claimed at once.
    let stored = stored(&store, &first.token).await.expect("stored");
    let missing = advanced(&stored, later);
    let next_deadline = missing
        .snitch
        .wake_at()
        .expect("a failed snitch has a deadline");
    apply(&store, missing).await;
    assert_eq!(
        claim(&store, next_deadline, at(300), 10).await,
        vec![first.token.clone()]
    );
}

/// Claims made at the same time never return the same snitch, and none is lost: a claim
/// that met another's leases in flight may come back with fewer (Postgres: the later
/// lease waits for the earlier and then finds it taken), and the next claim, as a sweep's
/// next one, takes what they left.
pub async fn concurrent_claims_share_the_due_snitches(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    for n in 1..=12 {
        insert_checked_in(&store, &acme, n, at(10)).await;
    }
    let claims = join_all((0..4).map(|_| store.claim_due(at(120), at(200), 5))).await;
    let mut all: Vec<Token> = Vec::new();
    for claim in claims {
        all.extend(tokens(&claim.expect("claim due")));
    }
    let left = store.claim_due(at(120), at(200), 12).await;
    all.extend(tokens(&left.expect("claim due")));
    all.sort();
    let before = all.len();
    all.dedup();
    assert_eq!(before, all.len(), "no snitch claimed twice");
    assert_eq!(all, tokens_of(&(1..=12).collect::<Vec<_>>()));
}

// ---------------------------------------------------------------------------------------
// Liveness and outages (docs/rules.md#outages)
// ---------------------------------------------------------------------------------------

const THRESHOLD: Duration = Duration::seconds(60);

async fn beat(store: &Arc<dyn Storage>, server: &str, at: Timestamp) -> Option<Outage> {
    store
        .heartbeat(server, at, THRESHOLD)
        .await
        .expect("heartbeat")
}

/// No server alive for longer than the threshold is an outage, from the last heartbeat
/// to the one that found it; a store nobody ever recorded has none.
pub async fn a_gap_in_heartbeats_over_the_threshold_is_an_outage(store: Arc<dyn Storage>) {
    assert_eq!(beat(&store, "a", secs(0)).await, None, "a fresh store");
    assert_eq!(beat(&store, "a", secs(60)).await, None, "at the threshold");
    let outage = beat(&store, "a", secs(200)).await.expect("an outage");
    assert_eq!((outage.started_at, outage.ended_at), (secs(60), secs(200)));
    assert_eq!(beat(&store, "a", secs(205)).await, None, "alive again");
    let second = beat(&store, "b", secs(400)).await.expect("another outage");
    assert!(second.id > outage.id, "ids increase");
    assert_eq!(second.started_at, secs(205));

    let all = store.outages(secs(0)).await.expect("read");
    assert_eq!(all, [outage, second], "oldest first");
    let recent = store.outages(secs(201)).await.expect("read");
    assert_eq!(recent, [second], "those that ended since");
}

/// A clean stop is the exact start of the downtime that follows it.
pub async fn a_clean_stop_is_the_last_moment_alive(store: Arc<dyn Storage>) {
    beat(&store, "a", secs(0)).await;
    store.record_stop("a", secs(12)).await.expect("stop");
    let outage = beat(&store, "b", secs(100)).await.expect("an outage");
    assert_eq!((outage.started_at, outage.ended_at), (secs(12), secs(100)));
}

/// Several servers on one store: while one is alive, another's death is no outage.
pub async fn one_live_server_means_no_outage(store: Arc<dyn Storage>) {
    beat(&store, "a", secs(0)).await;
    beat(&store, "b", secs(0)).await;
    // `a` dies; `b` goes on beating.
    for t in (5..=300).step_by(5) {
        assert_eq!(beat(&store, "b", secs(t)).await, None);
    }
    // `a` comes back as `c`.
    assert_eq!(beat(&store, "c", secs(302)).await, None);
    assert!(store.outages(secs(0)).await.expect("read").is_empty());
}

/// Servers that resume together after an outage record it once.
pub async fn servers_racing_after_an_outage_find_it_once(store: Arc<dyn Storage>) {
    beat(&store, "a", secs(0)).await;
    let names: Vec<String> = (0..8).map(|i| format!("s{i}")).collect();
    let found = join_all(names.iter().map(|n| beat(&store, n, secs(500)))).await;
    assert_eq!(found.iter().flatten().count(), 1, "{found:?}");
    assert_eq!(store.outages(secs(0)).await.expect("read").len(), 1);
}

/// Each saved change that names an outage counts its snitch once for its case.
pub async fn deferred_snitches_are_counted_per_case_and_outage(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let other = with_case(&store, "other").await;
    let quiet = with_case(&store, "quiet").await;
    beat(&store, "a", secs(0)).await;
    let first = beat(&store, "a", secs(600)).await.expect("an outage");
    beat(&store, "a", secs(605)).await;
    let second = beat(&store, "a", secs(900)).await.expect("an outage");

    for (case, n) in [(&acme, 1), (&acme, 2), (&other, 3)] {
        let s = insert_checked_in(&store, case, n, at(0)).await;
        let mut change = Change::new(&s, s.clone(), Vec::new(), Vec::new());
        change.deferred_by = vec![first.id];
        apply(&store, change).await;
    }
    // A refused change counts nothing.
    let stale = snitch(&acme, 1, t0());
    let mut refused = Change::new(&stale, stale.clone(), Vec::new(), Vec::new());
    refused.deferred_by = vec![first.id];
    assert!(store.save(&refused).await.is_err());

    let counts = |outages: Vec<CaseOutage>| -> Vec<(u64, u64)> {
        outages
            .iter()
            .map(|o| (o.outage.id, o.snitches_deferred))
            .collect()
    };
    let seen = |case: &Case| {
        let store = Arc::clone(&store);
        let id = case.id.clone();
        async move { store.case_outages(&id, 10).await.expect("read") }
    };
    assert_eq!(
        counts(seen(&acme).await),
        [(second.id, 0), (first.id, 2)],
        "newest first"
    );
    assert_eq!(counts(seen(&other).await), [(second.id, 0), (first.id, 1)]);
    assert_eq!(counts(seen(&quiet).await), [(second.id, 0), (first.id, 0)]);
    let limited = store.case_outages(&acme.id, 1).await.expect("read");
    assert_eq!(counts(limited), [(second.id, 0)]);
}

// ---------------------------------------------------------------------------------------
// Cases and API keys (kept as opaque digests)
// ---------------------------------------------------------------------------------------

/// Every stored case, by id, each as stored last.
pub async fn cases_are_listed_by_id(store: Arc<dyn Storage>) {
    assert_eq!(store.cases().await.expect("list"), Vec::<Case>::new());
    let beta = with_case(&store, "beta").await;
    let mut acme = with_case(&store, "acme").await;
    acme.on_hold = true;
    store.upsert_case(&acme).await.expect("upsert");
    assert_eq!(store.cases().await.expect("list"), [acme, beta]);
}

/// Contract: API keys come back as stored, oldest first, per case.
pub async fn api_keys_round_trip_oldest_first_per_case(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let beta = with_case(&store, "beta").await;
    let (second, first, other) = (api_key(&acme, 2), api_key(&acme, 1), api_key(&beta, 3));
    for key in [&second, &first, &other] {
        store.insert_api_key(key).await.expect("insert");
    }
    assert_eq!(
        store.api_keys(Some(acme.id.clone())).await.expect("list"),
        [first.clone(), second.clone()]
    );
    assert_eq!(
        store.api_keys(None).await.expect("list"),
        [first, second, other]
    );
    assert!(store
        .api_keys(Some(case("nobody").id))
        .await
        .expect("list")
        .is_empty());
}

/// Contract: taken key ids and digests are refused, and keys of unknown cases.
pub async fn api_key_ids_and_digests_are_unique_and_cases_must_exist(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let key = api_key(&acme, 1);
    store.insert_api_key(&key).await.expect("insert");
    let mut same_id = api_key(&acme, 2);
    same_id.id = key.id.clone();
    let mut same_digest = api_key(&acme, 3);
    same_digest.digest = key.digest.clone();
    for taken in [&same_id, &same_digest] {
        let err = store.insert_api_key(taken).await;
        assert!(matches!(err, Err(StorageError::DuplicateToken)), "{err:?}");
    }
    let orphan = api_key(&case("nobody"), 4);
    let err = store.insert_api_key(&orphan).await;
    assert!(matches!(err, Err(StorageError::UnknownCase(_))), "{err:?}");
    assert_eq!(store.api_keys(None).await.expect("list"), [key]);
}

/// Contract: a revoked key stays listed, as revoked.
pub async fn revoked_api_keys_stay_listed_as_revoked(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let (one, two) = (api_key(&acme, 1), api_key(&acme, 2));
    store.insert_api_key(&one).await.expect("insert");
    store.insert_api_key(&two).await.expect("insert");
    assert!(store.revoke_api_key(&one.id).await.expect("revoke"));
    assert!(
        store.revoke_api_key(&one.id).await.expect("again"),
        "still there"
    );
    assert!(!store.revoke_api_key("key-404").await.expect("revoke"));
    let mut revoked = one;
    revoked.revoked = true;
    assert_eq!(
        store.api_keys(Some(acme.id.clone())).await.expect("list"),
        [revoked, two]
    );
}

/// Contract: a key's recorded use keeps the latest time.
pub async fn api_key_use_keeps_the_latest_time(store: Arc<dyn Storage>) {
    let acme = with_case(&store, "acme").await;
    let key = api_key(&acme, 1);
    store.insert_api_key(&key).await.expect("insert");
    store
        .record_api_key_use(&[(key.id.clone(), at(10)), ("key-404".into(), at(11))])
        .await
        .expect("record");
    store
        .record_api_key_use(&[(key.id.clone(), at(5))])
        .await
        .expect("record an older use");
    let listed = store.api_keys(None).await.expect("list");
    assert_eq!(listed[0].last_used_at, Some(at(10)));
    store
        .record_api_key_use(&[])
        .await
        .expect("nothing to record");
}
