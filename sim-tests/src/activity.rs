//! What every actor of a run (client, watcher, lock client, queue producer
//! and consumer, operator, verifier) is doing: its last call, when it
//! began, the answer it got and whether the actor has finished. A run that
//! does not settle names the actors still going and what each last did, so
//! the failure explains itself instead of needing instrumentation.
//!
//! Diagnostics only: no checker reads it, and recording draws nothing from
//! the run's generator.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// One actor's latest call.
#[derive(Clone, Debug, Default)]
pub struct Actor {
    /// The last call begun (empty: none yet).
    pub call: String,
    pub call_at: Duration,
    /// The answer to that call, once it came.
    pub answer: Option<(String, Duration)>,
    pub finished_at: Option<Duration>,
}

/// Every actor of a run, by client number.
#[derive(Clone, Debug, Default)]
pub struct Activity {
    actors: BTreeMap<usize, Actor>,
}

/// The host name of client number `client` (see `simulation.rs`).
pub fn actor_name(client: usize) -> String {
    use crate::simulation::{
        BULK_WRITER, GRANTOR, OPERATOR, QUEUE_CONSUMER_FIRST, QUEUE_PRODUCER_FIRST, TENANT, VERIFIER, WATCHER_FIRST,
    };
    match client {
        VERIFIER => "verifier".to_owned(),
        OPERATOR => "operator".to_owned(),
        GRANTOR => "grantor".to_owned(),
        TENANT => "tenant".to_owned(),
        BULK_WRITER => "bulk".to_owned(),
        number if number >= QUEUE_CONSUMER_FIRST => format!("q{}", number - QUEUE_CONSUMER_FIRST),
        number if number >= QUEUE_PRODUCER_FIRST => format!("p{}", number - QUEUE_PRODUCER_FIRST),
        number if number >= WATCHER_FIRST => format!("w{}", number - WATCHER_FIRST),
        number if number >= crate::simulation::LOCK_CLIENT_FIRST => {
            format!("l{}", number - crate::simulation::LOCK_CLIENT_FIRST)
        }
        number => format!("c{number}"),
    }
}

impl Activity {
    /// Adds an actor before it starts, so that one that never gets to run
    /// still shows as unfinished.
    pub fn register(&mut self, client: usize) {
        self.actors.entry(client).or_default();
    }

    pub fn calling(&mut self, client: usize, call: String, now: Duration) {
        let actor = self.actors.entry(client).or_default();
        actor.call = call;
        actor.call_at = now;
        actor.answer = None;
    }

    pub fn answered(&mut self, client: usize, answer: String, now: Duration) {
        self.actors.entry(client).or_default().answer = Some((answer, now));
    }

    pub fn finished(&mut self, client: usize, now: Duration) {
        self.actors.entry(client).or_default().finished_at = Some(now);
    }

    /// The last call `client` began, if any.
    pub fn last_call(&self, client: usize) -> Option<&str> {
        self.actors.get(&client).map(|actor| actor.call.as_str())
    }

    /// Registered clients that have not finished: the actors the verifier
    /// waits for (the operator and the verifier itself aside).
    pub fn unfinished_clients(&self) -> Vec<usize> {
        use crate::simulation::{OPERATOR, VERIFIER};
        self.actors
            .iter()
            .filter(|(client, actor)| ![VERIFIER, OPERATOR].contains(*client) && actor.finished_at.is_none())
            .map(|(client, _)| *client)
            .collect()
    }

    /// One line per unfinished actor (the verifier included): its last call,
    /// when, and its answer or how long it has waited for one.
    pub fn describe_unfinished(&self, now: Duration) -> String {
        let mut lines = String::new();
        for (client, actor) in self.actors.iter().filter(|(_, actor)| actor.finished_at.is_none()) {
            let name = actor_name(*client);
            if actor.call.is_empty() {
                let _ = writeln!(lines, "  {name}: no call yet");
                continue;
            }
            let _ = write!(lines, "  {name}: {} at {:?}", actor.call, actor.call_at);
            let _ = match &actor.answer {
                Some((answer, at)) => writeln!(lines, ", answered at {at:?}: {answer}"),
                None => writeln!(lines, ", no answer after {:?}", now.saturating_sub(actor.call_at)),
            };
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulation::{OPERATOR, QUEUE_CONSUMER_FIRST, VERIFIER};

    fn at(milliseconds: u64) -> Duration {
        Duration::from_millis(milliseconds)
    }

    #[test]
    fn an_unsettled_run_names_each_unfinished_actor_with_its_last_call_and_answer() {
        let listener = QUEUE_CONSUMER_FIRST + 1;
        let mut activity = Activity::default();
        for client in [0, listener, OPERATOR, VERIFIER, 7] {
            activity.register(client);
        }
        activity.calling(0, "Get { key: \"k1\" }".to_owned(), at(4_000));
        activity.answered(0, "Read(None)".to_owned(), at(4_010));
        activity.finished(0, at(6_000));
        activity.calling(listener, "listen".to_owned(), at(57_861));
        activity.answered(listener, "listen ended: Err(Timeout)".to_owned(), at(60_900));
        activity.calling(VERIFIER, "waiting for q1 to finish".to_owned(), at(9_000));
        activity.calling(OPERATOR, "add member 4".to_owned(), at(5_000));
        activity.finished(OPERATOR, at(6_100));

        assert_eq!(activity.unfinished_clients(), vec![7, listener]);
        let described = activity.describe_unfinished(at(66_000));
        assert_eq!(
            described,
            "  c7: no call yet\n\
             \x20 q1: listen at 57.861s, answered at 60.9s: listen ended: Err(Timeout)\n\
             \x20 verifier: waiting for q1 to finish at 9s, no answer after 57s\n"
        );
    }

    #[test]
    fn a_new_call_forgets_the_previous_answer() {
        let mut activity = Activity::default();
        activity.calling(3, "claim".to_owned(), at(1_000));
        activity.answered(3, "nothing due".to_owned(), at(1_010));
        activity.calling(3, "claim".to_owned(), at(2_000));
        assert_eq!(
            activity.describe_unfinished(at(2_500)),
            "  c3: claim at 2s, no answer after 500ms\n"
        );
        assert_eq!(actor_name(crate::simulation::LOCK_CLIENT_FIRST + 2), "l2");
        assert_eq!(actor_name(crate::simulation::WATCHER_FIRST + 3), "w3");
    }
}
