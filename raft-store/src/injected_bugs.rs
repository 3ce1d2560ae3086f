//! Known bugs that the deterministic simulation switches on to prove its
//! checkers catch them. Nothing in the node, its command line or its
//! configuration can turn one on: only a test calling [`enable`].
//!
//! Switches are per thread. A simulation runs every member of its cluster
//! on the thread that drives it, so a bug enabled by one simulation never
//! leaks into another running beside it in the same test process.

use std::cell::Cell;

/// A deliberate defect, each once a real bug in some replicated store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectedBug {
    /// A member answers linearizable reads from its own state whenever it
    /// believes it leads, without confirming leadership with a quorum.
    StaleLeaderReads,
    /// Log appends are acknowledged to Raft before they are synced, and
    /// counted as on disk: a follower's, and a leader's, which then waits
    /// for no background sync. A crash loses entries the leader counted
    /// towards a quorum.
    AcknowledgeBeforeSync,
    /// Apply ignores the dedup table, so a retried command applies twice.
    SkipDedup,
    /// Apply judges lease validity (fences, acquisitions, renewals,
    /// releases) with the applying member's clock at the moment it reads
    /// the lease, instead of the command's time: members that apply an
    /// entry later (a lagging follower, a restarted member replaying its
    /// log) judge it differently from the leader.
    LeaseJudgedByLocalClock,
    /// The leader's sweep of claims whose visibility ran out drops the
    /// messages instead of counting the delivery as failed, so a consumer
    /// that died mid-delivery loses its message.
    DropOverdueClaims,
    /// The member's permission check of a copy looks at its source only,
    /// so a caller who may read one namespace copies into one it may not
    /// write.
    SkipCopyDestinationCheck,
    /// Apply ignores the grants revision a checked write carries, so a
    /// write checked just before its caller lost a permission applies
    /// after.
    IgnoreGrantsRevision,
    /// A leader's own appends, which it syncs in the background, count as
    /// on disk as soon as they are written: apply and the commit index
    /// sent to followers no longer wait for the sync, so a crash loses
    /// entries already acknowledged.
    CommitBeforeLeaderSync,
    /// A member that led before it stopped reads its saved vote back as it
    /// was, so openraft resumes leading the same term at once, and writes
    /// new entries under the log ids of ones a crash took from it but a
    /// follower holds.
    ResumeLeadingAfterRestart,
    /// A follower serves a linearizable read from its own state as soon as
    /// the leader answers a read index, without waiting to apply that far.
    FollowerReadBeforeApply,
    /// A follower's read arriving while a read-index call to the leader is
    /// under way is given the index of the call before, which was asked
    /// before the read began and may miss a write acknowledged since.
    FollowerReadReusesIndex,
}

impl InjectedBug {
    pub const ALL: [InjectedBug; 11] = [
        InjectedBug::StaleLeaderReads,
        InjectedBug::AcknowledgeBeforeSync,
        InjectedBug::SkipDedup,
        InjectedBug::LeaseJudgedByLocalClock,
        InjectedBug::DropOverdueClaims,
        InjectedBug::SkipCopyDestinationCheck,
        InjectedBug::IgnoreGrantsRevision,
        InjectedBug::CommitBeforeLeaderSync,
        InjectedBug::ResumeLeadingAfterRestart,
        InjectedBug::FollowerReadBeforeApply,
        InjectedBug::FollowerReadReusesIndex,
    ];

    fn bit(self) -> u16 {
        match self {
            InjectedBug::StaleLeaderReads => 1,
            InjectedBug::AcknowledgeBeforeSync => 2,
            InjectedBug::SkipDedup => 4,
            InjectedBug::LeaseJudgedByLocalClock => 8,
            InjectedBug::DropOverdueClaims => 16,
            InjectedBug::SkipCopyDestinationCheck => 32,
            InjectedBug::IgnoreGrantsRevision => 64,
            InjectedBug::CommitBeforeLeaderSync => 128,
            InjectedBug::ResumeLeadingAfterRestart => 256,
            InjectedBug::FollowerReadBeforeApply => 512,
            InjectedBug::FollowerReadReusesIndex => 1024,
        }
    }
}

thread_local! {
    static ENABLED: Cell<u16> = const { Cell::new(0) };
    static LOCAL_CLOCK: Cell<Option<fn() -> u64>> = const { Cell::new(None) };
}

/// The wall clock `LeaseJudgedByLocalClock` reads (test-only; this crate
/// has no clock of its own).
pub fn set_local_clock(clock: fn() -> u64) {
    LOCAL_CLOCK.with(|local| local.set(Some(clock)));
}

/// The time `apply` judges leases by: the command's, unless the bug is on.
pub(crate) fn lease_time(command_micros: u64) -> u64 {
    if !enabled(InjectedBug::LeaseJudgedByLocalClock) {
        return command_micros;
    }
    LOCAL_CLOCK
        .with(|local| local.get())
        .map_or(command_micros, |clock| clock())
}

/// Turns `bug` on for this thread (test-only).
pub fn enable(bug: InjectedBug) {
    ENABLED.with(|enabled| enabled.set(enabled.get() | bug.bit()));
}

/// Turns every bug off for this thread.
pub fn disable_all() {
    ENABLED.with(|enabled| enabled.set(0));
}

/// Whether `bug` is on for this thread; false in every production process.
pub fn enabled(bug: InjectedBug) -> bool {
    ENABLED.with(|enabled| enabled.get() & bug.bit() != 0)
}
