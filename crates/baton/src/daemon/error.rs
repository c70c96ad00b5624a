//! Errors as the API returns them: an HTTP status and one JSON shape, `{"error": ..., "hint":
//! ...}` ([`ErrorBody`]): a sentence that says what is wrong and, where there is something to
//! say, what to do instead.
//!
//! Handlers return [`ApiError`]. What axum refuses before any handler runs (a method the route
//! does not take, a body that is not JSON, not of the route's shape or over the body limit, a
//! path or query parameter of the wrong type) it answers as plain text or with no body at all;
//! [`json_errors`] rewrites every such answer into the same shape, so that no caller ever has to
//! read two kinds of error, and a route added later is covered without doing anything.

use axum::Json;
use axum::body::to_bytes;
use axum::extract::Request;
use axum::http::{Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use baton_core::units::format_size;

use crate::api::{ErrorBody, MAX_BODY_BYTES, PREFIX};
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    /// The request is valid but the job's state or owner session refuses it.
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("internal error: {0}")]
    Internal(String),
    /// What axum refused before a handler ran, with the status axum chose (405, 413, 415, 422,
    /// or 400 for a malformed body, path or query).
    #[error("{message}")]
    Rejected { status: StatusCode, message: String },
    /// Any of the above with advice on what to do instead (the body's `hint`).
    #[error("{error}")]
    Hinted { error: Box<ApiError>, hint: String },
}

impl ApiError {
    /// The same error, with `hint` telling the caller what to do instead.
    pub fn with_hint(self, hint: impl Into<String>) -> ApiError {
        ApiError::Hinted {
            error: Box::new(self),
            hint: hint.into(),
        }
    }

    pub(crate) fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Rejected { status, .. } => *status,
            ApiError::Hinted { error, .. } => error.status(),
        }
    }

    fn body(&self) -> ErrorBody {
        ErrorBody {
            error: self.to_string(),
            hint: match self {
                ApiError::Hinted { hint, .. } => Some(hint.clone()),
                _ => None,
            },
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        if e.is_full() {
            return ApiError::Unavailable(format!(
                "baton's state directory is full ({}); nothing was changed: free some space and \
                 try again",
                e.short()
            ));
        }
        ApiError::Internal(e.to_string())
    }
}

impl From<crate::jobs::TableError> for ApiError {
    fn from(e: crate::jobs::TableError) -> Self {
        match e {
            crate::jobs::TableError::Store(e) => e.into(),
            crate::jobs::TableError::Unknown(_) => ApiError::NotFound(e.to_string()),
            // The job moved on meanwhile (it ended as the request came in).
            other => ApiError::Conflict(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status(), Json(self.body())).into_response()
    }
}

/// The router's fallback: a route that does not exist.
pub async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route {method} {}", uri.path())).with_hint(format!(
        "the API's routes are under {PREFIX}/, e.g. GET {PREFIX}/info, GET {PREFIX}/jobs, POST \
         {PREFIX}/jobs; GET /metrics serves Prometheus metrics"
    ))
}

/// The most of a plain-text error body read to rewrite it; axum's are one line.
const REWRITTEN_TEXT_LIMIT: usize = 64 << 10;

/// Middleware: every error answer that is not already JSON becomes an [`ErrorBody`] with the
/// same status (and `Allow` header, for a 405).
pub async fn json_errors(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if is_json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let allow = parts.headers.get(header::ALLOW);
    let text = to_bytes(body, REWRITTEN_TEXT_LIMIT)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let allow_text = allow.and_then(|v| v.to_str().ok());
    let mut rewritten = rejection(status, &method, &path, allow_text, &text).into_response();
    if let Some(allow) = allow {
        rewritten.headers_mut().insert(header::ALLOW, allow.clone());
    }
    rewritten
}

/// What an answer axum made itself (`status`, its plain `text`, the `Allow` header of a 405)
/// says in the one error shape.
fn rejection(
    status: StatusCode,
    method: &Method,
    path: &str,
    allow: Option<&str>,
    text: &str,
) -> ApiError {
    let rejected = |message: String| ApiError::Rejected { status, message };
    match status {
        StatusCode::METHOD_NOT_ALLOWED => {
            let error = rejected(format!(
                "{method} {path}: this route does not take {method}"
            ));
            match allow.filter(|a| !a.is_empty()) {
                Some(methods) => error.with_hint(format!(
                    "{path} takes {}",
                    methods.split(',').collect::<Vec<_>>().join(", ")
                )),
                None => error,
            }
        }
        // Rejected before the body was read: axum's text only says "length limit exceeded".
        StatusCode::PAYLOAD_TOO_LARGE => rejected(format!(
            "{method} {path}: the request body is larger than the daemon's limit of {}",
            format_size(MAX_BODY_BYTES as u64)
        ))
        .with_hint(format!(
            "a workflow file may be at most {}, and `baton workflow submit` says so before \
             sending one; the rest of a request is small unless the environment is huge",
            format_size(baton_core::workflow::MAX_FILE_BYTES as u64)
        )),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => rejected(or_reason(text, status))
            .with_hint("send the body as JSON, with the header `Content-Type: application/json`"),
        // Anything else axum answers itself (a body that is not JSON or not the route's type,
        // a path or query parameter that does not parse, a 404 from a nested router): its text
        // already names the field and the problem.
        _ => rejected(or_reason(text, status)),
    }
}

/// `text`, or the status's own name when axum gave no text.
fn or_reason(text: &str, status: StatusCode) -> String {
    if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("the request was refused")
            .to_string()
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_is_in_the_body_and_keeps_the_status() {
        let e = ApiError::BadRequest("--time-limit: too long".into()).with_hint("omit it");
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            serde_json::to_value(e.body()).unwrap(),
            serde_json::json!({"error": "--time-limit: too long", "hint": "omit it"})
        );
        // No hint: the key is absent, not null.
        let e = ApiError::Internal("disk full".into());
        assert_eq!(
            serde_json::to_value(e.body()).unwrap(),
            serde_json::json!({"error": "internal error: disk full"})
        );
    }

    #[test]
    fn what_axum_refuses_reads_like_the_rest() {
        let e = rejection(
            StatusCode::METHOD_NOT_ALLOWED,
            &Method::GET,
            "/v1/wait",
            Some("POST"),
            "",
        );
        assert_eq!(e.status(), StatusCode::METHOD_NOT_ALLOWED);
        let body = e.body();
        assert_eq!(body.error, "GET /v1/wait: this route does not take GET");
        assert_eq!(body.hint.as_deref(), Some("/v1/wait takes POST"));
        let body = rejection(
            StatusCode::METHOD_NOT_ALLOWED,
            &Method::POST,
            "/v1/info",
            Some("GET,HEAD"),
            "",
        )
        .body();
        assert_eq!(body.hint.as_deref(), Some("/v1/info takes GET, HEAD"));

        let e = rejection(
            StatusCode::PAYLOAD_TOO_LARGE,
            &Method::POST,
            "/v1/workflows",
            None,
            "Failed to buffer the request body: length limit exceeded",
        );
        assert_eq!(
            e.to_string(),
            "POST /v1/workflows: the request body is larger than the daemon's limit of 8 MiB"
        );
        assert!(e.body().hint.unwrap().contains("at most 1 MiB"));

        let text = "Failed to parse the request body as JSON: expected value at line 1 column 1";
        let e = rejection(
            StatusCode::BAD_REQUEST,
            &Method::POST,
            "/v1/jobs",
            None,
            text,
        );
        assert_eq!(
            (e.status(), e.to_string()),
            (StatusCode::BAD_REQUEST, text.into())
        );
        let e = rejection(StatusCode::NOT_FOUND, &Method::GET, "/x", None, "");
        assert_eq!(e.to_string(), "Not Found");
    }
}
