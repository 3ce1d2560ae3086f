//! The queue's clients in a simulated run: producers enqueue uniquely
//! named messages (some delayed, each with a short retry schedule and an
//! undelivered key), consumers claim them and finish each as delivered, as
//! failed, or not at all (a consumer that died mid-delivery), until the
//! queue has been quiet for a while after the workload.

use std::time::Duration;

use lode_client::protocol::Encoding;
use lode_client::queue::Message;
use lode_client::Client;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::history::{self, Known, QueueEvent, SharedHistory};
use crate::workload::{client_options, is_definite_refusal};

/// Redelivery delays of every message: three deliveries in all.
pub const BACKOFF_SCHEDULE: [Duration; 2] = [Duration::from_millis(50), Duration::from_millis(150)];
/// How long a claimed delivery stays invisible.
pub const VISIBILITY: Duration = Duration::from_millis(700);
/// A consumer stops once the cluster has answered "nothing due" for this
/// long without a break after the workload: longer than a visibility, the
/// leader's sweep interval and the last retry delay together.
pub const QUIET_TIME: Duration = Duration::from_secs(4);
/// A claim answered slower than this was retried by the SDK through a
/// time without a leader.
const CLAIM_ANSWER_SLOW: Duration = Duration::from_millis(500);

/// The key (in the `deno` namespace) that receives `payload` when every
/// delivery of it fails.
pub fn undelivered_key(payload: &str) -> String {
    format!("undelivered/{payload}")
}

#[derive(Clone, Debug)]
pub struct QueuePlan {
    pub client: usize,
    pub seed: u64,
    /// How long producers enqueue; consumers go on until the queue is quiet.
    pub until: Duration,
}

fn client(endpoints: Vec<String>) -> Client {
    match Client::with_options(endpoints, client_options()) {
        Ok(client) => client,
        Err(error) => panic!("client options are valid: {error}"),
    }
}

/// Enqueues messages until `plan.until`.
pub async fn run_producer(plan: QueuePlan, endpoints: Vec<String>, history: SharedHistory) {
    let started = tokio::time::Instant::now();
    let mut random = StdRng::seed_from_u64(plan.seed);
    let queue = client(endpoints).queue();
    let mut sent = 0u64;
    while started.elapsed() < plan.until {
        sent += 1;
        let payload = format!("q{}.{sent}", plan.client);
        let delay = if random.gen_bool(0.3) {
            Duration::from_millis(random.gen_range(1..300))
        } else {
            Duration::ZERO
        };
        let message = Message::new(payload.clone().into_bytes(), Encoding::Bytes)
            .delay(delay)
            .backoff_schedule(BACKOFF_SCHEDULE.to_vec())
            .keys_if_undelivered(vec![undelivered_key(&payload).into_bytes()]);
        let slot = history::record_queue(
            &history,
            QueueEvent::Enqueued {
                payload,
                known: Known::Unknown,
            },
        );
        history::calling(&history, plan.client, format!("enqueue {}", payload_of(&message)));
        let answer = queue.enqueue(&message).await;
        history::answered(&history, plan.client, format!("{answer:?}"));
        let known = match answer {
            Ok(_) => Known::Acknowledged,
            Err(error) if is_definite_refusal(&error) => Known::Refused,
            Err(_) => Known::Unknown,
        };
        history::answer_enqueue(&history, slot, known);
        tokio::time::sleep(Duration::from_millis(random.gen_range(20..150))).await;
    }
}

/// Claims and finishes messages until, after `plan.until`, every claim for
/// [`QUIET_TIME`] found nothing due. A failed claim restarts the quiet
/// time: an unavailable cluster is not an empty queue.
pub async fn run_consumer(plan: QueuePlan, endpoints: Vec<String>, history: SharedHistory) {
    let started = tokio::time::Instant::now();
    let mut random = StdRng::seed_from_u64(plan.seed);
    let queue = match client(endpoints).queue().with_visibility(VISIBILITY) {
        Ok(queue) => queue,
        Err(error) => panic!("the visibility is within its limit: {error}"),
    };
    let mut quiet_since: Option<tokio::time::Instant> = None;
    loop {
        let now = tokio::time::Instant::now();
        let quiet_enough = quiet_since.is_some_and(|since| now.duration_since(since) > QUIET_TIME);
        if now.duration_since(started) > plan.until && quiet_enough {
            return;
        }
        let invoked = history.borrow_mut().tick();
        history::calling(&history, plan.client, "claim");
        let claimed = queue.claim().await;
        history::answered(&history, plan.client, describe_claim(&claimed));
        let delivery = match claimed {
            Ok(Some(delivery)) => delivery,
            Ok(None) => {
                // A slow answer means the SDK waited out a cluster without a
                // leader; claims that ran out meanwhile are requeued only by
                // the next leader's sweep, so the quiet time starts again.
                let answered_at = tokio::time::Instant::now();
                if answered_at.duration_since(now) > CLAIM_ANSWER_SLOW {
                    quiet_since = Some(answered_at);
                }
                quiet_since.get_or_insert(now);
                tokio::time::sleep(Duration::from_millis(random.gen_range(10..60))).await;
                continue;
            }
            Err(_) => {
                quiet_since = None;
                tokio::time::sleep(Duration::from_millis(random.gen_range(10..60))).await;
                continue;
            }
        };
        quiet_since = None;
        let (payload, attempt) = record_claimed(&history, &delivery, invoked);
        let choice = random.gen_range(0..100);
        if choice < 10 {
            // Abandoned: the claim runs out and the leader requeues it.
            continue;
        }
        let delivered = choice >= 30;
        history::calling(
            &history,
            plan.client,
            format!("finish {payload} attempt {attempt} (delivered: {delivered})"),
        );
        let finished = queue.finish(&delivery, delivered).await;
        history::answered(&history, plan.client, format!("{finished:?}"));
        record_finished(&history, payload, attempt, delivered, finished.ok());
    }
}

/// Records a delivery a consumer received; returns its payload and attempt.
fn record_claimed(
    history: &SharedHistory,
    delivery: &lode_client::queue::QueueDelivery,
    invoked: crate::history::Tick,
) -> (String, u32) {
    let payload = String::from_utf8_lossy(&delivery.payload).into_owned();
    let _ = history::record_queue(
        history,
        QueueEvent::Claimed {
            payload: payload.clone(),
            attempt: delivery.attempt,
            invoked,
        },
    );
    (payload, delivery.attempt)
}

/// Records how a consumer ended a delivery.
fn record_finished(
    history: &SharedHistory,
    payload: String,
    attempt: u32,
    delivered: bool,
    answer: Option<lode_client::queue::FinishedAs>,
) {
    let completed = history.borrow_mut().tick();
    let _ = history::record_queue(
        history,
        QueueEvent::Finished {
            completed,
            payload,
            attempt,
            delivered,
            answer,
        },
    );
}

/// A consumer through the SDK's `Queue::listen`: its handler fails some
/// deliveries and outlives the visibility on others; it stops once no
/// delivery came, and no call failed, for twice [`QUIET_TIME`] after
/// `plan.until`.
///
/// `listen` claims and finishes inside the SDK, so this consumer records
/// its deliveries without the claim's send time and its finishes without
/// the cluster's answer.
pub async fn run_listener(plan: QueuePlan, endpoints: Vec<String>, history: SharedHistory) {
    let started = tokio::time::Instant::now();
    let random = std::rc::Rc::new(std::cell::RefCell::new(StdRng::seed_from_u64(plan.seed)));
    let queue = match client(endpoints).queue().with_visibility(VISIBILITY) {
        Ok(queue) => queue,
        Err(error) => panic!("the visibility is within its limit: {error}"),
    };
    let last_activity = std::rc::Rc::new(std::cell::Cell::new(started));
    loop {
        let handler = |delivery: lode_client::queue::QueueDelivery| {
            let (history, random, last_activity) = (history.clone(), random.clone(), last_activity.clone());
            async move {
                last_activity.set(tokio::time::Instant::now());
                let (payload, attempt) = record_claimed(&history, &delivery, CLAIM_SENT_UNKNOWN);
                history::calling(&history, plan.client, format!("handling {payload} attempt {attempt}"));
                let choice = random.borrow_mut().gen_range(0..100);
                if choice < 10 {
                    // Outlives the visibility: `listen` fails the delivery.
                    tokio::time::sleep(VISIBILITY * 2).await;
                }
                let delivered = choice >= 30;
                record_finished(&history, payload, attempt, delivered, None);
                last_activity.set(tokio::time::Instant::now());
                if delivered {
                    Ok(())
                } else {
                    Err("the handler failed this delivery on purpose")
                }
            }
        };
        let quiet = async {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let now = tokio::time::Instant::now();
                if now.duration_since(started) > plan.until && now.duration_since(last_activity.get()) > QUIET_TIME * 2
                {
                    return;
                }
            }
        };
        history::calling(&history, plan.client, "listen");
        tokio::select! {
            biased;
            () = quiet => return,
            listened = queue.listen(handler) => {
                history::answered(&history, plan.client, format!("listen ended: {listened:?}"));
                if listened.is_err() {
                    last_activity.set(tokio::time::Instant::now());
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// A message's payload as text, for the activity report.
fn payload_of(message: &Message) -> String {
    String::from_utf8_lossy(&message.payload).into_owned()
}

/// A claim's answer in words, for the activity report.
fn describe_claim(claimed: &Result<Option<lode_client::queue::QueueDelivery>, lode_client::LodeError>) -> String {
    match claimed {
        Ok(Some(delivery)) => format!(
            "delivery of {} attempt {}",
            String::from_utf8_lossy(&delivery.payload),
            delivery.attempt
        ),
        Ok(None) => "nothing due".to_owned(),
        Err(error) => format!("failed: {error}"),
    }
}

/// The `invoked` tick of a delivery whose claim's send time is unknown.
pub const CLAIM_SENT_UNKNOWN: crate::history::Tick = 0;
