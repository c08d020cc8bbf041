//! End to end: a cron-scheduled snitch on a real Snitch server, checked in by the real
//! `snitch run`, shows the run, its duration and its output in the API.
#![cfg(feature = "server")]

use std::process::{Command, Stdio};

use snitch::server::{launch, Config};

const SNITCH: &str = env!("CARGO_BIN_EXE_snitch");
const KEY: &str = "acme-key-0000000000000000000000000001";

#[test]
fn a_cron_snitch_checked_in_by_snitch_run_shows_the_run_its_duration_and_output() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let (running, api, check_ins) = runtime.block_on(async {
        let api = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let check_in = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let check_in_base = format!("http://{}", check_in.local_addr().expect("address"));
        let text = format!(
            "store = \"memory\"\ncheck_in_base = \"{check_in_base}\"\n\
             [[case]]\nname = \"acme\"\napi_keys = [\"{KEY}\"]\n"
        );
        let config = Config::parse(&text, |_| None).expect("a valid configuration");
        let running = launch(config, api, check_in, std::future::pending())
            .await
            .expect("the server starts");
        let api = format!("http://{}", running.api_addr);
        (running, api, check_in_base)
    });
    let agent = ureq::agent();
    let auth = format!(
        "Basic {}",
        base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("{KEY}:")
        )
    );
    let created: serde_json::Value = agent
        .post(&format!("{api}/v1/snitches"))
        .set("Authorization", &auth)
        .send_json(ureq::json!({
            "name": "nightly backup",
            "schedule": "30 2 * * *",
            "timezone": "Europe/Riga",
        }))
        .expect("created")
        .into_json()
        .expect("JSON");
    let token = created["token"].as_str().expect("a token").to_owned();

    let status = Command::new(SNITCH)
        .args(["run", "--url", &check_ins, &token, "--"])
        .args(["sh", "-c", "echo dumping db1; sleep 0.3; echo done; exit 0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("snitch run");
    assert_eq!(status.code(), Some(0));

    let get = |path: &str| {
        agent
            .get(&format!("{api}{path}"))
            .set("Authorization", &auth)
            .call()
            .expect("read")
    };
    let snitch: serde_json::Value = get(&format!("/v1/snitches/{token}"))
        .into_json()
        .expect("JSON");
    assert_eq!(snitch["status"], "healthy", "{snitch}");
    assert_eq!(snitch["running"], false);
    let run = &snitch["last_run"];
    let duration = run["duration_ms"].as_u64().expect("a duration");
    assert!(
        (300..10_000).contains(&duration),
        "the run took about 0.3 s: {run}"
    );
    assert!(run["rid"].as_str().is_some_and(|r| r.len() == 36), "{run}");
    let history: serde_json::Value = get(&format!("/v1/snitches/{token}/check_ins"))
        .into_json()
        .expect("JSON");
    assert_eq!(history[0]["kind"], "success", "{history}");
    assert_eq!(history[1]["kind"], "start", "{history}");
    assert!(history[0]["message"]
        .as_str()
        .is_some_and(|m| m.starts_with("ok after 0.") && m.ends_with(": done")));
    let id = history[0]["id"].as_u64().expect("an id");
    let body = get(&format!("/v1/snitches/{token}/check_ins/{id}/body"))
        .into_string()
        .expect("text");
    assert_eq!(body, "dumping db1\ndone\n");
    // The server runs on the runtime until here.
    drop(running);
    drop(runtime);
}
