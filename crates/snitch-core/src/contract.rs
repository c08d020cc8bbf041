//! The storage contract test suite: one set of tests that every [`Storage`] runs.
//!
//! A store crate calls [`storage_contract_tests!`](crate::storage_contract_tests) in a test
//! module with an async function that makes a fresh, empty store; the macro expands to one
//! `#[tokio::test]` per contract test, so a failure names the broken rule. The crate needs
//! `tokio` (with `macros` and `rt`) as a dev-dependency.
//!
//! ```ignore
//! #[cfg(test)]
//! mod contract {
//!     snitch_core::storage_contract_tests!(|| async { my_store::MyStorage::new() });
//! }
//! ```

use std::sync::Arc;

use chrono::{Duration, TimeZone, Utc};

use crate::calendar::{Interval, Timestamp};
use crate::machine;
use crate::snitch::Snitch;
use crate::storage::Storage;
use crate::types::{AlertEmails, AlertType, Case, CaseId, Notes, SnitchName, Tags, Token};

/// Expands to one test per rule of the storage contract, each run on a store made by
/// `$make`, an expression callable as `$make()` that returns a future of the store.
#[macro_export]
macro_rules! storage_contract_tests {
    ($make:expr) => {
        $crate::storage_contract_tests!(@each $make;
            case_round_trip,
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let store = ($make)().await;
                $crate::contract::$name(::std::sync::Arc::new(store)).await;
            }
        )*
    };
}

/// A fixed instant the fixtures are built around.
pub fn t0() -> Timestamp {
    Utc.with_ymd_and_hms(2026, 11, 22, 3, 0, 0)
        .single()
        .unwrap_or_else(|| unreachable!("a valid date"))
}

/// A case with a valid id made from `name`.
pub fn case(name: &str) -> Case {
    Case::new(CaseId::parse(name).expect("fixture case names are valid"))
}

/// A token made from a number, e.g. `token(7)` is `tok00000000000000007`.
pub fn token(n: u64) -> Token {
    Token::parse(&format!("tok{n:017}")).expect("fixture tokens are valid")
}

/// A fresh, pending snitch of `case`, created at `created_at`.
pub fn snitch(case: &Case, n: u64, created_at: Timestamp) -> Snitch {
    Snitch {
        token: token(n),
        case_id: case.id.clone(),
        name: SnitchName::parse(&format!("job {n}")).expect("valid name"),
        tags: Tags::default(),
        notes: Notes::default(),
        interval: Interval::Hourly,
        alert_type: AlertType::Basic,
        alert_email: AlertEmails::default(),
        created_at,
        state: machine::initial_state(),
        version: 1,
    }
}

pub async fn case_round_trip(store: Arc<dyn Storage>) {
    let mut acme = case("acme");
    assert_eq!(store.case(&acme.id).await.expect("read"), None);
    store.upsert_case(&acme).await.expect("insert");
    assert_eq!(
        store.case(&acme.id).await.expect("read"),
        Some(acme.clone())
    );
    acme.on_hold = true;
    acme.plan.max_snitches = 3;
    store.upsert_case(&acme).await.expect("update");
    assert_eq!(store.case(&acme.id).await.expect("read"), Some(acme));
    let _ = Duration::zero();
}
