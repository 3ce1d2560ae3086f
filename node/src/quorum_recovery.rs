//! `lode node --force-new-cluster`: recovery from the loss of a quorum. On
//! a surviving voter, before Raft starts, the membership becomes this
//! member alone, keeping every entry it holds (`lode_raft_store::recovery`),
//! under a new cluster id; the operator then adds fresh members back.
//!
//! It refuses to act on a member that was no voter (its log may lack
//! committed entries), and leaves the membership alone when a quorum of
//! the current voters answers: the flag left on a service's command line
//! after the recovery, or given while the cluster is healthy, then does
//! nothing but warn.

use std::collections::BTreeMap;
use std::time::Duration;

use lode_raft_store::recovery::{effective_membership, force_single_voter, ForceError, ForcePlan};
use lode_raft_store::{LogStore, Member, SelectedEngine, StateMachineStore};
use openraft::storage::RaftLogStorage;

use crate::cluster_identity::founding_cluster_id;
use crate::config::NodeConfig;
use crate::network::PeerConnections;

/// How long each other voter has to answer before it counts as lost.
const VOTER_PING_TIMEOUT_MS: u64 = 1_000;

/// Rewrites the membership to this member alone when the cluster has lost
/// its quorum; see the module's documentation.
pub async fn force_new_cluster(
    config: &NodeConfig,
    log: &mut LogStore<SelectedEngine>,
    state: &mut StateMachineStore<SelectedEngine>,
    peers: &PeerConnections,
) -> Result<(), anyhow::Error> {
    let no_state = || {
        anyhow::anyhow!(
            "--force-new-cluster: member {} holds no cluster state in {}; recover from a member that has it",
            config.id,
            config.data_dir.display()
        )
    };
    let old_cluster = log.cluster_id()?.ok_or_else(no_state)?;
    let membership = match effective_membership(log, state).await {
        Err(ForceError::NoState) => return Err(no_state()),
        other => other?,
    };
    let voters: Vec<u64> = membership.voter_ids().collect();
    if voters == [config.id] {
        tracing::info!("--force-new-cluster: this member already is the only voter; nothing to do");
        return Ok(());
    }
    if !voters.contains(&config.id) {
        anyhow::bail!(
            "--force-new-cluster: member {} is not a voter (the voters are {voters:?}); recover from a voter",
            config.id
        );
    }
    let others: Vec<(u64, String)> = voters
        .iter()
        .filter(|voter| **voter != config.id)
        .filter_map(|voter| Some((*voter, membership.get_node(voter)?.peer_address.clone())))
        .collect();
    let timeout = Duration::from_millis(VOTER_PING_TIMEOUT_MS);
    let answering = peers
        .answering(others, lode_client::protocol::ClusterId(old_cluster), timeout)
        .await;
    if answering.len() + 1 > voters.len() / 2 {
        tracing::warn!(
            ?voters,
            ?answering,
            "--force-new-cluster: a quorum of the voters answers, so the membership is left as it is; \
             remove the flag"
        );
        return Ok(());
    }
    let last_index = log.get_log_state().await?.last_log_id.map_or(0, |log_id| log_id.index);
    let member = Member {
        peer_address: config.advertise.peer.clone(),
        client_address: config.advertise.client.clone(),
    };
    let cluster_id = founding_cluster_id(
        &format!(
            "{}\nforced from {old_cluster} after index {last_index}",
            config.cluster_name
        ),
        &BTreeMap::from([(config.id, member.peer_address.clone())]),
    );
    let plan = ForcePlan {
        member_id: config.id,
        member,
        cluster_id: cluster_id.0,
    };
    let log_id = force_single_voter(log, &plan).await?;
    tracing::warn!(
        member = config.id,
        lost = ?voters,
        index = log_id.index,
        cluster = %cluster_id,
        "--force-new-cluster: this member is now the only voter of a new cluster, with every entry it held; \
         add fresh members with `lode cluster add`"
    );
    Ok(())
}
