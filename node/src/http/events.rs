//! Server-sent event streams (the State API's triggers, the KV change
//! feed): batches of events as `id`/`event`/`data` frames, a keepalive
//! comment while nothing happens, one `error` event that ends the stream,
//! and the end of the stream when the port shuts down.

use std::future::Future;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use lode_client::LodeError;
use serde_json::Value;
use tokio::sync::watch;

/// How long a stream may stay silent before a keepalive comment.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// Where a stream's events come from.
pub(super) trait EventBatches: Send + 'static {
    /// The next events as SSE frames, waiting a while for some (an empty
    /// text when none came); an error ends the stream.
    fn next_frames(&mut self) -> impl Future<Output = Result<String, LodeError>> + Send;
}

/// One SSE frame.
pub(super) fn frame(id: &str, event: &str, data: &str) -> String {
    format!("id: {id}\nevent: {event}\ndata: {data}\n\n")
}

/// A change-log position as stream ids spell it: `INDEX.SEQUENCE`.
pub(super) fn position_text((index, sequence): (u64, u32)) -> String {
    format!("{index}.{sequence}")
}

/// The position an `INDEX.SEQUENCE` text names.
fn parse_position(text: &str) -> Result<(u64, u32), LodeError> {
    let invalid = || LodeError::Invalid(format!("position {text:?} is not INDEX.SEQUENCE"));
    let (index, sequence) = text.split_once('.').ok_or_else(invalid)?;
    Ok((
        index.parse().map_err(|_| invalid())?,
        sequence.parse().map_err(|_| invalid())?,
    ))
}

/// The position to resume after: the `Last-Event-ID` header, else the
/// query's `after`, else the start of the retained log.
pub(super) fn resume_position(headers: &axum::http::HeaderMap, after: Option<String>) -> Result<(u64, u32), LodeError> {
    let resume = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .or(after);
    Ok(resume.as_deref().map(parse_position).transpose()?.unwrap_or((0, 0)))
}

/// The stream as an HTTP answer; `error_data` is the `data` of the final
/// `error` event.
pub(super) fn stream<B: EventBatches>(
    batches: B,
    stopping: watch::Receiver<bool>,
    error_data: fn(&LodeError) -> Value,
) -> Response {
    let frames = futures::stream::unfold(
        (batches, stopping, false),
        move |(mut batches, mut stopping, ended)| async move {
            if ended {
                return None;
            }
            let batch = tokio::select! {
                biased;
                _ = stopping.wait_for(|stop| *stop) => return None,
                batch = tokio::time::timeout(KEEPALIVE, batches.next_frames()) => batch,
            };
            let (text, ended) = match batch {
                Err(_) => (": keepalive\n\n".to_owned(), false),
                Ok(Ok(frames)) => (frames, false),
                Ok(Err(error)) => (format!("event: error\ndata: {}\n\n", error_data(&error)), true),
            };
            Some((
                Ok::<_, std::convert::Infallible>(Bytes::from(text)),
                (batches, stopping, ended),
            ))
        },
    );
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        axum::body::Body::from_stream(frames),
    )
        .into_response()
}
