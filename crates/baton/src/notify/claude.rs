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
    let exchange = async {
        stream.write_all(lines.as_bytes()).await?;
        stream.shutdown().await?;
        // The peer closes when it has taken the message; whatever it says back is read only so
        // that a refusal shows in the delivery's error.
        let mut reply = Vec::new();
        (&mut stream).take(4096).read_to_end(&mut reply).await?;
        Ok::<_, std::io::Error>(reply)
    };
    match tokio::time::timeout(Duration::from_secs(10), exchange).await {
        Err(_) => Outcome::Failed(format!("{socket} did not close the exchange within 10s")),
        Ok(Err(e)) => Outcome::Failed(format!("sending to {socket}: {e}")),
        Ok(Ok(reply)) => {
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
    }
}
