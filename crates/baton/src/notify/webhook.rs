//! `webhook:URL`: an HTTP POST of the report JSON. Any 2xx is a delivery; anything else is
//! retried by the outbox with backoff.

use std::sync::OnceLock;
use std::time::Duration;

use super::{Message, Outcome};

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

pub async fn deliver(url: &str, msg: &Message) -> Outcome {
    let sent = client()
        .post(url)
        .header("content-type", "application/json")
        .body(msg.json.clone())
        .send()
        .await;
    match sent {
        Ok(resp) if resp.status().is_success() => Outcome::Delivered,
        Ok(resp) => Outcome::Failed(format!("the webhook answered {}", resp.status())),
        // reqwest's message names the URL; keep only its host so a secret path is not logged.
        Err(e) => Outcome::Failed(format!("cannot reach the webhook: {}", e.without_url())),
    }
}
