//! Who a member is and how it enters its cluster, from its flags: given
//! outright (`--id`, `--peers`, `--join`), or derived from a Kubernetes
//! StatefulSet pod's name and address templates (`--id-from-hostname`,
//! `--peer-advertise-template`, `--founders`), so a pod needs no shell
//! entrypoint to work out its own arguments.

use std::collections::BTreeMap;

use lode_node::config::Membership;

use super::{parse_peers, NodeArguments};

/// The placeholder a template replaces with a member's ordinal.
const ORDINAL_PLACEHOLDER: &str = "{ordinal}";
/// Most founders `--founders` may name: more voters only slow every write.
pub const FOUNDERS_MAX: u64 = 9;

/// A member's id, addresses and way into its cluster.
#[derive(Debug)]
pub struct Identity {
    pub id: u64,
    /// Its peer address (`None`: the bound one).
    pub peer_advertise: Option<String>,
    /// Its client address (`None`: the bound one).
    pub advertise: Option<String>,
    pub membership: Membership,
    /// Where it joins again once its cluster no longer lists it.
    pub rejoin_through: Option<String>,
}

impl Identity {
    /// The identity `arguments` give a member on the host `hostname`.
    pub fn of(arguments: &NodeArguments, hostname: &str) -> Result<Self, String> {
        let id = match arguments.id {
            Some(id) => id,
            None => ordinal_of_hostname(hostname)? + 1,
        };
        let ordinal = id - 1;
        let peer_advertise = match &arguments.peer_advertise_template {
            Some(template) => Some(fill(template, ordinal, "--peer-advertise-template")?),
            None => arguments.peer_advertise.clone(),
        };
        let advertise = match &arguments.advertise_template {
            Some(template) => Some(fill(template, ordinal, "--advertise-template")?),
            None => arguments.advertise.clone(),
        };
        let founders = match (arguments.founders, &arguments.peer_advertise_template) {
            (Some(count), Some(template)) => Some(founders(template, count)?),
            _ => None,
        };
        // Where a member joins: --join, or else the first founder.
        let seed = (arguments.join.clone())
            .or_else(|| founders.as_ref().and_then(|founders| founders.values().next().cloned()));
        let membership = match (&founders, &arguments.peers, &seed) {
            (Some(founders), _, _) if founders.contains_key(&id) => Membership::Bootstrap(founders.clone()),
            (Some(_), _, Some(seed)) => Membership::Join(seed.clone()),
            (None, Some(peers), None) => {
                let peers = parse_peers(peers)?;
                if !peers.contains_key(&id) {
                    return Err(format!("--peers does not name this node's --id {id}"));
                }
                Membership::Bootstrap(peers)
            }
            (None, None, Some(seed)) => Membership::Join(seed.clone()),
            _ => Membership::Existing,
        };
        let rejoin_through = match arguments.rejoin_when_removed {
            false => None,
            true => Some(seed.ok_or_else(|| {
                "--rejoin-when-removed needs --join or --founders: a member to join again through".to_owned()
            })?),
        };
        Ok(Self {
            id,
            peer_advertise,
            advertise,
            membership,
            rejoin_through,
        })
    }

    /// The identity as JSON, for `lode node --print-identity`.
    pub fn to_json(&self) -> serde_json::Value {
        let membership = match &self.membership {
            Membership::Bootstrap(founders) => serde_json::json!({ "found": founders }),
            Membership::Join(seed) => serde_json::json!({ "join": seed }),
            Membership::Existing => serde_json::json!("existing"),
        };
        serde_json::json!({
            "id": self.id,
            "peer_advertise": self.peer_advertise,
            "advertise": self.advertise,
            "membership": membership,
            "rejoin_through": self.rejoin_through,
        })
    }
}

/// The ordinal a StatefulSet gives its pod as the last `-` part of its
/// name (`lode-2` is ordinal 2); a domain after the name is ignored.
pub fn ordinal_of_hostname(hostname: &str) -> Result<u64, String> {
    let name = hostname.split('.').next().unwrap_or_default();
    name.rsplit_once('-')
        .and_then(|(_, ordinal)| ordinal.parse::<u64>().ok())
        .filter(|ordinal| *ordinal < u64::MAX)
        .ok_or_else(|| {
            format!("--id-from-hostname: HOSTNAME {hostname:?} is not a StatefulSet pod's name (NAME-ORDINAL)")
        })
}

/// `template` with `{ordinal}` replaced; refused without the placeholder,
/// since every member would then advertise the same address.
fn fill(template: &str, ordinal: u64, flag: &str) -> Result<String, String> {
    if !template.contains(ORDINAL_PLACEHOLDER) {
        return Err(format!("{flag} {template:?} has no {ORDINAL_PLACEHOLDER}"));
    }
    let address = template.replace(ORDINAL_PLACEHOLDER, &ordinal.to_string());
    match address.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(address),
        _ => Err(format!("{flag} {template:?} does not make HOST:PORT")),
    }
}

/// The founders' ids and peer addresses: ordinals 0 to `count` - 1.
fn founders(template: &str, count: u64) -> Result<BTreeMap<u64, String>, String> {
    if count > FOUNDERS_MAX {
        return Err(format!("--founders {count} is over {FOUNDERS_MAX} (founders_max)"));
    }
    (0..count)
        .map(|ordinal| Ok((ordinal + 1, fill(template, ordinal, "--peer-advertise-template")?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_come_from_a_pod_name_or_the_error_says_why_not() {
        assert_eq!(ordinal_of_hostname("lode-0"), Ok(0));
        assert_eq!(ordinal_of_hostname("my-lode-12"), Ok(12));
        assert_eq!(ordinal_of_hostname("lode-3.lode-peers.default.svc"), Ok(3));
        for bad in ["", "lode", "lode-", "lode-x", "-"] {
            let error = ordinal_of_hostname(bad).expect_err(bad);
            assert!(error.contains("HOSTNAME"), "{error}");
        }
    }

    #[test]
    fn templates_need_the_placeholder_and_make_addresses() {
        let template = "lode-{ordinal}.lode-peers.ns.svc:7001";
        assert_eq!(fill(template, 2, "--t"), Ok("lode-2.lode-peers.ns.svc:7001".to_owned()));
        assert!(fill("lode-0.peers:7001", 0, "--t")
            .expect_err("no placeholder")
            .contains("{ordinal}"));
        assert!(fill("lode-{ordinal}", 0, "--t")
            .expect_err("no port")
            .contains("HOST:PORT"));
        let founding = founders(template, 3).expect("founders");
        assert_eq!(founding.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(
            founding.get(&3).map(String::as_str),
            Some("lode-2.lode-peers.ns.svc:7001")
        );
        assert!(founders(template, FOUNDERS_MAX + 1)
            .expect_err("too many")
            .contains("founders_max"));
    }
}
