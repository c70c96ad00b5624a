//! `claude`: Claude Code's per-session inbox socket (DESIGN §5). Newline-delimited JSON: an auth
//! line with the session's token, then one user message; an idle session starts a turn with it,
//! a busy one reads it between tool calls. The socket exists only while the session runs, so a
//! missing or refusing socket means the session is gone.

use std::io::ErrorKind;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::{Message, Outcome};

pub async fn deliver(socket: &str, token: &str, msg: &Message) -> Outcome {
    let mut stream = match UnixStream::connect(socket).await {
        Ok(s) => s,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {
            return Outcome::Gone(format!(
                "the Claude Code session's inbox {socket} is gone ({e})"
            ));
        }
        Err(e) => return Outcome::Failed(format!("cannot connect to {socket}: {e}")),
    };
    let auth = serde_json::json!({"type": "auth", "token": token});
    let message = serde_json::json!({
        "type": "user",
        "message": {"role": "user", "content": msg.text},
    });
    let lines = format!("{auth}\n{message}\n");
    if let Err(e) = stream.write_all(lines.as_bytes()).await {
        return Outcome::Failed(format!("sending to {socket}: {e}"));
    }
    let _ = stream.shutdown().await;
    // The message is written. A peer may answer (a refusal shows in the delivery's error) or
    // keep the connection open; either way the message is not sent again.
    let mut reply = Vec::new();
    let mut limited = (&mut stream).take(4096);
    let _ = tokio::time::timeout(Duration::from_secs(2), limited.read_to_end(&mut reply)).await;
    let reply = String::from_utf8_lossy(&reply);
    if reply.contains("\"error\"") || reply.contains("unauthorized") {
        Outcome::Failed(format!(
            "{socket} refused the message: {}",
            super::tail_of(reply.as_bytes(), 200)
        ))
    } else {
        Outcome::Delivered
    }
}
