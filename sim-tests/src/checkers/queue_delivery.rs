//! Queue delivery: every acknowledged message ends, delivered or dead-
//! lettered; none is delivered that nobody enqueued; a message whose
//! delivery was acknowledged as done is not delivered to a claim sent
//! after that, nor dead-lettered; and nothing is left in the queue once
//! consumers drained it. (A claim sent earlier may answer later with an
//! older delivery whose visibility ran out meanwhile: at least once.)
//!
//! A finish whose answer was lost may or may not have applied: if it did
//! not, the claim runs out and the message comes again (or is
//! dead-lettered), so a message whose last event is such a finish has
//! ended only if nothing was left in the queue.

use std::collections::{BTreeMap, BTreeSet};

use lode_client::queue::FinishedAs;

use crate::history::{History, Known, QueueEvent, Tick};
use crate::queue_workload::CLAIM_SENT_UNKNOWN;

pub fn check(history: &History) -> Result<(), String> {
    let mut enqueued: BTreeMap<&str, Known> = BTreeMap::new();
    let mut done: BTreeMap<&str, Tick> = BTreeMap::new();
    // The attempt of a delivered finish whose answer was lost.
    let mut maybe_done: BTreeMap<&str, u32> = BTreeMap::new();
    let mut dead_lettered: BTreeSet<&str> = BTreeSet::new();
    let mut problems = Vec::new();
    for event in &history.queue {
        match event {
            QueueEvent::Enqueued { payload, known } => {
                enqueued.insert(payload, *known);
            }
            QueueEvent::Claimed {
                payload,
                attempt,
                invoked,
            } => {
                // The enqueue is recorded before it is sent, so a claim
                // always comes after it; a refused one cannot be claimed.
                if !matches!(
                    enqueued.get(payload.as_str()),
                    Some(Known::Acknowledged | Known::Unknown)
                ) {
                    problems.push(format!(
                        "{payload:?} was delivered (attempt {attempt}) but never enqueued"
                    ));
                }
                let sent_after_done = done.get(payload.as_str()).is_some_and(|done_at| done_at < invoked);
                if *invoked != CLAIM_SENT_UNKNOWN && sent_after_done {
                    problems.push(format!(
                        "{payload:?} was delivered again (attempt {attempt}) to a claim sent after a delivery was \
                         acknowledged as done"
                    ));
                }
                // A later delivery shows that finish did not apply; a late
                // answer to an older claim shows nothing.
                if maybe_done
                    .get(payload.as_str())
                    .is_some_and(|finished| finished < attempt)
                {
                    maybe_done.remove(payload.as_str());
                }
            }
            QueueEvent::Finished {
                completed,
                payload,
                delivered: true,
                answer: Some(FinishedAs::Delivered),
                ..
            } => {
                done.insert(payload, *completed);
            }
            QueueEvent::Finished {
                payload,
                attempt,
                delivered: true,
                answer: None,
                ..
            } => {
                maybe_done.insert(payload, *attempt);
            }
            QueueEvent::Finished { .. } => {}
            QueueEvent::DeadLetter { payload, written } => {
                if *written {
                    dead_lettered.insert(payload);
                }
            }
            QueueEvent::Leftover { payload } => {
                problems.push(format!("{payload:?} was still in the queue after consumers drained it"));
            }
        }
    }
    for payload in &dead_lettered {
        if done.contains_key(payload) {
            problems.push(format!(
                "{payload:?} was dead-lettered after a delivery was acknowledged as done"
            ));
        }
    }
    for (payload, known) in &enqueued {
        let ended = done.contains_key(payload) || dead_lettered.contains(payload) || maybe_done.contains_key(payload);
        if *known == Known::Acknowledged && !ended {
            problems.push(format!(
                "{payload:?} was enqueued (acknowledged) but neither delivered nor dead-lettered"
            ));
        }
    }
    match problems.first() {
        None => Ok(()),
        Some(first) => Err(format!("{first} ({} problems in all)", problems.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enqueued(payload: &str) -> QueueEvent {
        QueueEvent::Enqueued {
            payload: payload.to_owned(),
            known: Known::Acknowledged,
        }
    }

    /// Ticks in tests: each helper call takes the next one.
    fn tick() -> Tick {
        thread_local! { static NEXT: std::cell::Cell<Tick> = const { std::cell::Cell::new(0) }; }
        NEXT.with(|next| {
            next.set(next.get() + 1);
            next.get()
        })
    }

    fn claimed(payload: &str, attempt: u32) -> QueueEvent {
        QueueEvent::Claimed {
            payload: payload.to_owned(),
            attempt,
            invoked: tick(),
        }
    }

    fn finished(payload: &str, attempt: u32, delivered: bool, answer: Option<FinishedAs>) -> QueueEvent {
        QueueEvent::Finished {
            completed: tick(),
            payload: payload.to_owned(),
            attempt,
            delivered,
            answer,
        }
    }

    fn dead(payload: &str, written: bool) -> QueueEvent {
        QueueEvent::DeadLetter {
            payload: payload.to_owned(),
            written,
        }
    }

    fn history(queue: Vec<QueueEvent>) -> History {
        History {
            queue,
            ..History::default()
        }
    }

    #[test]
    fn delivered_and_dead_lettered_messages_end() {
        let events = vec![
            enqueued("a"),
            enqueued("b"),
            claimed("a", 1),
            finished("a", 1, false, Some(FinishedAs::Retrying { deliver_at_micros: 5 })),
            claimed("a", 2),
            finished("a", 2, true, None),
            claimed("a", 3),
            finished("a", 3, true, Some(FinishedAs::Delivered)),
            claimed("b", 1),
            dead("b", true),
        ];
        assert_eq!(check(&history(events)), Ok(()));
    }

    #[test]
    fn a_finish_whose_answer_was_lost_ends_a_message_unless_it_came_again() {
        let ended = vec![
            enqueued("a"),
            claimed("a", 1),
            finished("a", 1, true, None),
            dead("a", false),
        ];
        assert_eq!(check(&history(ended)), Ok(()));
        let came_again = vec![
            enqueued("a"),
            claimed("a", 1),
            finished("a", 1, true, None),
            claimed("a", 2),
            dead("a", false),
        ];
        assert!(check(&history(came_again)).is_err_and(|error| error.contains("neither delivered")));
    }

    #[test]
    fn a_late_answer_to_an_earlier_claim_is_at_least_once() {
        let sent_early = QueueEvent::Claimed {
            payload: "a".to_owned(),
            attempt: 1,
            invoked: 0,
        };
        let events = vec![
            enqueued("a"),
            claimed("a", 2),
            finished("a", 2, true, Some(FinishedAs::Delivered)),
            sent_early,
            finished("a", 1, true, Some(FinishedAs::NotClaimed)),
        ];
        assert_eq!(check(&history(events)), Ok(()));
    }

    #[test]
    fn a_late_answer_to_an_older_claim_does_not_undo_a_lost_finish() {
        let events = vec![
            enqueued("a"),
            claimed("a", 2),
            finished("a", 2, true, None),
            claimed("a", 1),
            finished("a", 1, true, Some(FinishedAs::NotClaimed)),
            dead("a", false),
        ];
        assert_eq!(check(&history(events)), Ok(()));
    }

    #[test]
    fn a_lost_message_is_caught() {
        let events = vec![enqueued("a"), claimed("a", 1), dead("a", false)];
        let error = check(&history(events)).expect_err("a lost message");
        assert!(error.contains("neither delivered nor dead-lettered"), "{error}");
    }

    #[test]
    fn redelivery_after_done_phantoms_and_leftovers_are_caught() {
        let again = vec![
            enqueued("a"),
            claimed("a", 1),
            finished("a", 1, true, Some(FinishedAs::Delivered)),
            claimed("a", 2),
        ];
        assert!(check(&history(again)).is_err_and(|error| error.contains("delivered again")));
        let phantom = vec![claimed("x", 1)];
        assert!(check(&history(phantom)).is_err_and(|error| error.contains("never enqueued")));
        let leftover = vec![
            enqueued("a"),
            claimed("a", 1),
            finished("a", 1, true, Some(FinishedAs::Delivered)),
            QueueEvent::Leftover {
                payload: "b".to_owned(),
            },
        ];
        assert!(check(&history(leftover)).is_err_and(|error| error.contains("still in the queue")));
        let both = vec![
            enqueued("a"),
            claimed("a", 1),
            finished("a", 1, true, Some(FinishedAs::Delivered)),
            dead("a", true),
        ];
        assert!(check(&history(both)).is_err_and(|error| error.contains("dead-lettered after")));
    }
}
