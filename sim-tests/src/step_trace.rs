//! Per-step fingerprints of a run, to find where two runs of one seed part.
//!
//! The trace digest says only *that* two runs differ; this says *when*.
//! After every simulation step the driver fingerprints what is observable
//! from outside the hosts: every message in flight (its endpoints, kind,
//! sequence number, length and a digest of its bytes) and how far the
//! history has got; optionally also turmoil's own events, which show the
//! order of sends and receipts inside a step. Compared with another run of
//! the seed, the first step whose view differs is the first step where
//! behaviour differed, and the views of the steps just before it say
//! between which hosts.

use std::cell::RefCell;
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

use crate::history::History;
use crate::trace::Fnv;

/// Steps described before a divergence.
pub const CONTEXT_STEPS: usize = 20;

/// What one step looked like from outside the hosts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepView {
    pub step: usize,
    pub elapsed: Duration,
    pub history_operations: usize,
    pub history_completed: usize,
    /// One line per message in flight: `source -> destination kind
    /// #sequence length digest`.
    pub in_flight: Vec<String>,
    /// turmoil's events during the step, when captured
    /// ([`capture_network_events`]).
    pub events: Vec<String>,
}

impl StepView {
    fn digest(&self) -> u64 {
        let mut digest = Fnv::new();
        digest.write_debug(&(
            self.elapsed,
            self.history_operations,
            self.history_completed,
            &self.in_flight,
        ));
        digest.finish()
    }
}

thread_local! {
    /// turmoil's network events since the last step, while a capture is
    /// installed on this thread.
    static NETWORK_EVENTS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Collects turmoil's own trace events (each send, delivery and receipt,
/// in the order they happened inside the step) into the step views, while
/// the returned guard lives. It installs a subscriber for this thread only.
pub fn capture_network_events() -> tracing::subscriber::DefaultGuard {
    let filter = tracing_subscriber::filter::Targets::new().with_target("turmoil", tracing::Level::TRACE);
    let subscriber = tracing_subscriber::registry().with(NetworkEvents.with_filter(filter));
    tracing::subscriber::set_default(subscriber)
}

struct NetworkEvents;

/// An event's fields as text, with payload bytes replaced by their count
/// (the in-flight view already digests them).
struct EventText(String);

impl Visit for EventText {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let mut text = format!("{value:?}");
        if let Some(start) = text.find('[') {
            let bytes = text[start..].matches(',').count() + 1;
            text = format!("{}{bytes} B", &text[..start]);
        }
        self.0.push_str(&format!(" {}={text}", field.name()));
    }
}

impl<S: tracing::Subscriber> Layer<S> for NetworkEvents {
    fn on_event(&self, event: &tracing::Event<'_>, _context: Context<'_, S>) {
        let mut text = EventText(String::new());
        event.record(&mut text);
        NETWORK_EVENTS.with(|events| events.borrow_mut().push(text.0));
    }
}

fn take_network_events() -> Vec<String> {
    NETWORK_EVENTS.with(|events| std::mem::take(&mut *events.borrow_mut()))
}

/// Every step's view of one run.
#[derive(Debug)]
pub struct StepTrace {
    pub views: Vec<StepView>,
}

impl Default for StepTrace {
    fn default() -> Self {
        Self::new()
    }
}

impl StepTrace {
    pub fn new() -> Self {
        // Events of an earlier run's last step must not count as this
        // run's first.
        take_network_events();
        StepTrace { views: Vec::new() }
    }

    pub(crate) fn record(&mut self, sim: &turmoil::Sim<'_>, history: &History) {
        let mut in_flight = Vec::new();
        sim.links(|links| {
            for link in links {
                for sent in link {
                    let (source, destination) = sent.pair();
                    let (kind, sequence, bytes): (_, _, &[u8]) = match sent.protocol() {
                        turmoil::Protocol::Tcp(turmoil::Segment::Data(sequence, bytes)) => ("data", *sequence, bytes),
                        turmoil::Protocol::Tcp(turmoil::Segment::Syn(_)) => ("syn", 0, &[]),
                        turmoil::Protocol::Tcp(turmoil::Segment::Fin(sequence)) => ("fin", *sequence, &[]),
                        turmoil::Protocol::Tcp(turmoil::Segment::Rst) => ("rst", 0, &[]),
                        turmoil::Protocol::Udp(datagram) => ("udp", 0, &datagram.0),
                    };
                    let mut digest = Fnv::new();
                    digest.write(bytes);
                    in_flight.push(format!(
                        "{source} -> {destination} {kind} #{sequence} {} B {:016x}",
                        bytes.len(),
                        digest.finish()
                    ));
                }
            }
        });
        self.views.push(StepView {
            step: self.views.len(),
            elapsed: sim.elapsed(),
            history_operations: history.operations.len(),
            history_completed: history
                .operations
                .iter()
                .filter(|operation| operation.completed.is_some())
                .count(),
            in_flight,
            events: take_network_events(),
        });
    }

    /// The first step at which the two runs differ, if any.
    pub fn first_divergence(&self, other: &StepTrace) -> Option<usize> {
        let differing = self
            .views
            .iter()
            .zip(&other.views)
            .position(|(a, b)| a.digest() != b.digest() || a.events != b.events);
        differing.or_else(|| (self.views.len() != other.views.len()).then(|| self.views.len().min(other.views.len())))
    }

    /// A report of how the two runs differ around their first divergence.
    pub fn describe_divergence(&self, other: &StepTrace) -> Option<String> {
        let step = self.first_divergence(other)?;
        let mut report = format!("the runs first differ at step {step}\n");
        for index in step.saturating_sub(CONTEXT_STEPS)..=step {
            let (Some(a), Some(b)) = (self.views.get(index), other.views.get(index)) else {
                report.push_str(&format!("step {index}: one run had ended\n"));
                continue;
            };
            report.push_str(&format!(
                "step {index} at {:?}: operations {}/{} vs {}/{} (started/completed)\n",
                a.elapsed, a.history_operations, a.history_completed, b.history_operations, b.history_completed
            ));
            for line in a.in_flight.iter().filter(|line| !b.in_flight.contains(line)) {
                report.push_str(&format!("  first only:  {line}\n"));
            }
            for line in b.in_flight.iter().filter(|line| !a.in_flight.contains(line)) {
                report.push_str(&format!("  second only: {line}\n"));
            }
            if index + 2 >= step {
                for line in &a.in_flight {
                    report.push_str(&format!("  first in flight: {line}\n"));
                }
                for line in &b.in_flight {
                    report.push_str(&format!("  second in flight: {line}\n"));
                }
            }
            if a.events != b.events {
                for line in &a.events {
                    report.push_str(&format!("  first event: {line}\n"));
                }
                for line in &b.events {
                    report.push_str(&format!("  second event: {line}\n"));
                }
            }
        }
        Some(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(step: usize, in_flight: &[&str], events: &[&str]) -> StepView {
        StepView {
            step,
            elapsed: Duration::from_millis(step as u64 + 1),
            history_operations: step,
            history_completed: step,
            in_flight: in_flight.iter().map(|line| (*line).to_owned()).collect(),
            events: events.iter().map(|line| (*line).to_owned()).collect(),
        }
    }

    fn trace(views: Vec<StepView>) -> StepTrace {
        StepTrace { views }
    }

    #[test]
    fn the_first_differing_step_is_named_with_what_differs() {
        let common = |step| view(step, &["a -> b data #1 10 B 00"], &[]);
        let first = trace(vec![common(0), common(1), view(2, &["a -> b data #2 10 B 01"], &[])]);
        let second = trace(vec![common(0), common(1), view(2, &["b -> a data #7 19 B 02"], &[])]);
        assert_eq!(first.first_divergence(&second), Some(2));
        let report = first.describe_divergence(&second).expect("a divergence");
        assert!(report.contains("first differ at step 2"), "{report}");
        assert!(report.contains("first only:  a -> b data #2"), "{report}");
        assert!(report.contains("second only: b -> a data #7"), "{report}");
    }

    #[test]
    fn event_order_alone_is_a_divergence_and_equal_runs_have_none() {
        let first = trace(vec![view(0, &[], &["Send x", "Recv y"])]);
        let second = trace(vec![view(0, &[], &["Recv y", "Send x"])]);
        assert_eq!(first.first_divergence(&second), Some(0));
        assert_eq!(first.first_divergence(&first), None);
        let shorter = trace(Vec::new());
        assert_eq!(first.first_divergence(&shorter), Some(0));
    }
}
