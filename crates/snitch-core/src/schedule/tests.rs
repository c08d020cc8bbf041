use super::*;
use chrono::TimeZone as _;

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
}

fn next_local(expr: &str, zone: &str, from: DateTime<Utc>, n: usize) -> Vec<String> {
    let s = CronSchedule::parse(expr, zone).unwrap();
    s.times_after(from)
        .take(n)
        .map(|t| s.to_local_iso(t))
        .collect()
}

#[test]
fn smoke() {
    println!(
        "{:?}",
        next_local("30 2 * * *", "America/New_York", utc(2026, 3, 7, 12, 0), 3)
    );
    println!(
        "{:?}",
        next_local(
            "30 1 * * *",
            "America/New_York",
            utc(2026, 10, 31, 12, 0),
            3
        )
    );
    println!(
        "{:?}",
        next_local(
            "*/30 * * * *",
            "America/New_York",
            utc(2026, 11, 1, 4, 0),
            6
        )
    );
    println!(
        "{:?}",
        next_local(
            "30 0-3 * * *",
            "America/New_York",
            utc(2026, 11, 1, 3, 0),
            5
        )
    );
    println!(
        "{:?}",
        next_local("0 0 */2 * MON", "UTC", utc(2026, 6, 1, 0, 0), 3)
    );
}
