//! The one node's scheduler and kubelet: every Pod becomes real Docker containers, and its status
//! follows what the kubelet would report.
//!
//! - Scheduling: a `nodeSelector` the node's labels ([`node_labels`]) do not satisfy, or a
//!   `nodeName` of another node, leaves the Pod `Pending` with `PodScheduled=False`, reason
//!   `Unschedulable` and the scheduler's message; otherwise `spec.nodeName` becomes [`NODE_NAME`].
//! - Volumes: a `hostPath` is bind-mounted (the node is this machine); each `emptyDir` is a Docker volume (mounted `volume-nocopy`, so it starts empty),
//!   shared by the Pod's init and main containers, removed with the Pod. Other volume types are
//!   not mounted.
//! - Images are never pulled (there is no registry): a missing one leaves the container `waiting`
//!   with the kubelet's reason, `ErrImageNeverPull` (`imagePullPolicy: Never`) or `ErrImagePull`,
//!   and the Pod `Pending`.
//! - Init containers run one at a time to completion first (`Init:N/M` in `kubectl get`); one
//!   that fails fails the Pod (the real kubelet retries it unless `restartPolicy` is `Never`).
//! - Main containers run `command`/`args`/`env`/`workingDir` as the kubelet gives them to the
//!   runtime (`command` replaces the entrypoint, `args` the image's command), under a pids limit
//!   ([`PIDS_LIMIT`]) and a memory limit (`resources.limits.memory`, else [`DEFAULT_MEMORY`]).
//!   The first is on Docker's bridge (its address is `podIP`, reachable from the host); the others
//!   join its network namespace, as a Pod's containers share one. Readiness probes are not run: a
//!   running container is ready.
//! - A container that exits is `terminated` (exit code, reason `Completed`/`Error`/`OOMKilled`);
//!   with `restartPolicy` `Always` (or `OnFailure` and a failure) it is started again after a
//!   back-off (`CrashLoopBackOff` meanwhile), else the Pod ends `Succeeded` or `Failed`.
//! - Deletion: the Pod turns `Terminating` (`deletionTimestamp`), its containers are removed
//!   (`docker rm -f`: no grace period) with its volumes, then the Pod object goes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::response::{IntoResponse as _, Response};
use futures_util::StreamExt as _;
use serde_json::{Value, json};

use super::call::{Call, names};
use super::resource::{Cause, ResourceKey};
use super::selector::Selector;
use super::status::ApiError;
use super::store::{EventType, now_rfc3339};
use super::{CONTAINER_LABEL, NODE_NAME, Shared};
use crate::containers::{docker, docker_making, text};

/// Marks a `hostPath` volume among the Docker volumes (what follows is the host's path).
const HOST_PATH: &str = "host-path:";

/// Every container's pids limit: a fork bomb in a Pod stays in it.
pub const PIDS_LIMIT: &str = "4096";
/// A container's memory limit when its spec sets none.
pub const DEFAULT_MEMORY: &str = "2g";
/// The longest back-off between restarts of a crashing container.
const MAX_BACKOFF: Duration = Duration::from_secs(20);

/// The scheduler's message when no node fits a Pod's selector (kube-scheduler's wording).
pub const UNSCHEDULABLE_MESSAGE: &str = "0/1 nodes are available: 1 node(s) didn't match Pod's node \
    affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.";

fn pods() -> ResourceKey {
    ResourceKey::core("pods")
}

/// The node's labels (what `nodeSelector` is matched against).
pub fn node_labels() -> BTreeMap<&'static str, &'static str> {
    BTreeMap::from([
        ("kubernetes.io/hostname", NODE_NAME),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", "amd64"),
    ])
}

/// What the kubelet keeps per Pod.
#[derive(Default)]
pub struct Kubelet {
    /// By Pod uid.
    pods: Mutex<HashMap<String, Running>>,
    docker: Mutex<Option<bollard::Docker>>,
}

struct Running {
    namespace: String,
    name: String,
    /// Container name → Docker id.
    containers: BTreeMap<String, String>,
    task: Option<tokio::task::AbortHandle>,
}

impl Kubelet {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        self.pods.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The Docker id of a Pod's container, once made.
    pub fn container_of(&self, namespace: &str, pod: &str, container: &str) -> Option<String> {
        self.lock()
            .values()
            .find(|r| r.namespace == namespace && r.name == pod)
            .and_then(|r| r.containers.get(container).cloned())
    }

    fn record(&self, uid: &str, container: &str, id: &str) {
        if let Some(running) = self.lock().get_mut(uid) {
            running.containers.insert(container.to_owned(), id.to_owned());
        }
    }

    /// The Docker API client (for exec and logs).
    pub fn docker(&self) -> Result<bollard::Docker, ApiError> {
        let mut docker = self.docker.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(client) = docker.as_ref() {
            return Ok(client.clone());
        }
        let client = bollard::Docker::connect_with_local_defaults()
            .map_err(|e| ApiError::internal(format!("the Docker engine is not reachable: {e}")))?;
        *docker = Some(client.clone());
        Ok(client)
    }
}

/// The apiserver's defaults for a new Pod (the ones clients read back) and its initial status.
pub fn defaults(pod: &mut Value) {
    let spec = &mut pod["spec"];
    if !spec.is_object() {
        return;
    }
    for (field, value) in [
        ("restartPolicy", json!("Always")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
        ("serviceAccountName", json!("default")),
        ("securityContext", json!({})),
        ("enableServiceLinks", json!(true)),
        ("priority", json!(0)),
    ] {
        if spec.get(field).is_none_or(Value::is_null) {
            spec[field] = value;
        }
    }
    for list in ["initContainers", "containers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for container in containers {
                if container.get("imagePullPolicy").is_none_or(Value::is_null) {
                    let image = container.get("image").and_then(Value::as_str).unwrap_or_default();
                    let tag = image.rsplit('/').next().unwrap_or_default();
                    let latest = !tag.contains(':') || tag.ends_with(":latest");
                    container["imagePullPolicy"] = json!(if latest { "Always" } else { "IfNotPresent" });
                }
                for (field, value) in [
                    ("terminationMessagePath", json!("/dev/termination-log")),
                    ("terminationMessagePolicy", json!("File")),
                    ("resources", json!({})),
                ] {
                    if container.get(field).is_none_or(Value::is_null) {
                        container[field] = value;
                    }
                }
            }
        }
    }
    let qos =
        if spec.pointer("/containers/0/resources/limits").is_some() { "Burstable" } else { "BestEffort" };
    pod["status"] = json!({"phase": "Pending", "qosClass": qos});
}

/// The Pod validation clients meet most: containers with names and images, volume mounts that name
/// a volume.
pub fn validate(pod: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let containers = pod.pointer("/spec/containers").and_then(Value::as_array);
    if containers.is_none_or(Vec::is_empty) {
        causes.push(Cause::required("spec.containers", ""));
    }
    let volumes: Vec<&str> = pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(|v| v.get("name")?.as_str()).collect())
        .unwrap_or_default();
    for list in ["initContainers", "containers"] {
        let Some(containers) = pod.pointer(&format!("/spec/{list}")).and_then(Value::as_array) else {
            continue;
        };
        for (i, container) in containers.iter().enumerate() {
            let field = format!("spec.{list}[{i}]");
            match container.get("name").and_then(Value::as_str) {
                None | Some("") => causes.push(Cause::required(&format!("{field}.name"), "")),
                Some(name) if super::store::name_error(name).is_some() || name.contains('.') => {
                    causes.push(Cause::invalid(
                        &format!("{field}.name"),
                        name,
                        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
                         and must start and end with an alphanumeric character",
                    ))
                }
                Some(_) => {}
            }
            if container.get("image").and_then(Value::as_str).is_none_or(str::is_empty) {
                causes.push(Cause::required(&format!("{field}.image"), ""));
            }
            let mounts = container.get("volumeMounts").and_then(Value::as_array).cloned().unwrap_or_default();
            for (j, mount) in mounts.iter().enumerate() {
                let name = mount.get("name").and_then(Value::as_str).unwrap_or_default();
                if !volumes.contains(&name) {
                    causes.push(Cause {
                        reason: "FieldValueNotFound".into(),
                        message: format!("Not found: {}", json!(name)),
                        field: format!("{field}.volumeMounts[{j}].name"),
                    });
                }
            }
        }
    }
    causes
}

/// The node object (`kubectl get nodes`).
pub fn node_object() -> Value {
    let now = now_rfc3339();
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    json!({
        "metadata": {"name": NODE_NAME, "labels": node_labels()},
        "spec": {},
        "status": {
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "Hostname", "address": NODE_NAME}],
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "v1.33.0-fake-kube",
                "containerRuntimeVersion": "docker://fake-kube"},
        },
    })
}

/// The kubelet's loop: starts the Pods that appear, tears down the ones being deleted.
pub async fn run(shared: Arc<Shared>) {
    loop {
        let Ok((existing, mut events)) = shared.store.list_and_subscribe(&pods(), None, &Selector::default())
        else {
            return;
        };
        for pod in existing {
            consider(&shared, &pod);
        }
        while let Ok(event) = events.next().await {
            if event.resource != pods() {
                continue;
            }
            match event.kind {
                EventType::Added | EventType::Modified => consider(&shared, &event.object),
                EventType::Deleted => {
                    // Removed by someone else (a forced removal): its containers go too.
                    let uid = uid_of(&event.object);
                    if shared.kubelet.lock().contains_key(&uid) {
                        tokio::spawn(tear_down(
                            shared.clone(),
                            uid,
                            event.namespace.clone(),
                            event.name.clone(),
                            false,
                        ));
                    }
                }
            }
        }
        // Fell behind the history: start over from a fresh list.
    }
}

fn uid_of(pod: &Value) -> String {
    pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_owned()
}

/// Starts a Pod the kubelet does not run yet; tears down one being deleted.
fn consider(shared: &Arc<Shared>, pod: &Value) {
    let uid = uid_of(pod);
    let (namespace, name) = names(pod);
    let deleting = pod.pointer("/metadata/deletionTimestamp").is_some();
    let mut running = shared.kubelet.lock();
    match running.get_mut(&uid) {
        None if deleting => {
            drop(running);
            tokio::spawn(tear_down(shared.clone(), uid, namespace, name, true));
        }
        None => {
            running.insert(
                uid.clone(),
                Running {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    containers: BTreeMap::new(),
                    task: None,
                },
            );
            let task = tokio::spawn(run_pod(shared.clone(), uid.clone(), namespace, name, pod.clone()));
            if let Some(entry) = running.get_mut(&uid) {
                entry.task = Some(task.abort_handle());
            }
        }
        Some(entry) if deleting && entry.task.is_some() => {
            if let Some(task) = entry.task.take() {
                task.abort();
            }
            drop(running);
            tokio::spawn(tear_down(shared.clone(), uid, namespace, name, true));
        }
        Some(_) => {}
    }
}

/// Removes a Pod's containers and volumes, then (when `remove_object`) the Pod object.
async fn tear_down(shared: Arc<Shared>, uid: String, namespace: String, name: String, remove_object: bool) {
    let filter = format!("label={CONTAINER_LABEL}.pod={uid}");
    remove_labelled(&filter).await;
    if remove_object {
        let current = shared.store.get(&pods(), &namespace, &name).ok();
        if current.is_some_and(|pod| uid_of(&pod) == uid) {
            shared.store.remove(&pods(), &namespace, &name);
        }
    }
    shared.kubelet.lock().remove(&uid);
    // A `docker run` cut short by the abort may still have made its container: look once more.
    tokio::time::sleep(Duration::from_millis(500)).await;
    remove_labelled(&filter).await;
}

async fn remove_labelled(filter: &str) {
    if let Ok((0, out, _)) = docker(&["ps", "-aq", "--filter", filter], None).await {
        let ids: Vec<String> = text(&out).split_whitespace().map(str::to_owned).collect();
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f", "-v"];
            args.extend(ids.iter().map(String::as_str));
            let _ = docker(&args, None).await;
        }
    }
    if let Ok((0, out, _)) = docker(&["volume", "ls", "-q", "--filter", filter], None).await {
        let names: Vec<String> = text(&out).split_whitespace().map(str::to_owned).collect();
        if !names.is_empty() {
            let mut args = vec!["volume", "rm", "-f"];
            args.extend(names.iter().map(String::as_str));
            let _ = docker(&args, None).await;
        }
    }
}

/// Removes every container and volume of a fake instance (from `Drop`, outside any runtime).
pub fn remove_all_blocking(instance: &str) {
    crate::containers::remove_all_blocking(CONTAINER_LABEL, instance);
    let filter = format!("label={CONTAINER_LABEL}={instance}");
    if let Ok(out) =
        std::process::Command::new("docker").args(["volume", "ls", "-q", "--filter", &filter]).output()
    {
        let names: Vec<String> = text(&out.stdout).split_whitespace().map(str::to_owned).collect();
        if !names.is_empty() {
            let _ = std::process::Command::new("docker")
                .args(["volume", "rm", "-f"])
                .args(&names)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// Changes the stored Pod if it is still the one with `uid`.
fn set(shared: &Shared, uid: &str, namespace: &str, name: &str, change: impl FnOnce(&mut Value)) {
    let _ = shared.store.update(&pods(), namespace, name, |pod| {
        if uid_of(pod) != uid || pod.pointer("/metadata/deletionTimestamp").is_some() {
            // Another Pod of that name, or this one going: not ours to change any more.
            return Err(ApiError::new(409, "Conflict", format!("pod {name} changed hands")));
        }
        change(pod);
        Ok(())
    });
}

/// Sets condition `kind` (its `lastTransitionTime` moves only when its status changes).
fn condition(pod: &mut Value, kind: &str, status: &str, reason: Option<&str>, message: Option<&str>) {
    let now = now_rfc3339();
    let conditions = &mut pod["status"]["conditions"];
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let Some(list) = conditions.as_array_mut() else {
        return;
    };
    let mut entry = json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": now});
    if let Some(reason) = reason {
        entry["reason"] = json!(reason);
    }
    if let Some(message) = message {
        entry["message"] = json!(message);
    }
    match list.iter_mut().find(|c| c["type"] == kind) {
        Some(existing) => {
            if existing["status"] == status {
                entry["lastTransitionTime"] = existing["lastTransitionTime"].clone();
            }
            *existing = entry;
        }
        None => list.push(entry),
    }
}

/// One container of the spec, as the kubelet reads it.
struct Container {
    name: String,
    image: String,
    pull_policy: String,
    spec: Value,
}

fn containers(pod: &Value, list: &str) -> Vec<Container> {
    pod.pointer(&format!("/spec/{list}"))
        .and_then(Value::as_array)
        .map(|containers| {
            containers
                .iter()
                .map(|c| Container {
                    name: c["name"].as_str().unwrap_or_default().to_owned(),
                    image: c["image"].as_str().unwrap_or_default().to_owned(),
                    pull_policy: c["imagePullPolicy"].as_str().unwrap_or("IfNotPresent").to_owned(),
                    spec: c.clone(),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn waiting_status(container: &Container, reason: &str, message: Option<&str>) -> Value {
    let mut waiting = json!({"reason": reason});
    if let Some(message) = message {
        waiting["message"] = json!(message);
    }
    json!({
        "name": container.name, "image": container.image, "imageID": "", "ready": false,
        "restartCount": 0, "started": false, "state": {"waiting": waiting}, "lastState": {},
    })
}

/// A container's status entry in `status.{list}` (by name).
fn set_container_status(pod: &mut Value, list: &str, entry: Value) {
    let statuses = &mut pod["status"][list];
    if !statuses.is_array() {
        *statuses = json!([]);
    }
    if let Some(statuses) = statuses.as_array_mut() {
        match statuses.iter_mut().find(|s| s["name"] == entry["name"]) {
            Some(existing) => *existing = entry,
            None => statuses.push(entry),
        }
    }
}

/// What `docker inspect` says of a container.
struct Inspected {
    ip: String,
    gateway: String,
    started_at: String,
    finished_at: String,
    exit_code: i64,
    oom_killed: bool,
    running: bool,
    image_id: String,
}

async fn inspect(id: &str) -> Option<Inspected> {
    let (code, out, _) = docker(&["inspect", id], None).await.ok()?;
    if code != 0 {
        return None;
    }
    let all: Value = serde_json::from_slice(&out).ok()?;
    let c = all.get(0)?;
    let network =
        c.pointer("/NetworkSettings/Networks").and_then(Value::as_object).and_then(|n| n.values().next());
    let field = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    // Docker's times have nanoseconds; the API's have seconds.
    let seconds = |t: String| match t.split_once('.') {
        Some((head, _)) => format!("{head}Z"),
        None => t,
    };
    Some(Inspected {
        ip: field(network.and_then(|n| n.get("IPAddress"))),
        gateway: field(network.and_then(|n| n.get("Gateway"))),
        started_at: seconds(field(c.pointer("/State/StartedAt"))),
        finished_at: seconds(field(c.pointer("/State/FinishedAt"))),
        exit_code: c.pointer("/State/ExitCode").and_then(Value::as_i64).unwrap_or(-1),
        oom_killed: c.pointer("/State/OOMKilled").and_then(Value::as_bool).unwrap_or(false),
        running: c.pointer("/State/Running").and_then(Value::as_bool).unwrap_or(false),
        image_id: field(c.get("Image")),
    })
}

fn terminated_state(container_id: &str, state: &Inspected) -> Value {
    let reason = match (state.exit_code, state.oom_killed) {
        (_, true) => "OOMKilled",
        (0, false) => "Completed",
        _ => "Error",
    };
    json!({"terminated": {"exitCode": state.exit_code, "reason": reason, "startedAt": state.started_at,
        "finishedAt": state.finished_at, "containerID": format!("docker://{container_id}")}})
}

/// Bytes from a Kubernetes quantity (`512Mi`, `1G`, `1000000`).
fn bytes_quantity(quantity: &str) -> Option<u64> {
    let units: [(&str, u64); 10] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("k", 1_000),
        ("K", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("", 1),
    ];
    units.iter().find_map(|(suffix, factor)| {
        let number = quantity.strip_suffix(suffix)?;
        let value: f64 = number.parse().ok()?;
        // `as` saturates: a negative or NaN quantity is 0, a huge one `u64::MAX`.
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "a float to integer `as` saturates, which is what is wanted here"
        )]
        Some((value * *factor as f64) as u64)
    })
}

/// CPUs from a Kubernetes quantity (`500m`, `2`).
fn cpu_quantity(quantity: &str) -> Option<f64> {
    match quantity.strip_suffix('m') {
        Some(milli) => milli.parse::<f64>().ok().map(|m| m / 1000.0),
        None => quantity.parse().ok(),
    }
}

/// The `docker run` arguments for one container.
fn run_args(
    instance: &str,
    uid: &str,
    pod: &Value,
    container: &Container,
    volumes: &BTreeMap<String, String>,
    network: Option<&str>,
) -> Vec<String> {
    let (namespace, name) = names(pod);
    let spec = &container.spec;
    let mut args: Vec<String> = vec!["run".into(), "-d".into(), "--pull".into(), "never".into()];
    for label in [
        format!("{CONTAINER_LABEL}={instance}"),
        format!("{CONTAINER_LABEL}.pod={uid}"),
        format!("{CONTAINER_LABEL}.name={namespace}/{name}/{}", container.name),
        // What the container tools of a real node show.
        format!("io.kubernetes.pod.name={name}"),
        format!("io.kubernetes.pod.namespace={namespace}"),
        format!("io.kubernetes.container.name={}", container.name),
    ] {
        args.extend(["--label".into(), label]);
    }
    let memory = spec
        .pointer("/resources/limits/memory")
        .and_then(Value::as_str)
        .and_then(bytes_quantity)
        .map_or(DEFAULT_MEMORY.to_owned(), |b| b.to_string());
    args.extend(["--pids-limit".into(), PIDS_LIMIT.into(), "--memory".into(), memory]);
    if let Some(cpus) = spec.pointer("/resources/limits/cpu").and_then(Value::as_str).and_then(cpu_quantity) {
        args.extend(["--cpus".into(), format!("{cpus}")]);
    }
    match network {
        Some(first) => args.extend(["--network".into(), format!("container:{first}")]),
        None => args.extend(["--hostname".into(), name.chars().take(63).collect()]),
    }
    for env in spec.get("env").and_then(Value::as_array).into_iter().flatten() {
        let Some(key) = env.get("name").and_then(Value::as_str) else { continue };
        let value = match env.get("value").and_then(Value::as_str) {
            Some(value) => value.to_owned(),
            // The downward API's plain fields (`valueFrom.fieldRef`).
            None => match env.pointer("/valueFrom/fieldRef/fieldPath").and_then(Value::as_str) {
                Some("metadata.name") => name.clone(),
                Some("metadata.namespace") => namespace.clone(),
                Some("metadata.uid") => uid.to_owned(),
                Some("spec.nodeName") => NODE_NAME.to_owned(),
                _ => String::new(),
            },
        };
        args.extend(["-e".into(), format!("{key}={value}")]);
    }
    if let Some(dir) = spec.get("workingDir").and_then(Value::as_str).filter(|d| !d.is_empty()) {
        args.extend(["-w".into(), dir.to_owned()]);
    }
    let user = spec
        .pointer("/securityContext/runAsUser")
        .or_else(|| pod.pointer("/spec/securityContext/runAsUser"))
        .and_then(Value::as_i64);
    let group = spec
        .pointer("/securityContext/runAsGroup")
        .or_else(|| pod.pointer("/spec/securityContext/runAsGroup"))
        .and_then(Value::as_i64);
    if let Some(user) = user {
        args.extend(["--user".into(), group.map_or(user.to_string(), |g| format!("{user}:{g}"))]);
    }
    if spec.get("stdin").and_then(Value::as_bool) == Some(true) {
        args.push("-i".into());
    }
    if spec.get("tty").and_then(Value::as_bool) == Some(true) {
        args.push("-t".into());
    }
    for mount in spec.get("volumeMounts").and_then(Value::as_array).into_iter().flatten() {
        let (Some(volume), Some(path)) =
            (mount.get("name").and_then(Value::as_str), mount.get("mountPath").and_then(Value::as_str))
        else {
            continue;
        };
        if let Some(docker_volume) = volumes.get(volume) {
            let mut option = match docker_volume.strip_prefix(HOST_PATH) {
                Some(host) => format!("type=bind,src={host},dst={path}"),
                None => format!("type=volume,src={docker_volume},dst={path},volume-nocopy"),
            };
            if mount.get("readOnly").and_then(Value::as_bool) == Some(true) {
                option.push_str(",readonly");
            }
            args.extend(["--mount".into(), option]);
        }
    }
    let words = |field: &str| -> Vec<String> {
        spec.get(field)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default()
    };
    let (command, container_args) = (words("command"), words("args"));
    match command.split_first() {
        Some((entrypoint, rest)) => {
            args.extend(["--entrypoint".into(), entrypoint.clone(), container.image.clone()]);
            args.extend(rest.iter().cloned());
            args.extend(container_args);
        }
        None => {
            args.push(container.image.clone());
            args.extend(container_args);
        }
    }
    args
}

async fn image_exists(image: &str) -> bool {
    matches!(docker(&["image", "inspect", "--format", "{{.Id}}", image], None).await, Ok((0, _, _)))
}

/// The kubelet's reason and message for an image it cannot have.
fn image_failure(container: &Container) -> (&'static str, String) {
    if container.pull_policy == "Never" {
        (
            "ErrImageNeverPull",
            format!("Container image \"{}\" is not present with pull policy of Never", container.image),
        )
    } else {
        (
            "ErrImagePull",
            format!(
                "failed to pull and unpack image \"{}\": fake-kube pulls no images (only local ones run)",
                container.image
            ),
        )
    }
}

/// Starts a container; its Docker id, or Docker's message.
async fn start_container(args: &[String]) -> Result<String, String> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match docker_making(&args).await {
        Ok((0, out, _)) => Ok(text(&out)),
        Ok((_, _, err)) => Err(text(&err)),
        Err(err) => Err(format!("docker: {err}")),
    }
}

/// A Pod's life on the node, from scheduling to the end of its containers.
async fn run_pod(shared: Arc<Shared>, uid: String, namespace: String, name: String, pod: Value) {
    let (ns, nm) = (namespace.as_str(), name.as_str());
    // Scheduling.
    let selector_fits = pod.pointer("/spec/nodeSelector").and_then(Value::as_object).is_none_or(|wanted| {
        let labels = node_labels();
        wanted.iter().all(|(k, v)| labels.get(k.as_str()).is_some_and(|have| Some(*have) == v.as_str()))
    });
    let node_fits =
        pod.pointer("/spec/nodeName").and_then(Value::as_str).is_none_or(|n| n.is_empty() || n == NODE_NAME);
    if !node_fits {
        // Bound to a node that does not exist: no kubelet ever picks it up.
        return;
    }
    if !selector_fits {
        set(&shared, &uid, ns, nm, |pod| {
            condition(pod, "PodScheduled", "False", Some("Unschedulable"), Some(UNSCHEDULABLE_MESSAGE));
        });
        return;
    }
    set(&shared, &uid, ns, nm, |pod| {
        pod["spec"]["nodeName"] = json!(NODE_NAME);
        condition(pod, "PodScheduled", "True", None, None);
    });
    let init = containers(&pod, "initContainers");
    let main = containers(&pod, "containers");
    let started = now_rfc3339();
    set(&shared, &uid, ns, nm, |pod| {
        pod["status"]["startTime"] = json!(started);
        condition(pod, "PodReadyToStartContainers", "True", None, None);
        if init.is_empty() {
            condition(pod, "Initialized", "True", None, None);
        } else {
            let names: Vec<&str> = init.iter().map(|c| c.name.as_str()).collect();
            let message = format!("containers with incomplete status: [{}]", names.join(" "));
            condition(pod, "Initialized", "False", Some("ContainersNotInitialized"), Some(&message));
        }
        let names: Vec<&str> = main.iter().map(|c| c.name.as_str()).collect();
        let message = format!("containers with unready status: [{}]", names.join(" "));
        condition(pod, "Ready", "False", Some("ContainersNotReady"), Some(&message));
        condition(pod, "ContainersReady", "False", Some("ContainersNotReady"), Some(&message));
        for c in &init {
            set_container_status(pod, "initContainerStatuses", waiting_status(c, "PodInitializing", None));
        }
        for c in &main {
            let reason = if init.is_empty() { "ContainerCreating" } else { "PodInitializing" };
            set_container_status(pod, "containerStatuses", waiting_status(c, reason, None));
        }
    });

    // Volumes.
    let mut volumes = BTreeMap::new();
    for volume in pod.pointer("/spec/volumes").and_then(Value::as_array).into_iter().flatten() {
        let Some(volume_name) = volume.get("name").and_then(Value::as_str) else { continue };
        // A hostPath is the (only) node's directory, bind-mounted.
        if let Some(path) = volume.pointer("/hostPath/path").and_then(Value::as_str) {
            volumes.insert(volume_name.to_owned(), format!("{HOST_PATH}{path}"));
            continue;
        }
        if volume.get("emptyDir").is_none() {
            continue;
        }
        let docker_name = format!("fk-{}-{}", &uid[..8.min(uid.len())], volume_name);
        let labels =
            [format!("{CONTAINER_LABEL}={}", shared.instance), format!("{CONTAINER_LABEL}.pod={uid}")];
        let args = ["volume", "create", "--label", &labels[0], "--label", &labels[1], &docker_name];
        match docker_making(&args).await {
            Ok((0, _, _)) => {
                volumes.insert(volume_name.to_owned(), docker_name);
            }
            Ok((_, _, err)) => return fail_pod(&shared, &uid, ns, nm, "FailedMount", &text(&err)),
            Err(err) => return fail_pod(&shared, &uid, ns, nm, "FailedMount", &err.to_string()),
        }
    }

    // Init containers, one at a time, to completion.
    for (i, container) in init.iter().enumerate() {
        if !image_exists(&container.image).await {
            let (reason, message) = image_failure(container);
            set(&shared, &uid, ns, nm, |pod| {
                set_container_status(
                    pod,
                    "initContainerStatuses",
                    waiting_status(container, reason, Some(&message)),
                );
            });
            return;
        }
        let args = run_args(&shared.instance, &uid, &pod, container, &volumes, None);
        let id = match start_container(&args).await {
            Ok(id) => id,
            Err(message) => {
                return container_failed(&shared, &uid, ns, nm, "initContainerStatuses", container, &message);
            }
        };
        shared.kubelet.record(&uid, &container.name, &id);
        if let Some(state) = inspect(&id).await {
            set(&shared, &uid, ns, nm, |pod| {
                if i == 0 {
                    pod["status"]["hostIP"] = json!(state.gateway);
                    pod["status"]["hostIPs"] = json!([{"ip": state.gateway}]);
                }
                let mut entry = waiting_status(container, "", None);
                entry["state"] = json!({"running": {"startedAt": state.started_at}});
                entry["started"] = json!(true);
                entry["containerID"] = json!(format!("docker://{id}"));
                entry["imageID"] = json!(state.image_id);
                set_container_status(pod, "initContainerStatuses", entry);
            });
        }
        let _ = docker(&["wait", &id], None).await;
        let Some(state) = inspect(&id).await else { return };
        set(&shared, &uid, ns, nm, |pod| {
            let mut entry = waiting_status(container, "", None);
            entry["state"] = terminated_state(&id, &state);
            entry["containerID"] = json!(format!("docker://{id}"));
            entry["imageID"] = json!(state.image_id);
            set_container_status(pod, "initContainerStatuses", entry);
        });
        if state.exit_code != 0 {
            set(&shared, &uid, ns, nm, |pod| pod["status"]["phase"] = json!("Failed"));
            return;
        }
    }
    if !init.is_empty() {
        set(&shared, &uid, ns, nm, |pod| {
            condition(pod, "Initialized", "True", None, None);
            for c in &main {
                set_container_status(pod, "containerStatuses", waiting_status(c, "ContainerCreating", None));
            }
        });
    }

    // Main containers: the first on the bridge, the others in its network namespace.
    let mut started: Vec<(usize, String)> = Vec::new();
    for (i, container) in main.iter().enumerate() {
        if !image_exists(&container.image).await {
            let (reason, message) = image_failure(container);
            set(&shared, &uid, ns, nm, |pod| {
                set_container_status(
                    pod,
                    "containerStatuses",
                    waiting_status(container, reason, Some(&message)),
                );
            });
            continue;
        }
        let network = started.first().map(|(_, id)| id.clone());
        let args = run_args(&shared.instance, &uid, &pod, container, &volumes, network.as_deref());
        match start_container(&args).await {
            Ok(id) => {
                shared.kubelet.record(&uid, &container.name, &id);
                started.push((i, id));
            }
            Err(message) => {
                set(&shared, &uid, ns, nm, |pod| {
                    let entry = waiting_status(container, "CreateContainerError", Some(&message));
                    set_container_status(pod, "containerStatuses", entry);
                });
            }
        }
    }
    let mut pod_ip = String::new();
    let mut host_ip = String::new();
    for (n, (i, id)) in started.iter().enumerate() {
        let Some(state) = inspect(id).await else { continue };
        if n == 0 {
            pod_ip = state.ip.clone();
            host_ip = state.gateway.clone();
        }
        let container = &main[*i];
        set(&shared, &uid, ns, nm, |pod| {
            let mut entry = waiting_status(container, "", None);
            entry["state"] = json!({"running": {"startedAt": state.started_at}});
            entry["ready"] = json!(state.running);
            entry["started"] = json!(state.running);
            entry["containerID"] = json!(format!("docker://{id}"));
            entry["imageID"] = json!(state.image_id);
            set_container_status(pod, "containerStatuses", entry);
        });
    }
    set(&shared, &uid, ns, nm, |pod| {
        if !pod_ip.is_empty() {
            pod["status"]["podIP"] = json!(pod_ip);
            pod["status"]["podIPs"] = json!([{"ip": pod_ip}]);
        }
        if !host_ip.is_empty() {
            pod["status"]["hostIP"] = json!(host_ip);
            pod["status"]["hostIPs"] = json!([{"ip": host_ip}]);
        }
        refresh_phase(pod);
    });

    // Follow each container to its end (and through its restarts).
    let restart_policy =
        pod.pointer("/spec/restartPolicy").and_then(Value::as_str).unwrap_or("Always").to_owned();
    let watchers: Vec<_> = started
        .into_iter()
        .map(|(i, id)| {
            let shared = shared.clone();
            let (uid, namespace, name) = (uid.clone(), namespace.clone(), name.clone());
            let container = Container {
                name: main[i].name.clone(),
                image: main[i].image.clone(),
                pull_policy: main[i].pull_policy.clone(),
                spec: main[i].spec.clone(),
            };
            let policy = restart_policy.clone();
            async move { follow(shared, uid, namespace, name, container, id, policy).await }
        })
        .collect();
    futures_util::future::join_all(watchers).await;
}

/// Follows one main container: its exit, and its restarts under the Pod's `restartPolicy`.
async fn follow(
    shared: Arc<Shared>,
    uid: String,
    namespace: String,
    name: String,
    container: Container,
    id: String,
    policy: String,
) {
    let (ns, nm) = (namespace.as_str(), name.as_str());
    let mut restarts = 0u32;
    let mut backoff = Duration::from_secs(1);
    loop {
        let _ = docker(&["wait", &id], None).await;
        let Some(state) = inspect(&id).await else { return };
        let restart = match policy.as_str() {
            "Never" => false,
            "OnFailure" => state.exit_code != 0,
            _ => true,
        };
        set(&shared, &uid, ns, nm, |pod| {
            let mut entry = waiting_status(&container, "", None);
            entry["restartCount"] = json!(restarts);
            entry["containerID"] = json!(format!("docker://{id}"));
            entry["imageID"] = json!(state.image_id);
            if restart {
                entry["lastState"] = terminated_state(&id, &state);
                let message = format!(
                    "back-off {}s restarting failed container={} pod={nm}_{ns}({uid})",
                    backoff.as_secs(),
                    container.name
                );
                entry["state"] = json!({"waiting": {"reason": "CrashLoopBackOff", "message": message}});
            } else {
                entry["state"] = terminated_state(&id, &state);
            }
            set_container_status(pod, "containerStatuses", entry);
            refresh_phase(pod);
        });
        if !restart {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        if docker(&["start", &id], None).await.ok().is_none_or(|(code, _, _)| code != 0) {
            return;
        }
        restarts += 1;
        let Some(state) = inspect(&id).await else { return };
        set(&shared, &uid, ns, nm, |pod| {
            let statuses = pod["status"]["containerStatuses"].as_array().cloned().unwrap_or_default();
            let mut entry =
                statuses.into_iter().find(|s| s["name"] == container.name.as_str()).unwrap_or(json!({}));
            entry["state"] = json!({"running": {"startedAt": state.started_at}});
            entry["ready"] = json!(true);
            entry["started"] = json!(true);
            entry["restartCount"] = json!(restarts);
            set_container_status(pod, "containerStatuses", entry);
            refresh_phase(pod);
        });
    }
}

/// The phase and the readiness conditions from the container statuses, as the kubelet computes
/// them.
fn refresh_phase(pod: &mut Value) {
    let statuses = pod["status"]["containerStatuses"].as_array().cloned().unwrap_or_default();
    let running = statuses.iter().filter(|s| s.pointer("/state/running").is_some()).count();
    let terminated: Vec<i64> = statuses
        .iter()
        .filter_map(|s| s.pointer("/state/terminated/exitCode").and_then(Value::as_i64))
        .collect();
    let restarting = statuses.iter().any(|s| s.pointer("/lastState/terminated").is_some());
    let phase = if !statuses.is_empty() && terminated.len() == statuses.len() {
        if terminated.iter().all(|c| *c == 0) { "Succeeded" } else { "Failed" }
    } else if running > 0 || restarting {
        "Running"
    } else {
        "Pending"
    };
    pod["status"]["phase"] = json!(phase);
    let unready: Vec<&str> = statuses
        .iter()
        .filter(|s| s["ready"] != true || s.pointer("/state/running").is_none())
        .filter_map(|s| s["name"].as_str())
        .collect();
    if phase == "Succeeded" {
        condition(pod, "Ready", "False", Some("PodCompleted"), None);
        condition(pod, "ContainersReady", "False", Some("PodCompleted"), None);
    } else if unready.is_empty() && !statuses.is_empty() {
        condition(pod, "Ready", "True", None, None);
        condition(pod, "ContainersReady", "True", None, None);
    } else {
        let message = format!("containers with unready status: [{}]", unready.join(" "));
        condition(pod, "Ready", "False", Some("ContainersNotReady"), Some(&message));
        condition(pod, "ContainersReady", "False", Some("ContainersNotReady"), Some(&message));
    }
    if phase == "Succeeded" || phase == "Failed" {
        condition(pod, "PodReadyToStartContainers", "False", None, None);
    }
}

fn fail_pod(shared: &Shared, uid: &str, ns: &str, nm: &str, reason: &str, message: &str) {
    set(shared, uid, ns, nm, |pod| {
        pod["status"]["phase"] = json!("Failed");
        pod["status"]["reason"] = json!(reason);
        pod["status"]["message"] = json!(message);
    });
}

fn container_failed(
    shared: &Shared,
    uid: &str,
    ns: &str,
    nm: &str,
    list: &str,
    container: &Container,
    message: &str,
) {
    set(shared, uid, ns, nm, |pod| {
        set_container_status(pod, list, waiting_status(container, "CreateContainerError", Some(message)));
    });
}

/// The stored Pod's container to exec into or read the log of: the one named, or the only one.
/// The apiserver's 400s otherwise.
pub fn pick_container(pod: &Value, wanted: Option<&str>) -> Result<String, ApiError> {
    let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let names: Vec<String> = ["containers", "initContainers"]
        .iter()
        .flat_map(|list| containers(pod, list))
        .map(|c| c.name)
        .collect();
    let main: Vec<String> = containers(pod, "containers").into_iter().map(|c| c.name).collect();
    match wanted.filter(|w| !w.is_empty()) {
        Some(wanted) if names.iter().any(|n| n == wanted) => Ok(wanted.to_owned()),
        Some(wanted) => Err(ApiError::bad_request(format!("container {wanted} is not valid for pod {name}"))),
        None if main.len() == 1 => Ok(main[0].clone()),
        None => Err(ApiError::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            main.join(" ")
        ))),
    }
}

/// A container's state in the Pod's status: (is running, waiting reason).
pub fn container_state(pod: &Value, container: &str) -> (bool, Option<String>) {
    let entry = ["containerStatuses", "initContainerStatuses"]
        .iter()
        .find_map(|list| pod["status"][*list].as_array()?.iter().find(|s| s["name"] == container).cloned());
    match entry {
        Some(entry) => (
            entry.pointer("/state/running").is_some(),
            entry.pointer("/state/waiting/reason").and_then(Value::as_str).map(str::to_owned),
        ),
        None => (false, None),
    }
}

/// `GET pods/{name}/log`: the container's output (stdout and stderr in order, as the runtime
/// logged it), `follow`, `tailLines`, `timestamps`, `container`.
pub async fn log(
    shared: &Arc<Shared>,
    namespace: &str,
    name: &str,
    call: Call,
) -> Result<Response, ApiError> {
    let pod = shared.store.get(&pods(), namespace, name)?;
    let container = pick_container(&pod, call.param("container"))?;
    let Some(id) = shared.kubelet.container_of(namespace, name, &container) else {
        let (_, waiting) = container_state(&pod, &container);
        let reason = waiting.unwrap_or_else(|| "ContainerCreating".into());
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{name}\" is waiting to start: {reason}"
        )));
    };
    let mut options = bollard::query_parameters::LogsOptionsBuilder::default()
        .follow(call.flag("follow"))
        .stdout(true)
        .stderr(true)
        .timestamps(call.flag("timestamps"));
    if let Some(lines) = call.param("tailLines") {
        options = options.tail(lines);
    }
    let docker = shared.kubelet.docker()?;
    let stream = docker.logs(&id, Some(options.build())).map(|item| match item {
        Ok(output) => Ok::<Bytes, std::io::Error>(output.into_bytes()),
        Err(err) => Err(std::io::Error::other(err)),
    });
    let mut response = Body::from_stream(stream).into_response();
    response
        .headers_mut()
        .insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("text/plain"));
    Ok(response)
}
