//! The process's logs: to standard error, as text (coloured only on a
//! terminal, and never with `NO_COLOR` set) or as one JSON object per
//! line (`--log-format json`), filtered by `--log` or `RUST_LOG`.
//!
//! A member's normal start logs no ERROR and no WARN: founders start one
//! by one, and until the last is up openraft logs each vote request to it
//! that fails or times out at ERROR. Under load, it also logs at ERROR
//! each peer that did not confirm the leadership for a linearizable read
//! within a heartbeat interval; the read itself is answered `unavailable`
//! (or served, by a quorum of the others), and no one needs paging. The
//! network layer already reports an unreachable peer once, at WARN, so
//! these openraft events are dropped here.

use std::io::IsTerminal;

use clap::ValueEnum;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

#[derive(ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line: time, level, target, fields, spans.
    Json,
}

/// The filter of a member's logs when none is given. A peer that is down
/// is not a reason to page anyone, and the network layer logs each outage
/// once at WARN, while openraft logs it at every retry: each failed
/// replication call at ERROR (`openraft::replication`), and each failed
/// call's progress and heartbeat at WARN (its replication handler), about
/// five lines a second for as long as a member is down. Its core warns of
/// each stale message it ignores (a vote answer that arrives after the
/// election it answered, a replication result from before a membership
/// change), several in every election. Those are openraft's normal
/// course, so both are heard from at ERROR only.
const MEMBER_FILTER_DEFAULT: &str = "info,openraft=warn,openraft::replication=off,\
openraft::engine::handler::replication_handler=error,openraft::core::raft_core=error";

/// Where openraft logs a failed vote request or leadership confirmation,
/// and the messages it uses.
const PEER_EVENTS_TARGET: &str = "openraft::core::raft_core";
const PEER_EVENT_MESSAGES: [&str; 3] = [
    "while requesting vote",
    "timeout",
    "timeout while confirming leadership for read request",
];

/// Drops openraft's ERROR events for a vote request or a leadership
/// confirmation that failed or timed out (see the module's documentation).
struct QuietPeerFailures;

struct Message(Option<String>);

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for QuietPeerFailures {
    fn event_enabled(&self, event: &tracing::Event<'_>, _: Context<'_, S>) -> bool {
        let metadata = event.metadata();
        if *metadata.level() != tracing::Level::ERROR || metadata.target() != PEER_EVENTS_TARGET {
            return true;
        }
        let mut message = Message(None);
        event.record(&mut message);
        !message
            .0
            .is_some_and(|message| PEER_EVENT_MESSAGES.contains(&message.as_str()))
    }
}

/// Installs the process's log output; `member` picks the default filter
/// of `lode node` and `lode dev`.
pub fn init(filter: Option<String>, format: LogFormat, member: bool) {
    let default = if member { MEMBER_FILTER_DEFAULT } else { "warn" };
    let filter = filter
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| default.to_owned());
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let filter = tracing_subscriber::EnvFilter::new(filter);
    let output = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(colour)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let _ = tracing_subscriber::registry()
        .with(QuietPeerFailures)
        .with(filter)
        .with(output)
        .try_init();
}
