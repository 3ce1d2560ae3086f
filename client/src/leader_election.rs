//! Leader election for operators and controllers, fenced by the store.
//!
//! A candidate campaigns for one lease; the winner renews it in the
//! background and writes through `Leadership::cas_fenced`, which the
//! cluster applies only while the lease is still held with the token it
//! was granted under. Kubernetes' Lease objects (client-go's and kube-rs's
//! elections) only tell a leader it should stop; a leader paused past its
//! lease (a GC pause, a stopped VM, SIGSTOP) still writes when it wakes.
//! Here that write is refused with `lease_lost`, whatever the old leader
//! believes.
//!
//! Loss is reported as soon as it is known: a renewal answered
//! `lease_lost`, or the lease's term passed on this process's clock
//! without a renewal that succeeded (counted from before the last
//! successful renewal was sent, so never later than the cluster's).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::kv::{Kv, SetBuilder};
use crate::LodeError;

/// The shortest lease an election takes: renewals run three times per
/// term, and each needs a round trip to the leader.
pub const ELECTION_TTL_MS_MIN: u64 = 300;
/// How often a candidate asks again while another holds the lease, at
/// most.
pub const CAMPAIGN_RETRY_MS_MAX: u64 = 1_000;

/// One election: a lease key in a namespace, and this candidate's name.
#[derive(Clone, Debug)]
pub struct LeaderElection {
    kv: Kv,
    key: Vec<u8>,
    holder: String,
    ttl: Duration,
}

impl LeaderElection {
    /// An election for the lease `key` of `kv`'s namespace, in which this
    /// process campaigns as `holder` (unique per candidate: a pod's name)
    /// for terms of `ttl` (at least `ELECTION_TTL_MS_MIN`).
    pub fn new(kv: Kv, key: impl AsRef<[u8]>, holder: impl Into<String>, ttl: Duration) -> Result<Self, LodeError> {
        if ttl < Duration::from_millis(ELECTION_TTL_MS_MIN) {
            return Err(LodeError::Invalid(format!(
                "election ttl {ttl:?} is under {ELECTION_TTL_MS_MIN} ms (election_ttl_ms_min)"
            )));
        }
        Ok(Self {
            kv,
            key: key.as_ref().to_vec(),
            holder: holder.into(),
            ttl,
        })
    }

    /// Waits until this candidate holds the lease, then renews it in the
    /// background. Returns early only on an error no retry mends
    /// (unauthorized, forbidden, invalid).
    pub async fn campaign(&self) -> Result<Leadership, LodeError> {
        let retry = (self.ttl / 4).min(Duration::from_millis(CAMPAIGN_RETRY_MS_MAX));
        loop {
            let sent = Instant::now();
            match self.kv.lease(&self.key, self.holder.clone(), self.ttl).await {
                Ok(lease) => {
                    return Ok(Leadership::start(
                        self.clone(),
                        lease.token,
                        sent + lease.ttl,
                        lease.ttl,
                    ))
                }
                // Another candidate holds it; an ambiguous grant has expired by now.
                Err(error) if error.is_version_conflict() || error.is_ambiguous_mutation() => {}
                Err(error) if error.is_retryable() || matches!(error, LodeError::Timeout(_)) => {
                    tracing::debug!(%error, "campaign attempt failed; trying again");
                }
                Err(error) => return Err(error),
            }
            tokio::time::sleep(retry).await;
        }
    }
}

/// This candidate's term as leader, from its grant until it is lost or
/// resigned. Dropping it stops the renewals (the lease then expires).
#[derive(Debug)]
pub struct Leadership {
    election: LeaderElection,
    token: u64,
    /// The local instant the lease ends unless renewed.
    deadline: Arc<Mutex<Instant>>,
    leading: watch::Receiver<bool>,
    renewer: JoinHandle<()>,
}

impl Leadership {
    fn start(election: LeaderElection, token: u64, deadline: Instant, ttl: Duration) -> Self {
        let deadline = Arc::new(Mutex::new(deadline));
        let (report, leading) = watch::channel(true);
        let renewer = tokio::spawn(renew(election.clone(), token, ttl, deadline.clone(), report));
        Self {
            election,
            token,
            deadline,
            leading,
            renewer,
        }
    }

    /// The fencing token: the lease's grant index. Every write this leader
    /// makes should carry it (`cas_fenced`).
    pub fn token(&self) -> u64 {
        self.token
    }

    /// Whether this process still believes it leads. Only a hint for
    /// skipping work: the fence on each write is what keeps a stale leader
    /// out.
    pub fn is_leading(&self) -> bool {
        *self.leading.borrow() && Instant::now() < self.deadline_now()
    }

    /// A write of `key` in `kv`'s namespace that applies only while this
    /// leadership's lease is held with its token; set a precondition and
    /// `.commit()`. After the lease was lost it fails with `lease_lost`.
    pub fn cas_fenced(&self, kv: &Kv, key: impl AsRef<[u8]>) -> SetBuilder {
        kv.cas_fenced(key, self.election.kv.namespace(), &self.election.key, self.token)
    }

    /// Resolves once the leadership is lost (at once if it already is).
    pub async fn lost(&self) {
        let mut leading = self.leading.clone();
        let deadline_passed = async {
            loop {
                let deadline = self.deadline_now();
                if Instant::now() >= deadline {
                    return;
                }
                tokio::time::sleep_until(deadline).await;
            }
        };
        tokio::select! {
            _ = leading.wait_for(|leading| !*leading) => {}
            () = deadline_passed => {}
        }
    }

    /// Changes to `true` (leading) and `false` (lost), for a task that
    /// watches rather than waits.
    pub fn watch(&self) -> watch::Receiver<bool> {
        self.leading.clone()
    }

    /// Steps down: stops renewing and releases the lease, so another
    /// candidate takes over at once instead of after the lease's term.
    /// True when the lease was still held and is now released.
    pub async fn resign(self) -> Result<bool, LodeError> {
        self.renewer.abort();
        let election = &self.election;
        election
            .kv
            .release(&election.key, election.holder.clone(), self.token)
            .await
    }

    fn deadline_now(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

/// Renews three times per term; reports loss on `lease_lost`, or once the
/// deadline passes without a renewal (a renewal still unanswered then
/// counts as failed).
async fn renew(
    election: LeaderElection,
    token: u64,
    ttl: Duration,
    deadline: Arc<Mutex<Instant>>,
    report: watch::Sender<bool>,
) {
    let period = ttl / 3;
    let retry = (ttl / 10).min(Duration::from_millis(200));
    let mut next = Instant::now() + period;
    loop {
        let current = *deadline.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        tokio::time::sleep_until(next.min(current)).await;
        let sent = Instant::now();
        let renewal = election
            .kv
            .renew_lease(&election.key, election.holder.clone(), token, ttl);
        match tokio::time::timeout_at(current, renewal).await {
            Ok(Ok(lease)) => {
                *deadline.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = sent + lease.ttl;
                next = sent + period;
            }
            Ok(Err(error)) if error.is_lease_lost() => {
                tracing::warn!(token, "leadership lost: the lease is no longer held with this token");
                let _ = report.send(false);
                return;
            }
            Ok(Err(error)) => {
                tracing::debug!(%error, "renewing the leadership failed; trying again");
                next = Instant::now() + retry;
            }
            Err(_) => {
                tracing::warn!(token, "leadership lost: the lease's term passed without a renewal");
                let _ = report.send(false);
                return;
            }
        }
    }
}
