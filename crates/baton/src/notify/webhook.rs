//! `webhook:URL`: an HTTP POST of the report JSON; `slack:URL` and `telegram:URL?chat_id=ID`:
//! the report's text, the way Slack's incoming webhooks and Telegram's `sendMessage` take it
//! (cut to what they accept, with where the whole report is). Any 2xx is a delivery; anything
//! else is retried by the outbox with backoff.

use std::sync::OnceLock;
use std::time::Duration;

use super::spec::telegram_chat;
use super::{Message, Outcome, WebhookFormat};

/// The most characters of text posted to Slack or Telegram (Telegram takes 4,096; Slack cuts
/// long messages too), the note on a cut included.
const TEXT_CHARS: usize = 3_500;

fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        // reqwest is built without a default TLS crypto provider; ring is ours. Installing
        // twice is harmless (the second call reports that one is already set).
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder()
            .timeout(Duration::from_secs(15))
            .user_agent(concat!("baton/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_default()
    })
}

pub async fn deliver(url: &str, format: WebhookFormat, msg: &Message) -> Outcome {
    let (target, body) = match format {
        WebhookFormat::Json => (url, msg.json.clone()),
        WebhookFormat::Slack => (
            url,
            serde_json::json!({ "text": slack_escape(&text(msg)) }).to_string(),
        ),
        WebhookFormat::Telegram => {
            let Some(chat) = telegram_chat(url) else {
                return Outcome::Failed("the telegram: URL names no chat_id".into());
            };
            // The chat goes in the body; the URL without its query (the bot's token stays in
            // its path, as Telegram wants it).
            let base = url.split('?').next().unwrap_or(url);
            (
                base,
                serde_json::json!({ "chat_id": chat, "text": text(msg) }).to_string(),
            )
        }
    };
    let sent = client()
        .post(target)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await;
    match sent {
        Ok(resp) if resp.status().is_success() => Outcome::Delivered,
        Ok(resp) => Outcome::Failed(format!(
            "the {} webhook answered {}",
            format.prefix(),
            resp.status()
        )),
        // reqwest's message names the URL; keep only its host so a secret path is not logged.
        Err(e) => Outcome::Failed(format!(
            "cannot reach the {} webhook: {}",
            format.prefix(),
            e.without_url()
        )),
    }
}

/// The report's text for a chat service: its markdown, cut to [`TEXT_CHARS`] with a note on
/// where the whole of it is.
fn text(msg: &Message) -> String {
    let whole = msg.markdown.trim_end();
    if whole.chars().count() <= TEXT_CHARS {
        return whole.to_string();
    }
    let note = format!("\n… (cut; the whole report: {})", msg.report_path);
    let keep = TEXT_CHARS.saturating_sub(note.chars().count());
    let mut out: String = whole.chars().take(keep).collect();
    out.push_str(&note);
    out
}

/// Slack reads `<...>` as links and mentions (`<!channel>`) and `&` as an entity: the three are
/// escaped, as Slack asks, so that nothing a job printed can ping a channel.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(markdown: &str) -> Message {
        Message {
            job: 1,
            state: "failed".into(),
            exit_code: Some(1),
            text: String::new(),
            markdown: markdown.into(),
            json: String::new(),
            report_path: "/home/a/.baton/jobs/1/report.md".into(),
            env: Default::default(),
            cwd: "/".into(),
            end: String::new(),
        }
    }

    #[test]
    fn a_long_report_is_cut_saying_where_the_rest_is() {
        let long = "x".repeat(10_000);
        let t = text(&message(&long));
        assert_eq!(t.chars().count(), TEXT_CHARS);
        assert!(t.ends_with("… (cut; the whole report: /home/a/.baton/jobs/1/report.md)"));
        assert_eq!(text(&message("short\n")), "short");
    }

    #[test]
    fn nothing_a_job_printed_can_mention_a_slack_channel() {
        assert_eq!(
            slack_escape("<!channel> a & b <http://x|y>"),
            "&lt;!channel&gt; a &amp; b &lt;http://x|y&gt;"
        );
    }
}
