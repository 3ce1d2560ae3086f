//! The KV API as JSON on the HTTP port, for every language: atomic writes
//! of the KV family's operations under an op id the caller may choose
//! (`POST /kv/v1/write`), reads (`POST /kv/v1/read`), the capabilities
//! (`GET /kv/v1/capabilities`), the change feed as server-sent events
//! resumable by `Last-Event-ID` (`GET /kv/v1/changes`), and the OpenAPI 3
//! document of all of them (`GET /kv/v1/openapi.json`, checked in beside
//! this file).
//!
//! Like the rest of the port it is a client of its own member through the
//! SDK, acting as the caller's user, so permissions, limits, leader
//! forwarding and retries are those of every other client. `wire.rs` says
//! how bytes and 64-bit integers travel; failures are `errors.rs`.

mod errors;
mod operations;
mod queries;
mod wire;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Extension, Query as UrlQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::Router;
use lode_client::changes::Changes;
use lode_client::protocol::{Capability, Consistency, Operation, ReadRequest, WriteRequest};
use lode_client::LodeError;
use serde::Deserialize;
use serde_json::{json, Value};

use self::errors::{error_json, failure};
use self::operations::{OperationJson, ResultJson};
use self::queries::{AnswerJson, ChangeJson, ConsistencyJson, QueryJson};
use self::wire::{untag, WireOpId, WireU64};
use super::caller::Caller;
use super::{events, Gateway};

/// Largest request body the KV JSON API reads, in bytes: room for the
/// largest write, or the largest get_many, with every byte in base64.
pub(super) const BODY_BYTES_MAX: usize = 4 << 20;

const _: () = assert!(BODY_BYTES_MAX >= lode_types::limits::WRITE_BYTES_MAX / 3 * 4 + (64 << 10));
const _: () = assert!(
    BODY_BYTES_MAX
        >= lode_types::limits::GET_MANY_KEYS_MAX * (lode_types::limits::KEY_BYTES_MAX / 3 * 4 + 32) + (64 << 10)
);

/// The checked-in OpenAPI document the port serves.
const OPENAPI_DOCUMENT: &str = include_str!("openapi.json");

/// Every route of the KV JSON API; the router is built from this list and
/// a test holds it equal to the OpenAPI document's paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Route {
    Write,
    Read,
    Capabilities,
    Changes,
    OpenApi,
}

impl Route {
    pub(super) const ALL: [Route; 5] = [
        Route::Write,
        Route::Read,
        Route::Capabilities,
        Route::Changes,
        Route::OpenApi,
    ];

    /// The HTTP method, lowercase as OpenAPI spells it.
    pub(super) fn method(self) -> &'static str {
        match self {
            Route::Write | Route::Read => "post",
            Route::Capabilities | Route::Changes | Route::OpenApi => "get",
        }
    }

    pub(super) fn path(self) -> &'static str {
        match self {
            Route::Write => "/kv/v1/write",
            Route::Read => "/kv/v1/read",
            Route::Capabilities => "/kv/v1/capabilities",
            Route::Changes => "/kv/v1/changes",
            Route::OpenApi => "/kv/v1/openapi.json",
        }
    }

    /// Whether the route needs a caller's token (the document does not).
    fn needs_token(self) -> bool {
        self != Route::OpenApi
    }

    /// The route's handler, answering the route's `method` only.
    fn handler(self) -> MethodRouter<Arc<Gateway>> {
        let method = if self.method() == "post" {
            MethodFilter::POST
        } else {
            MethodFilter::GET
        };
        match self {
            Route::Write => on(method, write).layer(DefaultBodyLimit::max(BODY_BYTES_MAX)),
            Route::Read => on(method, read).layer(DefaultBodyLimit::max(BODY_BYTES_MAX)),
            Route::Capabilities => on(method, capabilities),
            Route::Changes => on(method, changes),
            Route::OpenApi => on(method, openapi),
        }
    }
}

/// The routes that need a token, or the one that does not.
pub(super) fn router(with_token: bool) -> Router<Arc<Gateway>> {
    Route::ALL
        .into_iter()
        .filter(|route| route.needs_token() == with_token)
        .fold(Router::new(), |router, route| {
            router.route(route.path(), route.handler())
        })
}

/// The port's token check, answering a refusal as this API's JSON error
/// (`unauthorized`, 401) rather than KV Connect's plain text.
pub(super) async fn require_token(
    State(gateway): State<Arc<Gateway>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    super::admit_caller(&gateway, request, next, |refusal| {
        errors::unauthorized(refusal.message())
    })
    .await
}

fn answer(body: Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The body parsed as `T`; the error names the field by its path.
fn parse<T: serde::de::DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, LodeError> {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let parsed = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let path = error.path().to_string();
        LodeError::Invalid(format!("{what} body, at {path}: {}", error.into_inner()))
    })?;
    // One JSON value and nothing after it but white space, as
    // `serde_json::from_slice` has it.
    deserializer
        .end()
        .map_err(|error| LodeError::Invalid(format!("{what} body, after its value: {error}")))?;
    Ok(parsed)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WriteBody {
    /// Chosen by the caller to make the write safe to repeat; drawn by the
    /// gateway when absent.
    #[serde(default)]
    op_id: Option<WireOpId>,
    /// Each an `OperationJson` named by its `op`.
    operations: Vec<Value>,
}

/// `POST /kv/v1/write`: one atomic write; answers its op id, position and
/// one result per operation.
async fn write(State(gateway): State<Arc<Gateway>>, Extension(caller): Extension<Caller>, body: Bytes) -> Response {
    write_json(&gateway, &caller, &body).await.map_or_else(failure, answer)
}

/// A write body decoded: the op id the caller chose, if any, and its
/// operations (relative expiries taken from `now_micros`). The limits on
/// what they hold are checked after, by the SDK and the member, as for any
/// client. Public for its fuzz target.
pub fn decode_write(body: &[u8], now_micros: u64) -> Result<(Option<u128>, Vec<Operation>), LodeError> {
    let body: WriteBody = parse("write", body)?;
    let operations = body
        .operations
        .into_iter()
        .enumerate()
        .map(|(at, operation)| {
            let operation: OperationJson = untag(operation)
                .map_err(|message| LodeError::Invalid(format!("write body, at operations[{at}]{message}")))?;
            operation.operation(now_micros).map_err(|error| match error {
                LodeError::Invalid(message) => LodeError::Invalid(format!("operations[{at}]: {message}")),
                other => other,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((body.op_id.map(|op_id| op_id.0), operations))
}

async fn write_json(gateway: &Gateway, caller: &Caller, body: &[u8]) -> Result<Value, LodeError> {
    let (op_id, operations) = decode_write(body, lode_client::facade::now_micros())?;
    let op_id = op_id.unwrap_or_else(lode_client::sdk::new_op_id);
    let clients = gateway.callers.clients(caller)?;
    let response = clients.cluster.write(WriteRequest { op_id, operations }).await?;
    let results = response
        .results
        .into_iter()
        .map(ResultJson::from_result)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(json!({
        "op_id": WireOpId(op_id),
        "position": WireU64(response.position),
        "results": results,
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadBody {
    /// A `QueryJson` named by its `op`.
    query: Value,
    #[serde(default)]
    consistency: ConsistencyJson,
}

/// `POST /kv/v1/read`: one query; answers what it found and the position
/// it was served at. Linearizable reads follow the leader; the others are
/// this member's.
async fn read(State(gateway): State<Arc<Gateway>>, Extension(caller): Extension<Caller>, body: Bytes) -> Response {
    read_json(&gateway, &caller, &body).await.map_or_else(failure, answer)
}

/// A read body decoded. Public for its fuzz target.
pub fn decode_read(body: &[u8]) -> Result<ReadRequest, LodeError> {
    let body: ReadBody = parse("read", body)?;
    let consistency = body.consistency.consistency();
    let query: QueryJson =
        untag(body.query).map_err(|message| LodeError::Invalid(format!("read body, at query{message}")))?;
    Ok(ReadRequest {
        query: query.query()?,
        consistency,
    })
}

async fn read_json(gateway: &Gateway, caller: &Caller, body: &[u8]) -> Result<Value, LodeError> {
    let ReadRequest { query, consistency } = decode_read(body)?;
    let clients = gateway.callers.clients(caller)?;
    let client = match consistency {
        Consistency::Linearizable => &clients.cluster,
        Consistency::AtLeast(_) | Consistency::Eventual => &clients.local,
    };
    let response = client.read(ReadRequest { query, consistency }).await?;
    let mut answer = serde_json::to_value(AnswerJson::from_result(response.result)?)
        .map_err(|error| LodeError::Unavailable(format!("encoding a read's answer: {error}")))?;
    answer["position"] = json!(WireU64(response.position));
    Ok(answer)
}

/// `GET /kv/v1/capabilities`: what the cluster offers.
async fn capabilities(State(gateway): State<Arc<Gateway>>, Extension(caller): Extension<Caller>) -> Response {
    let offered = match gateway.callers.clients(&caller) {
        Ok(clients) => clients.cluster.capabilities().await,
        Err(error) => Err(error),
    };
    match offered {
        Ok(offered) => {
            let names: Vec<&str> = offered
                .iter()
                .map(|capability| match capability {
                    Capability::Kv => "kv",
                    Capability::Cas => "cas",
                    Capability::FencedLeases => "fenced_leases",
                    Capability::Forks => "forks",
                })
                .collect();
            answer(json!({ "capabilities": names }))
        }
        Err(error) => failure(error),
    }
}

/// The query of `GET /kv/v1/changes`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChangesQuery {
    /// `INDEX.SEQUENCE` to resume after (the `Last-Event-ID` header wins).
    after: Option<String>,
    /// Only namespaces whose names start with this.
    namespace_prefix: Option<String>,
}

/// `GET /kv/v1/changes`: the change feed as server-sent events (`id` is the
/// position to resume after, `event: change`, `data` the change), from
/// this member; an `error` event (`compacted` for a position older than
/// the retained log) ends it.
async fn changes(
    State(gateway): State<Arc<Gateway>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    UrlQuery(query): UrlQuery<ChangesQuery>,
) -> Response {
    let after = match events::resume_position(&headers, query.after) {
        Ok(after) => after,
        Err(error) => return failure(error),
    };
    let clients = match gateway.callers.clients(&caller) {
        Ok(clients) => clients,
        Err(error) => return failure(error),
    };
    let feed = clients
        .local
        .changes(after)
        .namespace_prefix(query.namespace_prefix.unwrap_or_default());
    events::stream(ChangeFrames(feed), gateway.stopping.clone(), error_json)
}

struct ChangeFrames(Changes);

impl events::EventBatches for ChangeFrames {
    async fn next_frames(&mut self) -> Result<String, LodeError> {
        let changes = self.0.next_batch().await?;
        let mut frames = String::new();
        for change in changes {
            let id = events::position_text(change.position());
            let data = serde_json::to_string(&ChangeJson::from(change))
                .map_err(|error| LodeError::Unavailable(format!("encoding a change: {error}")))?;
            frames.push_str(&events::frame(&id, "change", &data));
        }
        Ok(frames)
    }
}

/// `GET /kv/v1/openapi.json`.
async fn openapi() -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        OPENAPI_DOCUMENT,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_document_lists_exactly_the_routes_served() {
        let document: Value = serde_json::from_str(OPENAPI_DOCUMENT).expect("the document is JSON");
        assert!(document["openapi"]
            .as_str()
            .is_some_and(|version| version.starts_with("3.")));
        let mut documented = Vec::new();
        for (path, item) in document["paths"].as_object().expect("paths") {
            let methods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];
            for method in item.as_object().expect("a path item").keys() {
                if methods.contains(&method.as_str()) {
                    documented.push((method.clone(), path.clone()));
                }
            }
        }
        documented.sort();
        let mut served: Vec<(String, String)> = Route::ALL
            .iter()
            .map(|route| (route.method().to_owned(), route.path().to_owned()))
            .collect();
        served.sort();
        assert_eq!(documented, served);
    }

    #[test]
    fn bodies_with_bytes_after_their_value_are_refused() {
        let write = br#"{"operations":[{"op":"delete","namespace":"n","key":"k"}]}"#;
        assert!(decode_write(write, 0).is_ok());
        assert!(decode_write(&[&write[..], b" \n"].concat(), 0).is_ok());
        for trailing in [&b"x"[..], b"{}", b"]"] {
            let refused = decode_write(&[&write[..], trailing].concat(), 0);
            assert!(
                matches!(&refused, Err(LodeError::Invalid(message)) if message.contains("write body, after its value")),
                "{refused:?}"
            );
        }
        let read = br#"{"query":{"op":"get","namespace":"n","key":"k"}}"#;
        assert!(decode_read(read).is_ok());
        assert!(decode_read(&[&read[..], b"1"].concat()).is_err());
    }
}
