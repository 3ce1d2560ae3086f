//! The manifests under `k8s/` as kustomize renders them (through
//! `k8s/tests/render-json`), and the member container a StatefulSet pod
//! runs: its arguments and environment as the kubelet hands them over.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::Value;

/// Every object `k8s/<target>` renders to.
pub fn render(target: &str) -> Vec<Value> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../k8s");
    let output = Command::new(format!("{root}/tests/render-json"))
        .arg(format!("{root}/{target}"))
        .output()
        .expect("run k8s/tests/render-json (needs kubectl and python3 with PyYAML)");
    assert!(
        output.status.success(),
        "rendering k8s/{target} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let objects: Value = serde_json::from_slice(&output.stdout).expect("rendered JSON");
    objects.as_array().expect("a list of objects").clone()
}

/// The one object of `kind` (panics unless exactly one).
pub fn only<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<&Value> = objects.iter().filter(|object| object["kind"] == kind).collect();
    assert_eq!(found.len(), 1, "one {kind}, found {}", found.len());
    found[0]
}

/// The StatefulSet's member container and what its pods are given.
pub struct MemberTemplate {
    pub statefulset: Value,
    pub container: Value,
    pub replicas: u64,
    pub namespace: String,
}

impl MemberTemplate {
    pub fn of(objects: &[Value]) -> Self {
        let statefulset = only(objects, "StatefulSet").clone();
        let containers = statefulset["spec"]["template"]["spec"]["containers"]
            .as_array()
            .expect("containers");
        assert_eq!(containers.len(), 1, "one container per member pod");
        Self {
            container: containers[0].clone(),
            replicas: statefulset["spec"]["replicas"].as_u64().expect("replicas"),
            namespace: statefulset["metadata"]["namespace"]
                .as_str()
                .expect("an overlay sets the namespace")
                .to_owned(),
            statefulset,
        }
    }

    /// The container's environment: literal values, and the namespace
    /// for a `metadata.namespace` field reference.
    pub fn environment(&self) -> BTreeMap<String, String> {
        let mut environment = BTreeMap::new();
        for variable in self.container["env"].as_array().into_iter().flatten() {
            let name = variable["name"].as_str().expect("env name").to_owned();
            let value = match (&variable["value"], &variable["valueFrom"]["fieldRef"]["fieldPath"]) {
                (Value::String(value), _) => value.clone(),
                (_, Value::String(path)) if path == "metadata.namespace" => self.namespace.clone(),
                other => panic!("env {name}: no value the test knows how to give: {other:?}"),
            };
            environment.insert(name, value);
        }
        environment
    }

    /// The container's arguments with `$(NAME)` replaced from its
    /// environment, as the kubelet does.
    pub fn arguments(&self) -> Vec<String> {
        let environment = self.environment();
        self.container["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|argument| {
                let mut argument = argument.as_str().expect("a string argument").to_owned();
                for (name, value) in &environment {
                    argument = argument.replace(&format!("$({name})"), value);
                }
                assert!(!argument.contains("$("), "an unknown variable in {argument:?}");
                argument
            })
            .collect()
    }

    /// The value of `--name=VALUE` among the arguments.
    pub fn flag(&self, name: &str) -> Option<String> {
        let prefix = format!("--{name}=");
        self.arguments()
            .iter()
            .find_map(|argument| argument.strip_prefix(&prefix).map(str::to_owned))
    }
}
