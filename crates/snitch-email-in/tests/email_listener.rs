//! The e-mail listener's memory under a flood (docs/rules.md#e-mail-check-ins): messages
//! being received share one budget of bytes; a message that finds no room is read to its
//! end and answered `452`, so its sender tries again, and the room comes back once the
//! messages holding it are stored.

use std::sync::Arc;
use std::time::Duration;

use snitch_core::{Case, CaseId, SnitchFields, SnitchService, SystemClock};
use snitch_email_in::{EmailCheckIns, EmailOptions};
use snitch_store_memory::MemoryStorage;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

const KIB: usize = 1024;

struct Client {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl Client {
    async fn connect(addr: std::net::SocketAddr) -> Client {
        let (read, writer) = TcpStream::connect(addr)
            .await
            .expect("connect")
            .into_split();
        let mut client = Client {
            reader: BufReader::new(read),
            writer,
        };
        assert!(client.reply().await.starts_with("220"));
        client
    }

    async fn reply(&mut self) -> String {
        let mut whole = String::new();
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line).await.expect("read") == 0 {
                return whole;
            }
            whole.push_str(&line);
            if line.as_bytes().get(3) != Some(&b'-') {
                return whole;
            }
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).await.expect("write");
    }

    async fn command(&mut self, line: &str, expected: &str) {
        self.send(format!("{line}\r\n").as_bytes()).await;
        let answer = self.reply().await;
        assert!(answer.starts_with(expected), "{line} -> {answer}");
    }

    /// Up to the message's first bytes, `size` of them, not ended.
    async fn start_message(&mut self, to: &str, size: usize) {
        self.command("EHLO budget.example.net", "250").await;
        self.command("MAIL FROM:<a@example.net>", "250").await;
        self.command(&format!("RCPT TO:<{to}>"), "250").await;
        self.command("DATA", "354").await;
        self.send(b"Subject: big\r\n\r\n").await;
        let line = format!("{}\r\n", "z".repeat(1022));
        for _ in 0..size / 1024 {
            self.send(line.as_bytes()).await;
        }
    }

    async fn end_message(&mut self) -> String {
        self.send(b".\r\n").await;
        self.reply().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_beyond_the_buffer_budget_get_452_until_room_comes_back() {
    let service = SnitchService::new(Arc::new(MemoryStorage::new()), Arc::new(SystemClock));
    let case = Case::new(CaseId::parse("acme").expect("valid"));
    service.storage().upsert_case(&case).await.expect("case");
    let fields = SnitchFields {
        name: Some("Big output".into()),
        interval: Some("daily".into()),
        ..Default::default()
    };
    let token = service.create(&case, &fields).await.expect("created");
    let to = format!("{}@checkin.test", token.token());
    // Room for one 100 KiB message and one 64 KiB step: 164 KiB.
    let options = EmailOptions::new("checkin.test")
        .with_max_message_bytes(100 * KIB)
        .with_max_buffered_bytes(0);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let email = EmailCheckIns::new(service.clone(), options);
    let watched = email.clone();
    tokio::spawn(email.serve(listener, std::future::pending()));

    // A holds 90 KiB (two steps, 128 KiB of the budget) and does not finish yet.
    let mut a = Client::connect(addr).await;
    a.start_message(&to, 90 * KIB).await;
    let started = tokio::time::Instant::now();
    while watched.buffered_bytes() < 128 * KIB {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "A's bytes are read"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // B needs a step more than is left: read to its end, refused for now.
    let mut b = Client::connect(addr).await;
    b.start_message(&to, 60 * KIB).await;
    let refused = b.end_message().await;
    assert!(refused.starts_with("452 4.3.1"), "{refused}");
    // A ends and is stored; its share comes back; B sends again and is taken.
    let taken = a.end_message().await;
    assert!(taken.starts_with("250"), "{taken}");
    assert_eq!(watched.buffered_bytes(), 0);
    b.command("RSET", "250").await;
    b.start_message(&to, 60 * KIB).await;
    let taken = b.end_message().await;
    assert!(taken.starts_with("250"), "{taken}");
    let history = service
        .check_ins(&case, &token.token().to_string(), 10)
        .await
        .expect("history");
    assert_eq!(history.len(), 2, "A's and B's second message");
}
