//! `lode cluster scale --replicas N`: the step a StatefulSet's scale-down
//! needs before the pods go. Members with ids above N are removed, highest
//! first and one at a time, each removal committed before the next; a
//! scale that would leave the members kept without a quorum is refused
//! before anything is removed. Scaling up needs nothing here: new pods
//! join as learners and are promoted once they keep up.

use lode_client::protocol::ClusterStatus;
use lode_client::{Client, LodeError};

/// Removes every member with an id above `replicas`; returns the status
/// after the last removal.
pub async fn scale(client: &Client, replicas: u64) -> Result<ClusterStatus, LodeError> {
    if replicas == 0 {
        return Err(LodeError::Invalid(
            "--replicas must be at least 1: a cluster keeps at least one voter".to_owned(),
        ));
    }
    let mut status = client.cluster_status().await?;
    check_quorum_kept(&status, replicas)?;
    let mut removing: Vec<u64> = status
        .members
        .iter()
        .map(|member| member.id)
        .filter(|id| *id > replicas)
        .collect();
    removing.sort_unstable_by(|a, b| b.cmp(a));
    if removing.is_empty() {
        eprintln!("lode: no member has an id above {replicas}; nothing to remove");
    }
    for id in removing {
        status = client.remove_member(id).await?;
        eprintln!("lode: removed member {id}");
    }
    Ok(status)
}

/// Refuses when the voters with ids up to `replicas` would be none, or
/// those of them that answer no majority of them.
fn check_quorum_kept(status: &ClusterStatus, replicas: u64) -> Result<(), LodeError> {
    let kept: Vec<_> = status
        .members
        .iter()
        .filter(|member| member.voter && member.id <= replicas)
        .collect();
    if kept.is_empty() {
        return Err(LodeError::Invalid(format!(
            "--replicas {replicas} keeps no voter (the voters are {})",
            voter_list(status)
        )));
    }
    let answering = kept.iter().filter(|member| member.applied_index.is_some()).count();
    if answering <= kept.len() / 2 {
        return Err(LodeError::Unavailable(format!(
            "refusing to scale to {replicas}: of the {} voters kept only {answering} answer, no quorum; \
             bring members back first",
            kept.len()
        )));
    }
    Ok(())
}

fn voter_list(status: &ClusterStatus) -> String {
    let voters: Vec<String> = status
        .members
        .iter()
        .filter(|member| member.voter)
        .map(|member| member.id.to_string())
        .collect();
    voters.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use lode_client::protocol::MemberStatus;

    fn status(members: &[(u64, bool, bool)]) -> ClusterStatus {
        ClusterStatus {
            cluster_id: None,
            answered_by: 1,
            leader: Some(1),
            term: 1,
            members: members
                .iter()
                .map(|(id, voter, answers)| MemberStatus {
                    id: *id,
                    address: String::new(),
                    peer_address: String::new(),
                    voter: *voter,
                    matched_index: None,
                    applied_index: answers.then_some(1),
                })
                .collect(),
            applied_index: 1,
            last_log_index: None,
            snapshot_index: None,
            purged_index: None,
            expired_awaiting_sweep: 0,
            quorum_ack_ms: None,
        }
    }

    #[test]
    fn a_scale_keeping_no_quorum_is_refused() {
        let healthy = status(&[
            (1, true, true),
            (2, true, true),
            (3, true, true),
            (4, true, true),
            (5, true, true),
        ]);
        assert!(check_quorum_kept(&healthy, 3).is_ok());
        assert!(check_quorum_kept(&healthy, 1).is_ok());
        // Two of the three voters kept are down.
        let degraded = status(&[
            (1, true, true),
            (2, true, false),
            (3, true, false),
            (4, true, true),
            (5, true, true),
        ]);
        let error = check_quorum_kept(&degraded, 3).expect_err("no quorum kept");
        assert!(error.to_string().contains("only 1 answer"), "{error}");
        // Only learners kept.
        let learners = status(&[(1, false, true), (2, true, true)]);
        assert!(check_quorum_kept(&learners, 1)
            .expect_err("no voter")
            .to_string()
            .contains("keeps no voter"));
    }
}
