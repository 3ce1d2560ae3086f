//! The lease workloads of `lode bench`: a lease acquired and released at
//! once (`lease`), and a lease each client holds and renews (`lease-renew`),
//! the steady load of a fleet of lock holders and elected leaders.

use std::time::Duration;

use lode_client::{Kv, LodeError};

/// The TTL of every lease the lease workloads take: long beside a renewal,
/// so a held lease lapses only when its client stops renewing.
pub const BENCH_LEASE_TTL: Duration = Duration::from_secs(10);

/// Acquires a lease on a key of this client's, then releases it: two writes.
pub async fn acquire_then_release(kv: &Kv, worker: usize, key: &str) -> Result<(), LodeError> {
    let holder = format!("bench-{worker}");
    let lease_key = format!("lease-{worker}-{key}");
    let lease = kv.lease(&lease_key, holder.clone(), BENCH_LEASE_TTL).await?;
    kv.release(&lease_key, holder, lease.token).await.map(|_| ())
}

/// One client's lease in `lease-renew`: a key of its own, taken before the
/// run starts, renewed by every request and released after the run.
#[derive(Debug)]
pub struct HeldLease {
    key: String,
    holder: String,
    /// None once a renewal found the lease lost: the next request takes it
    /// again.
    token: Option<u64>,
}

impl HeldLease {
    /// Takes the lease of client `worker` in run `run` (a random number, so
    /// a run never meets the leases of one before it that did not end
    /// cleanly).
    pub async fn acquire(kv: &Kv, run: u64, worker: usize) -> Result<Self, LodeError> {
        let key = format!("renew-{run:016x}-{worker}");
        let holder = format!("bench-{worker}");
        let lease = kv.lease(&key, holder.clone(), BENCH_LEASE_TTL).await?;
        Ok(Self {
            key,
            holder,
            token: Some(lease.token),
        })
    }

    /// One request: renews the lease, keeping its token. A lease found lost
    /// is an error, and is taken again by the next request, since a holder
    /// that lost its lock takes it again rather than renewing in vain.
    pub async fn renew(&mut self, kv: &Kv) -> Result<(), anyhow::Error> {
        let Some(token) = self.token else {
            let lease = kv.lease(&self.key, self.holder.clone(), BENCH_LEASE_TTL).await?;
            self.token = Some(lease.token);
            return Ok(());
        };
        match kv
            .renew_lease(&self.key, self.holder.clone(), token, BENCH_LEASE_TTL)
            .await
        {
            Ok(lease) if lease.token == token => Ok(()),
            Ok(lease) => anyhow::bail!(
                "renewing lease {} changed its fencing token from {token} to {}",
                self.key,
                lease.token
            ),
            Err(error) => {
                if error.is_lease_lost() {
                    self.token = None;
                }
                Err(error.into())
            }
        }
    }

    /// Releases the lease after the run, so its key is free at once.
    pub async fn release(self, kv: &Kv) -> Result<(), LodeError> {
        match self.token {
            Some(token) => kv.release(&self.key, self.holder, token).await.map(|_| ()),
            None => Ok(()),
        }
    }
}
