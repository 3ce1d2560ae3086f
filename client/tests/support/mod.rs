//! What the SDK's connection tests share: a server's handler that answers
//! one call at once and never answers another.

use std::sync::Arc;

use lode_client::protocol::{Capability, LodeServiceRequest, LodeServiceResponse};
use lode_client::rpc::Handler;

/// Answers `capabilities` at once and never answers `node_status`.
pub fn handler() -> Handler<LodeServiceRequest, LodeServiceResponse> {
    Arc::new(|request: LodeServiceRequest| {
        Box::pin(async move {
            match request {
                LodeServiceRequest::Capabilities {} => Ok(LodeServiceResponse::Capabilities(vec![Capability::Kv])),
                LodeServiceRequest::NodeStatus {} => std::future::pending().await,
                other => Err(format!("the test server does not serve {other:?}")),
            }
        })
    })
}
