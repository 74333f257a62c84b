//! [`KubernetesSandbox`]: a sandbox on a Kubernetes cluster, driven through the Kubernetes API
//! (`kube`), and [`KubernetesProvider`], the same as a [`Provider`].
//!
//! - **Configuration** as `kubectl` finds it: `KUBECONFIG`, else `~/.kube/config`, else the Pod's
//!   service account (in-cluster). The namespace is [`KubernetesOptions::namespace`], else the
//!   context's, else `default`.
//! - **Specs**: `kube:IMAGE` makes a plain Pod from the image (agentd baked in, or injected);
//!   `kube-claim:POOL` makes an agent-sandbox `SandboxClaim` against the `SandboxWarmPool` POOL (a
//!   warm Sandbox when the pool has one ready, else a cold one from the pool's `SandboxTemplate`:
//!   see [`claim`]); `kube-attach:[NAMESPACE/]NAME` attaches to a claim or Pod by name. What agentd
//!   creates carries the label [`LABEL`]` = 1`, so `agentctl sandbox ls|rm|gc` find it. The id is
//!   `NAMESPACE/NAME` (the Pod's, or the claim's).
//! - **Readiness** is waited for with a deadline ([`KubernetesOptions::start_timeout`]); an image
//!   that cannot be pulled fails at once with the kubelet's reason and message, and a Pod that is
//!   still unscheduled at the deadline fails with the scheduler's.
//! - **Transport**: `pods/exec` (a websocket; `v5.channel.k8s.io`, else `v4`). agentd runs in the
//!   Pod on a Unix socket, started detached by the first exec; each link is one exec of
//!   `agentd bridge` to it ([`exec::BridgeConnector`]). The cluster's RBAC is the authentication:
//!   no port, no token, and it works under gVisor and Kata. When the API server drops the stream,
//!   agentd and its commands run on, and the link heals: an `execute` in flight is attached again
//!   from its last byte (see [`AgentdSandbox`](crate::contract::agentd::AgentdSandbox)).
//!   Transfers go over the link; without one (no agentd), `execute` and transfers run as plain
//!   execs ([`argv`]).
//! - **agentd gets in** baked (`agentd` on `PATH`, or at `/opt/agentd/bin/agentd` where an
//!   initContainer copied it into a shared `emptyDir`, see [`manifests`]: docs/providers.md, "Kubernetes"), else injected
//!   through exec.
//! - **Suspend and resume** ([`Provider::pause`], [`Provider::resume`]) set a claimed Sandbox's
//!   `operatingMode`; agent-sandbox then deletes its Pod (the container's files are lost, its
//!   volume claims kept) and makes a new one on resume. Plain Pods cannot be paused.

pub mod claim;
pub mod exec;
pub mod manifests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentd_protocol::{ExecuteResponse, FileDownloadResponse, FileUploadResponse};
use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};

use self::exec::{BridgeConnector, PodExec, kube_error};
use crate::adapters::argv;
use crate::adapters::linked::{LinkMode, Linked, Machine, made_or_deleted};
use crate::contract::BaseSandbox;
use crate::contract::agentd::Connector;
use crate::contract::error::{Result, SandboxError};
use crate::contract::provider::{Kind, Provider, SandboxInfo};
use crate::contract::random::random_hex;

/// This kind, as its row of the kinds table names it.
pub const KIND: Kind = Kind::new("kube");

/// The provider's name in errors.
pub const PROVIDER: &str = "Kubernetes";
/// Label on every Pod and claim this adapter creates.
pub const LABEL: &str = "dev.agentd.sandbox";
/// Annotation holding the spec a sandbox was created from (for `sandbox ls`).
pub const SOURCE_ANNOTATION: &str = "dev.agentd.source";
/// The container of the Pods this adapter creates.
pub const CONTAINER: &str = "sandbox";
/// Where this adapter's agentd, its socket and log live in the Pod.
pub const RUN_DIR: &str = "/tmp/.agentd";

/// How `execute`, the verbs and the offload reach the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KubernetesMode {
    /// The link to agentd through the exec stream, or an error: never a silent fallback.
    Link,
    /// Plain execs (agentd is still put in, for the derived verbs).
    PodExec,
    /// The link when it can be made, else plain execs (with a warning in the log).
    #[default]
    Auto,
}

impl From<KubernetesMode> for LinkMode {
    fn from(mode: KubernetesMode) -> Self {
        match mode {
            KubernetesMode::Link => LinkMode::Link,
            KubernetesMode::PodExec => LinkMode::ProviderExec,
            KubernetesMode::Auto => LinkMode::Auto,
        }
    }
}

/// The channel in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    Link,
    PodExec,
}

/// How to create or attach a sandbox.
#[derive(Debug, Clone)]
pub struct KubernetesOptions {
    pub mode: KubernetesMode,
    /// The namespace; `None`: the kubeconfig context's (in-cluster: the Pod's own), else `default`.
    pub namespace: Option<String>,
    /// Longest wait for the Pod (or the claimed Sandbox) to be ready.
    pub start_timeout: Duration,
    /// Longest wait for agentd to answer through the exec stream, per (re)connection.
    pub link_timeout: Duration,
    /// The agentd to inject; `None`: agentd in the image if any, else the static one.
    pub agentd_binary: Option<std::path::PathBuf>,
    /// The kubeconfig file; `None`: as `kubectl` finds it (`KUBECONFIG`, `~/.kube/config`,
    /// in-cluster).
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The Pod `kube:IMAGE` starts from (resources, volumes, node selector, service account, …):
    /// its container named [`CONTAINER`] (added when it has none) gets the image.
    pub pod_template: Option<Pod>,
}

impl Default for KubernetesOptions {
    fn default() -> Self {
        Self {
            mode: KubernetesMode::Auto,
            namespace: None,
            start_timeout: Duration::from_secs(300),
            link_timeout: Duration::from_secs(30),
            agentd_binary: None,
            kubeconfig: None,
            pod_template: None,
        }
    }
}

/// A client and the namespace to work in, from the kubeconfig as `kubectl` finds it.
#[derive(Clone)]
pub struct Cluster {
    pub client: kube::Client,
    pub namespace: String,
}

impl Cluster {
    /// [`KubernetesOptions::kubeconfig`], else `KUBECONFIG`, `~/.kube/config` or the in-cluster
    /// service account; [`KubernetesOptions::namespace`] overrides the context's.
    pub async fn connect(options: &KubernetesOptions) -> Result<Self> {
        let unconfigured = |e: String| SandboxError::Provider {
            provider: PROVIDER,
            status: None,
            message: format!("no cluster configuration (KUBECONFIG, ~/.kube/config, in-cluster): {e}"),
        };
        let config = match &options.kubeconfig {
            Some(path) => {
                let file =
                    kube::config::Kubeconfig::read_from(path).map_err(|e| unconfigured(e.to_string()))?;
                kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                    .await
                    .map_err(|e| unconfigured(e.to_string()))?
            }
            None => kube::Config::infer().await.map_err(|e| unconfigured(e.to_string()))?,
        };
        let namespace = options.namespace.clone().unwrap_or_else(|| config.default_namespace.clone());
        let client = kube::Client::try_from(config).map_err(|e| kube_error(e, "the cluster's client"))?;
        Ok(Self { client, namespace })
    }

    pub fn pods(&self) -> kube::Api<Pod> {
        kube::Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The id of `name` in this namespace.
    pub fn id(&self, name: &str) -> String {
        format!("{}/{name}", self.namespace)
    }

    /// `[NAMESPACE/]NAME` → this cluster in that namespace, and NAME.
    pub fn at(&self, id: &str) -> Result<(Cluster, String)> {
        let (namespace, name) = match id.split_once('/') {
            Some((namespace, name)) => (namespace, name),
            None => (self.namespace.as_str(), id),
        };
        for part in [namespace, name] {
            if !is_dns_label(part) {
                return Err(SandboxError::BadId { provider: PROVIDER, id: id.to_owned() });
            }
        }
        Ok((Cluster { client: self.client.clone(), namespace: namespace.to_owned() }, name.to_owned()))
    }
}

/// A Kubernetes name part: lower-case alphanumerics and `-` (`.` for names), at most 253.
fn is_dns_label(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !text.starts_with(['-', '.'])
}

/// What a sandbox is on the cluster: a plain Pod, or a claim (whose Sandbox and Pod the
/// agent-sandbox controller owns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backing {
    Pod,
    Claim { claim: String },
}

/// The Kubernetes side of one sandbox ([`Machine`]).
pub struct Kubernetes {
    cluster: Cluster,
    /// `NAMESPACE/NAME` (the Pod's, or the claim's).
    id: String,
    backing: Backing,
    exec: PodExec,
    link_timeout: Duration,
}

/// A sandbox on Kubernetes with agentd in it.
pub type KubernetesSandbox = Linked<Kubernetes>;

/// The Pod `kube:IMAGE` makes from `template` (else an empty Pod): the container [`CONTAINER`] (added
/// when missing) runs the image, kept alive by a shell loop unless the template gives its command;
/// no service-account token and `restartPolicy: Never` unless the template says otherwise;
/// labelled and annotated for `sandbox ls`.
pub fn pod_manifest(image: &str, template: Option<&Pod>) -> Pod {
    let mut pod = template.cloned().unwrap_or_default();
    if pod.metadata.name.is_none() {
        pod.metadata.generate_name = Some("agentd-".to_owned());
    }
    pod.metadata.labels.get_or_insert_default().insert(LABEL.to_owned(), "1".to_owned());
    pod.metadata
        .annotations
        .get_or_insert_default()
        .insert(SOURCE_ANNOTATION.to_owned(), format!("kube:{image}"));
    let spec = pod.spec.get_or_insert_default();
    spec.restart_policy.get_or_insert_with(|| "Never".to_owned());
    spec.automount_service_account_token.get_or_insert(false);
    spec.termination_grace_period_seconds.get_or_insert(5);
    if !spec.containers.iter().any(|c| c.name == CONTAINER) {
        spec.containers.insert(
            0,
            k8s_openapi::api::core::v1::Container { name: CONTAINER.to_owned(), ..Default::default() },
        );
    }
    for container in spec.containers.iter_mut().filter(|c| c.name == CONTAINER) {
        container.image = Some(image.to_owned());
        if container.command.is_none() {
            let keep_alive = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done";
            container.command = Some(vec!["sh".to_owned(), "-c".to_owned(), keep_alive.to_owned()]);
        }
    }
    pod
}

impl Linked<Kubernetes> {
    /// Creates a Pod from `image`, waits until it is ready, puts agentd in and links to it.
    pub async fn create(image: &str, options: &KubernetesOptions) -> Result<Self> {
        let cluster = Cluster::connect(options).await?;
        let pods = cluster.pods();
        let created = pods
            .create(&PostParams::default(), &pod_manifest(image, options.pod_template.as_ref()))
            .await
            .map_err(|e| kube_error(e, "Pod"))?;
        let name = created.metadata.name.unwrap_or_default();
        tracing::info!(pod = %cluster.id(&name), "created Kubernetes Pod from `{image}`");
        let delete = {
            let (pods, name) = (pods.clone(), name.clone());
            async move { delete_pod(&pods, &name).await }
        };
        let make = async {
            let pod = wait_ready(&pods, &name, options.start_timeout).await?;
            Self::on_pod(cluster.clone(), &pod, Backing::Pod, options, true).await
        };
        made_or_deleted(&format!("Kubernetes Pod {}", cluster.id(&name)), delete, make).await
    }

    /// Claims a Sandbox from the warm pool `pool` (agent-sandbox), waits until it is ready, puts
    /// agentd in and links to it.
    pub async fn claim(pool: &str, options: &KubernetesOptions) -> Result<Self> {
        let cluster = Cluster::connect(options).await?;
        let claim = claim::create(&cluster, pool).await?;
        tracing::info!(claim = %cluster.id(&claim), "claimed a Sandbox from warm pool `{pool}`");
        let delete = {
            let (cluster, claim) = (cluster.clone(), claim.clone());
            async move { claim::delete(&cluster, &claim).await }
        };
        let make = async {
            let pod_name = claim::wait_ready(&cluster, &claim, options.start_timeout).await?;
            let pod = wait_ready(&cluster.pods(), &pod_name, options.start_timeout).await?;
            Self::on_pod(cluster.clone(), &pod, Backing::Claim { claim: claim.clone() }, options, true).await
        };
        made_or_deleted(&format!("SandboxClaim {}", cluster.id(&claim)), delete, make).await
    }

    /// Attaches to `[NAMESPACE/]NAME`: a claim of that name, else a Pod.
    pub async fn attach(id: &str, options: &KubernetesOptions) -> Result<Self> {
        let (cluster, name) = Cluster::connect(options).await?.at(id)?;
        let (pod_name, backing) = match claim::pod_of(&cluster, &name).await? {
            Some(pod) => (pod, Backing::Claim { claim: name }),
            None => (name, Backing::Pod),
        };
        let pod = wait_ready(&cluster.pods(), &pod_name, options.start_timeout).await?;
        Self::on_pod(cluster, &pod, backing, options, false).await
    }

    async fn on_pod(
        cluster: Cluster,
        pod: &Pod,
        backing: Backing,
        options: &KubernetesOptions,
        owned: bool,
    ) -> Result<Self> {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        // The sandbox's container: ours, else the Pod's first (a template's).
        let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
        let container =
            containers.iter().find(|c| c.name == CONTAINER).or(containers.first()).map(|c| c.name.clone());
        let id = match &backing {
            Backing::Pod => cluster.id(&pod_name),
            Backing::Claim { claim } => cluster.id(claim),
        };
        let exec = PodExec { pods: cluster.pods(), pod: pod_name, container };
        let machine = Kubernetes { cluster, id, backing, exec, link_timeout: options.link_timeout };
        Linked::setup(machine, options.mode.into(), options.agentd_binary.clone(), owned).await
    }

    /// The channel `execute`, the verbs and the offload use.
    pub fn channel(&self) -> Channel {
        if self.linked() { Channel::Link } else { Channel::PodExec }
    }

    /// The Pod the sandbox runs in.
    pub fn pod(&self) -> &str {
        &self.machine().exec.pod
    }

    /// A plain Pod, or a claim.
    pub fn backing(&self) -> &Backing {
        &self.machine().backing
    }

    /// The client and namespace.
    pub fn cluster(&self) -> &Cluster {
        &self.machine().cluster
    }
}

#[async_trait]
impl Machine for Kubernetes {
    const PROVIDER: &'static str = PROVIDER;
    const EXEC: &'static str = "pod exec";
    const TRANSFERS_OVER_LINK: bool = true;

    fn id(&self) -> &str {
        &self.id
    }

    fn run_dir(&self) -> &str {
        RUN_DIR
    }

    async fn exec(&self, command: &str, timeout: Option<Duration>) -> Result<ExecuteResponse> {
        argv::sh_execute(&self.exec, RUN_DIR, command, timeout).await
    }

    async fn upload(&self, files: &[(String, Vec<u8>)]) -> Result<Vec<FileUploadResponse>> {
        argv::upload(&self.exec, files).await
    }

    async fn download(&self, paths: &[String]) -> Result<Vec<FileDownloadResponse>> {
        argv::download(&self.exec, paths).await
    }

    async fn connector(self: Arc<Self>, agentd: &str) -> Result<Box<dyn Connector>> {
        Ok(Box::new(BridgeConnector {
            exec: self.exec.clone(),
            agentd: agentd.to_owned(),
            run_dir: RUN_DIR.to_owned(),
            timeout: self.link_timeout,
        }))
    }

    async fn delete(&self) -> Result<()> {
        match &self.backing {
            Backing::Pod => delete_pod(&self.cluster.pods(), &self.exec.pod).await,
            Backing::Claim { claim } => claim::delete(&self.cluster, claim).await,
        }
    }

    /// Stops the agentd this host started (the next host starts its own).
    async fn detach(&self) -> Result<()> {
        let stop =
            format!("kill $(cat {RUN_DIR}/pid) 2>/dev/null; rm -f {RUN_DIR}/pid {RUN_DIR}/agentd.sock");
        argv::sh(&self.exec, &stop, None).await.map(drop)
    }
}

async fn delete_pod(pods: &kube::Api<Pod>, name: &str) -> Result<()> {
    match pods.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(kube_error(err, &format!("Pod {name}"))),
    }
}

/// Why a Pod will not become ready without someone changing something, if it will not: a container
/// whose image cannot be had, or that cannot be made.
fn stuck(pod: &Pod) -> Option<String> {
    const HOPELESS: [&str; 6] = [
        "ErrImageNeverPull",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    ];
    let status = pod.status.as_ref()?;
    let containers =
        status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten());
    for container in containers {
        let waiting = container.state.as_ref().and_then(|s| s.waiting.as_ref());
        if let Some(waiting) = waiting
            && let Some(reason) = waiting.reason.as_deref().filter(|r| HOPELESS.contains(r))
        {
            let message = waiting.message.as_deref().unwrap_or_default();
            return Some(format!("container {}: {reason}: {message}", container.name));
        }
    }
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        let why = status.message.clone().or(status.reason.clone()).unwrap_or_default();
        return Some(format!("the Pod ended ({}) {why}", status.phase.as_deref().unwrap_or_default()));
    }
    None
}

/// What keeps a Pod waiting (the scheduler's reason, a container's), for the error at the deadline.
fn waiting_reason(pod: &Pod) -> String {
    let Some(status) = pod.status.as_ref() else { return "no status yet".to_owned() };
    for condition in status.conditions.iter().flatten() {
        if condition.status == "False"
            && let Some(reason) = &condition.reason
        {
            return format!(
                "{} {reason}: {}",
                condition.type_,
                condition.message.as_deref().unwrap_or_default()
            );
        }
    }
    format!("phase {}", status.phase.as_deref().unwrap_or("unknown"))
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The Pod `name` once Ready; the kubelet's reason at once when it cannot be; the last reason it
/// waited for at the deadline.
pub async fn wait_ready(pods: &kube::Api<Pod>, name: &str, timeout: Duration) -> Result<Pod> {
    let deadline = Instant::now() + timeout;
    let mut delay = Duration::from_millis(20);
    loop {
        let pod = pods.get(name).await.map_err(|e| kube_error(e, &format!("Pod {name}")))?;
        if is_ready(&pod) {
            return Ok(pod);
        }
        if let Some(why) = stuck(&pod) {
            return Err(SandboxError::Provider {
                provider: PROVIDER,
                status: None,
                message: format!("Pod {name} cannot start: {why}"),
            });
        }
        if Instant::now() >= deadline {
            return Err(SandboxError::Timeout {
                what: format!("Kubernetes Pod {name} to be Ready ({})", waiting_reason(&pod)),
                after: timeout,
            });
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(250));
    }
}

/// Kubernetes as a [`Provider`]: `kube:IMAGE`, `kube-claim:POOL`, `kube-attach:[NAMESPACE/]NAME`.
#[derive(Default)]
pub struct KubernetesProvider {
    options: KubernetesOptions,
}

impl KubernetesProvider {
    pub fn new(options: KubernetesOptions) -> Self {
        Self { options }
    }

    async fn cluster(&self) -> Result<Cluster> {
        Cluster::connect(&self.options).await
    }
}

#[async_trait]
impl Provider for KubernetesProvider {
    fn kind(&self) -> Kind {
        KIND
    }

    /// `source` is an image, or `claim=POOL` (the spec `kube-claim:POOL`).
    async fn create(&self, source: &str) -> Result<Box<dyn BaseSandbox>> {
        match source.strip_prefix(claim::SOURCE_TAG) {
            Some(pool) => Ok(Box::new(KubernetesSandbox::claim(pool, &self.options).await?)),
            None => Ok(Box::new(KubernetesSandbox::create(source, &self.options).await?)),
        }
    }

    async fn attach(&self, id: &str) -> Result<Box<dyn BaseSandbox>> {
        Ok(Box::new(KubernetesSandbox::attach(id, &self.options).await?))
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        let cluster = self.cluster().await?;
        let selector = ListParams::default().labels(&format!("{LABEL}=1"));
        let pods = cluster.pods().list(&selector).await.map_err(|e| kube_error(e, "Pods"))?;
        let mut found: Vec<SandboxInfo> = pods
            .items
            .into_iter()
            .map(|pod| SandboxInfo {
                kind: KIND,
                id: cluster.id(pod.metadata.name.as_deref().unwrap_or_default()),
                source: annotation(&pod.metadata.annotations, SOURCE_ANNOTATION),
                state: pod.status.and_then(|s| s.phase).unwrap_or_default().to_lowercase(),
            })
            .collect();
        found.extend(claim::list(&cluster).await?);
        Ok(found)
    }

    async fn remove(&self, id: &str) -> Result<()> {
        let (cluster, name) = self.cluster().await?.at(id)?;
        if claim::exists(&cluster, &name).await? {
            return claim::delete(&cluster, &name).await;
        }
        match cluster.pods().delete(&name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(err) => Err(kube_error(err, &format!("Pod {id}"))),
        }
    }

    async fn pause(&self, id: &str) -> Result<()> {
        let (cluster, name) = self.cluster().await?.at(id)?;
        claim::set_operating_mode(&cluster, &name, claim::SUSPENDED, self.options.start_timeout).await
    }

    async fn resume(&self, id: &str) -> Result<()> {
        let (cluster, name) = self.cluster().await?.at(id)?;
        claim::set_operating_mode(&cluster, &name, claim::RUNNING, self.options.start_timeout).await
    }
}

fn annotation(annotations: &Option<BTreeMap<String, String>>, key: &str) -> String {
    annotations.as_ref().and_then(|a| a.get(key)).cloned().unwrap_or_default()
}

/// A fresh name for what this adapter creates: `agentd-` and 12 hex digits.
pub fn fresh_name() -> String {
    format!("agentd-{}", &random_hex()[..12])
}

/// Why no cluster can be reached, when nothing `kubectl` would read is there: no `KUBECONFIG`, no
/// `~/.kube/config`, not in a Pod (`KUBERNETES_SERVICE_HOST`) (the kinds table's `missing`).
pub fn missing() -> Option<String> {
    let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let home_config = std::env::var_os("HOME")
        .is_some_and(|home| std::path::Path::new(&home).join(".kube/config").is_file());
    (!set("KUBECONFIG") && !home_config && !set("KUBERNETES_SERVICE_HOST")).then(|| {
        "kube sandboxes need a cluster as kubectl finds it: KUBECONFIG, ~/.kube/config, or in-cluster \
         credentials"
            .to_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pod_manifest_is_labelled_and_kept_alive() {
        let pod = pod_manifest("agentd-base-debian:latest", None);
        assert_eq!(pod.metadata.labels.unwrap()[LABEL], "1");
        assert_eq!(pod.metadata.annotations.unwrap()[SOURCE_ANNOTATION], "kube:agentd-base-debian:latest");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.containers[0].image.as_deref(), Some("agentd-base-debian:latest"));
        assert_eq!(spec.containers[0].name, CONTAINER);
        // A template's own settings stay; its container gets the image.
        let template: Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "labels": { "team": "a" } },
            "spec": { "automountServiceAccountToken": true, "containers": [{ "name": "sandbox", "workingDir": "/w" }] },
        }))
        .unwrap();
        let pod = pod_manifest("img", Some(&template));
        assert_eq!(pod.metadata.labels.as_ref().unwrap()["team"], "a");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.automount_service_account_token, Some(true));
        assert_eq!(spec.containers.len(), 1);
        assert_eq!(spec.containers[0].working_dir.as_deref(), Some("/w"));
        assert_eq!(spec.containers[0].image.as_deref(), Some("img"));
    }

    #[test]
    fn ids_are_namespace_and_name() {
        let ok = |id: &str| is_dns_label(id);
        assert!(ok("agentd-1f2e") && ok("a.b"));
        for bad in ["", "-a", "A", "a/b", "a b", "../x", "x\n"] {
            assert!(!ok(bad), "{bad:?}");
        }
    }
}
