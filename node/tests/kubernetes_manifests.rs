//! The Kubernetes deployment under `k8s/`, checked without a cluster: what
//! every overlay renders holds the deployment's checklist, every pod's
//! exact arguments parse as `lode node` and name the member by DNS, and
//! the Dockerfile builds `lode` into an image that runs it as a non-root
//! user. (`.ci/check-manifests` validates the same output against
//! Kubernetes' schemas.)

mod support;

use std::process::Command;

use serde_json::Value;
use support::kubernetes::{only, render, MemberTemplate};

const OVERLAYS: [&str; 3] = ["overlays/dev", "overlays/production-3", "overlays/production-5"];
/// `handoff::HANDOFF_MS_MAX` plus the 5 s drain of calls in flight.
const SHUTDOWN_SECONDS_MAX: u64 = 2 + 5;

fn member_labels(template: &MemberTemplate) -> Value {
    template.statefulset["spec"]["template"]["metadata"]["labels"].clone()
}

/// True when `selector` (a matchLabels map) selects the member pods.
fn selects_members(selector: &Value, labels: &Value) -> bool {
    let Some(selector) = selector.as_object() else {
        return false;
    };
    !selector.is_empty() && selector.iter().all(|(key, value)| &labels[key] == value)
}

#[test]
fn every_overlay_renders_a_deployment_that_holds_the_checklist() {
    for overlay in OVERLAYS {
        let objects = render(overlay);
        let template = MemberTemplate::of(&objects);
        let labels = member_labels(&template);
        let spec = &template.statefulset["spec"];
        let pod = &spec["template"]["spec"];
        let container = &template.container;
        let context = |what: &str| format!("{overlay}: {what}");

        assert_eq!(
            spec["podManagementPolicy"],
            "Parallel",
            "{}",
            context("pods start together")
        );
        assert_eq!(
            template.environment().get("LODE_FOUNDERS").map(String::as_str),
            Some(template.replicas.to_string().as_str()),
            "{}",
            context("the first replicas found the cluster")
        );
        assert!(
            container.get("lifecycle").is_none(),
            "{}",
            context("no preStop hook (a restart is not a removal)")
        );
        assert!(spec["volumeClaimTemplates"]
            .as_array()
            .is_some_and(|claims| claims.len() == 1));
        // The volume's root is root's (group fsGroup): the member's 0700
        // data directory must be one it creates inside.
        let data_mount = container["volumeMounts"]
            .as_array()
            .and_then(|mounts| mounts.iter().find(|mount| mount["name"] == "data"))
            .and_then(|mount| mount["mountPath"].as_str())
            .expect("the data volume's mount")
            .to_owned();
        let data_dir = template.flag("data-dir").expect("--data-dir");
        assert!(
            data_dir.starts_with(&format!("{data_mount}/")),
            "{}",
            context("the data directory is inside the volume, not its root")
        );

        // Services: the peers' headless one publishes members not ready yet.
        let services: Vec<&Value> = objects.iter().filter(|object| object["kind"] == "Service").collect();
        let peers = services
            .iter()
            .find(|service| service["metadata"]["name"] == spec["serviceName"])
            .unwrap_or_else(|| panic!("{}", context("the StatefulSet's serviceName is a Service")));
        assert_eq!(
            peers["spec"]["clusterIP"],
            "None",
            "{}",
            context("the peer Service is headless")
        );
        assert_eq!(
            peers["spec"]["publishNotReadyAddresses"],
            true,
            "{}",
            context("peers find each other before ready")
        );
        let client = services
            .iter()
            .find(|service| service["metadata"]["name"] == "lode")
            .unwrap_or_else(|| panic!("{}", context("a client Service")));
        assert!(selects_members(&client["spec"]["selector"], &labels));
        assert_eq!(
            template.flag("join").as_deref(),
            Some(format!("lode.{}.svc:7001", template.namespace).as_str()),
            "{}",
            context("later members join through the client Service")
        );

        // Probes: liveness never depends on a quorum.
        assert_eq!(
            container["startupProbe"]["httpGet"]["path"],
            "/health",
            "{}",
            context("startup")
        );
        assert_eq!(
            container["livenessProbe"]["httpGet"]["path"],
            "/health",
            "{}",
            context("liveness")
        );
        assert_eq!(
            container["readinessProbe"]["httpGet"]["path"],
            "/ready",
            "{}",
            context("readiness")
        );
        for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
            assert_eq!(container[probe]["httpGet"]["port"], "http", "{}", context(probe));
            assert_eq!(container[probe]["httpGet"]["scheme"], "HTTPS", "{}", context(probe));
        }

        // Disruptions and placement.
        let budget = only(&objects, "PodDisruptionBudget");
        assert_eq!(
            budget["spec"]["maxUnavailable"],
            1,
            "{}",
            context("one member at a time")
        );
        assert!(selects_members(&budget["spec"]["selector"]["matchLabels"], &labels));
        let anti_affinity = &pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
        assert!(
            anti_affinity.as_array().is_some_and(|terms| terms.iter().any(|term| {
                term["topologyKey"] == "kubernetes.io/hostname"
                    && selects_members(&term["labelSelector"]["matchLabels"], &labels)
            })),
            "{}",
            context("required hostname anti-affinity")
        );
        assert!(pod["topologySpreadConstraints"]
            .as_array()
            .is_some_and(|constraints| constraints
                .iter()
                .any(|constraint| constraint["topologyKey"] == "topology.kubernetes.io/zone")));
        let grace = pod["terminationGracePeriodSeconds"].as_u64().expect("grace period");
        assert!(
            grace > SHUTDOWN_SECONDS_MAX,
            "{}",
            context("the grace period outlasts the handoff")
        );

        // Resources and a locked-down process.
        for kind in ["requests", "limits"] {
            assert!(container["resources"][kind]["memory"].is_string(), "{}", context(kind));
        }
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert!(pod["securityContext"]["runAsUser"]
            .as_u64()
            .is_some_and(|user| user > 0));
        let security = &container["securityContext"];
        assert_eq!(
            security["readOnlyRootFilesystem"],
            true,
            "{}",
            context("read-only root")
        );
        assert_eq!(security["allowPrivilegeEscalation"], false);
        assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
        assert_eq!(pod["automountServiceAccountToken"], false);
        assert_eq!(only(&objects, "ServiceAccount")["automountServiceAccountToken"], false);

        assert_secrets_come_from_secret_volumes(overlay, &objects, &template);
        assert_peer_port_admits_members_only(overlay, &objects, &labels);
    }
}

/// TLS and the bootstrap token are files of Secret volumes; no Secret and
/// no token is in the manifests.
fn assert_secrets_come_from_secret_volumes(overlay: &str, objects: &[Value], template: &MemberTemplate) {
    assert!(
        objects.iter().all(|object| object["kind"] != "Secret"),
        "{overlay}: no Secret is part of the manifests"
    );
    for variable in template.container["env"].as_array().into_iter().flatten() {
        let name = variable["name"].as_str().unwrap_or_default();
        assert!(
            !(name.contains("TOKEN") && variable.get("value").is_some()),
            "{overlay}: {name} is inline"
        );
    }
    let arguments = template.arguments();
    assert!(!arguments.iter().any(|argument| argument.starts_with("--access-token=")));
    let volumes = template.statefulset["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .expect("volumes");
    let mounts = template.container["volumeMounts"].as_array().expect("mounts");
    for flag in ["tls-ca", "tls-cert", "tls-key", "bootstrap-token-file"] {
        let path = template.flag(flag).unwrap_or_else(|| panic!("{overlay}: --{flag}"));
        let mount = mounts
            .iter()
            .find(|mount| {
                mount["mountPath"]
                    .as_str()
                    .is_some_and(|mounted| path.starts_with(mounted))
            })
            .unwrap_or_else(|| panic!("{overlay}: --{flag} {path} is on no mount"));
        let volume = volumes
            .iter()
            .find(|volume| volume["name"] == mount["name"])
            .expect("the mount's volume");
        assert!(
            volume["secret"]["secretName"].is_string(),
            "{overlay}: --{flag} comes from a Secret"
        );
        assert_eq!(mount["readOnly"], true);
    }
}

/// Every ingress rule that opens the peer port opens it to member pods
/// only; the client ports take labelled clients.
fn assert_peer_port_admits_members_only(overlay: &str, objects: &[Value], labels: &Value) {
    let policy = only(objects, "NetworkPolicy");
    assert!(selects_members(&policy["spec"]["podSelector"]["matchLabels"], labels));
    assert_eq!(policy["spec"]["policyTypes"], serde_json::json!(["Ingress"]));
    let rules = policy["spec"]["ingress"].as_array().expect("ingress rules");
    let opens = |rule: &Value, port: &str| {
        rule["ports"]
            .as_array()
            .is_some_and(|ports| ports.iter().any(|entry| entry["port"] == port))
    };
    let mut peer_rules = 0;
    for rule in rules {
        let sources = rule["from"].as_array().expect("every rule names its sources");
        if opens(rule, "peer") {
            peer_rules += 1;
            assert!(
                sources.iter().all(|source| source.get("namespaceSelector").is_none()
                    && source.get("ipBlock").is_none()
                    && selects_members(&source["podSelector"]["matchLabels"], labels)),
                "{overlay}: the peer port is open to non-members: {rule}"
            );
        }
    }
    assert_eq!(peer_rules, 1, "{overlay}: one rule opens the peer port");
    assert!(
        rules.iter().any(|rule| opens(rule, "client")
            && rule["from"].as_array().is_some_and(|sources| sources
                .iter()
                .any(|source| source["podSelector"]["matchLabels"]["lode.dev/client"] == "true"))),
        "{overlay}: labelled clients reach the client port"
    );
}

/// `lode node <the pod's exact arguments> --print-identity` on the pod
/// named `hostname`, with the pod's environment.
fn identity(template: &MemberTemplate, hostname: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lode"))
        .args(template.arguments())
        .arg("--print-identity")
        .envs(template.environment())
        .env("HOSTNAME", hostname)
        .output()
        .expect("run lode node --print-identity")
}

#[test]
fn every_pods_arguments_parse_as_lode_node_and_name_the_member_by_dns() {
    for overlay in OVERLAYS {
        let template = MemberTemplate::of(&render(overlay));
        let namespace = &template.namespace;
        let seed = format!("lode.{namespace}.svc:7001");
        // Two ordinals past the replicas: pods a scale-up adds.
        for ordinal in 0..template.replicas + 2 {
            let output = identity(&template, &format!("lode-{ordinal}"));
            assert!(output.status.success(), "{overlay} lode-{ordinal}: {output:?}");
            let identity: Value = serde_json::from_slice(&output.stdout).expect("identity JSON");
            let dns = |port: u16| format!("lode-{ordinal}.lode-peers.{namespace}.svc:{port}");
            assert_eq!(identity["id"], ordinal + 1, "{overlay}: the id is the ordinal plus one");
            assert_eq!(identity["peer_advertise"], dns(7001));
            assert_eq!(identity["advertise"], dns(7000));
            assert_eq!(identity["rejoin_through"], seed.as_str());
            if ordinal < template.replicas {
                let founders = identity["membership"]["found"].as_object().expect("a founder");
                assert_eq!(founders.len() as u64, template.replicas);
                for (id, address) in founders {
                    let founder: u64 = id.parse().expect("founder id");
                    let expected = format!("lode-{}.lode-peers.{namespace}.svc:7001", founder - 1);
                    assert_eq!(address, &expected);
                }
            } else {
                assert_eq!(
                    identity["membership"]["join"],
                    seed.as_str(),
                    "{overlay}: lode-{ordinal} joins"
                );
            }
        }
        let output = identity(&template, "not-a-pod");
        assert_eq!(output.status.code(), Some(2));
        let message = String::from_utf8_lossy(&output.stderr);
        assert!(message.contains("HOSTNAME \"not-a-pod\""), "{message}");
    }
}

#[test]
fn the_dockerfile_builds_lode_and_runs_it_as_the_manifests_non_root_user() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let dockerfile = std::fs::read_to_string(format!("{root}/Dockerfile")).expect("Dockerfile");
    let instructions: Vec<&str> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    let stages: Vec<&&str> = instructions.iter().filter(|line| line.starts_with("FROM ")).collect();
    assert_eq!(stages.len(), 2, "a build stage and a run stage");
    for stage in &stages {
        let image = stage.split_whitespace().nth(1).expect("an image");
        assert!(
            image.contains(':') && !image.ends_with(":latest"),
            "{image} is pinned to a tag"
        );
    }
    assert!(dockerfile.contains("libclang-dev"), "bindgen needs libclang");
    assert!(dockerfile.contains("-p lode-node --bin lode"));
    assert!(stages[1].contains("slim"), "a slim run stage");
    let run_stage = dockerfile.split("\nFROM ").nth(2).expect("the run stage");
    assert!(run_stage.contains("COPY --from=build"));
    let user = run_stage
        .lines()
        .find_map(|line| line.strip_prefix("USER "))
        .expect("the run stage names its user");
    let template = MemberTemplate::of(&render("overlays/production-3"));
    let run_as = template.statefulset["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
        .as_u64()
        .expect("runAsUser");
    assert_eq!(
        user.split(':').next(),
        Some(run_as.to_string().as_str()),
        "the image's user is the pods'"
    );
    let entrypoint = run_stage
        .lines()
        .find_map(|line| line.strip_prefix("ENTRYPOINT "))
        .expect("an entrypoint");
    let entrypoint: Vec<String> = serde_json::from_str(entrypoint).expect("exec form");
    assert!(
        entrypoint.len() == 1 && entrypoint[0].ends_with("/lode"),
        "{entrypoint:?}"
    );
    assert_eq!(
        template.container["args"][0], "node",
        "the pods give lode its subcommand"
    );
    let ignored = std::fs::read_to_string(format!("{root}/.dockerignore")).expect(".dockerignore");
    for path in ["target", ".git"] {
        assert!(
            ignored.lines().any(|line| line.trim() == path),
            ".dockerignore leaves out {path}"
        );
    }
}
