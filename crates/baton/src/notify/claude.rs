//! `claude`: Claude Code's per-session inbox socket (DESIGN §5). Newline-delimited JSON: an auth
//! line with the session's token, then one user message; an idle session starts a turn with it,
//! a busy one reads it between tool calls. The socket exists only while the session runs, so a
//! missing or refusing socket means the session is gone.

use std::io::ErrorKind;

use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

use super::{Message, Outcome};

pub async fn deliver(socket: &str, token: &str, msg: &Message) -> Outcome {
    // A session that stopped reading (suspended, stuck) must not hold the delivery for good.
    match tokio::time::timeout(std::time::Duration::from_secs(10), send(socket, token, msg)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Failed(format!("{socket} did not take the message within 10 s")),
    }
}

async fn send(socket: &str, token: &str, msg: &Message) -> Outcome {
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
    // Written whole: that is the delivery, recorded now. Claude Code answers a message it held
    // or refused the same way as one it passed on (it closes the connection), so waiting for a
    // reply would learn nothing, and would leave a window in which a stopping daemon forgets a
    // message it did send and sends it again after its restart.
    Outcome::Delivered
}
