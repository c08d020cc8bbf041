//! A local SMTP server that prints every e-mail it receives: point the server's
//! `smtp_url` at it to see alerts without a real mail relay.
//!
//! `cargo run --example smtp_sink -- 127.0.0.1:2525`

use std::time::Duration;

use snitch::notify::email::smtp_sink::SmtpSink;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:2525".into());
    let sink = SmtpSink::bind(addr.as_str()).await?;
    println!("SMTP sink listening on {} ({})", sink.addr(), sink.url());
    loop {
        if let Some(mail) = sink.next_mail(Duration::from_secs(3600)).await {
            println!("--- mail from {} to {}", mail.from, mail.to.join(", "));
            println!("{}", mail.data);
        }
    }
}
