//! The sandboxes the suite runs on: each factory makes one native sandbox and its derived twin over
//! one workspace (a [`Target`]), or skips (and returns `None`) when its requirement is missing.

#![expect(
    clippy::expect_used,
    reason = "factories outside #[test] functions: a failed setup step aborts the test with its message"
)]

use std::sync::Arc;

use agentd_fakes::fake_daytona::FakeDaytona;
use agentd_fakes::fake_kube::FakeKube;
use agentd_fakes::fake_modal::FakeModal;
use agentd_host::adapters::daytona::{Channel, DaytonaConfig, DaytonaMode, DaytonaOptions, DaytonaSandbox};
use agentd_host::adapters::kubernetes::{self, KubernetesMode, KubernetesOptions, KubernetesSandbox};
use agentd_host::adapters::modal::{self, ModalConfig, ModalMode, ModalOptions, ModalSandbox};
use agentd_host::{BaseSandbox, LocalSandbox};
use agentd_tests::{ExecOnly, ShellSandbox};

use crate::harness::Target;

/// A local agentd (LocalSandbox); derived: a local `/bin/sh -c` in its workspace (ShellSandbox).
/// Without the embedded default's profile: the cases compare the verbs' semantics with a shell of the
/// test's own user, on fixtures the test makes as that user (under the profile the file work is the
/// sandbox user's, whose walls `walls.rs` tries).
pub async fn local() -> Option<Target> {
    let local = Arc::new(LocalSandbox::start_unconfined().await.expect("start a local agentd"));
    let ws = local.workspace().to_owned();
    let derived = Box::new(ShellSandbox::new(&ws));
    Some(Target { native: local.clone(), derived, ws, keep: Box::new(local) })
}

/// agentd baked into `agentd-busybox`.
pub async fn docker_busybox_baked() -> Option<Target> {
    docker("agentd-busybox:latest", false).await
}

/// The static agentd injected into a plain busybox container.
pub async fn docker_busybox_injected() -> Option<Target> {
    docker("agentd-base-busybox:latest", true).await
}

/// agentd baked into `agentd-debian`.
pub async fn docker_debian_baked() -> Option<Target> {
    docker("agentd-debian:latest", false).await
}

/// The static agentd injected into a plain Debian container.
pub async fn docker_debian_injected() -> Option<Target> {
    docker("agentd-base-debian:latest", true).await
}

/// A container of `image` (agentd baked, or injected) with a fresh workspace bind-mounted at the same
/// path; derived: the same container through its exec channel only ([`ExecOnly`]). Skips when the
/// engine or the image is missing.
async fn docker(image: &str, inject: bool) -> Option<Target> {
    if !agentd_tests::docker_available(image).await {
        return None;
    }
    let workspace = tempfile::tempdir().expect("tempdir");
    let ws = workspace.path().canonicalize().expect("canonical");
    let (sandbox, container) = agentd_tests::docker_sandbox(image, inject, &ws).await;
    let native: Arc<dyn BaseSandbox> = Arc::new(sandbox);
    let derived = Box::new(ExecOnly(Arc::clone(&native)));
    // The container goes before its workspace (tuple fields drop in order).
    let keep = (container, workspace);
    Some(Target { native, derived, ws, keep: Box::new(keep) })
}

/// A Daytona sandbox made through the fake from `agentd-base-debian` (agentd injected) over the
/// preview link; derived: the same sandbox through `execute` over that link ([`ExecOnly`]).
pub async fn daytona_link() -> Option<Target> {
    let (fake, workspace, ws) = daytona_fake().await?;
    let sandbox = daytona_sandbox(&fake, DaytonaMode::Link).await;
    assert_eq!(sandbox.channel(), Channel::Link);
    let native: Arc<dyn BaseSandbox> = Arc::new(sandbox);
    let derived = Box::new(ExecOnly(Arc::clone(&native)));
    let keep = (Arc::clone(&native), fake, workspace);
    Some(Target { native, derived, ws, keep: Box::new(keep) })
}

/// The toolbox-exec fallback: a Daytona sandbox made through the fake in
/// [`DaytonaMode::ToolboxExec`], whose verbs and offload take the derived path through the toolbox
/// exec, is the derived side; the native side is the same Daytona sandbox attached over the preview
/// link (a second injected agentd in the same container), so both see the same files and cwd.
pub async fn daytona_toolbox() -> Option<Target> {
    let (fake, workspace, ws) = daytona_fake().await?;
    let toolbox = daytona_sandbox(&fake, DaytonaMode::ToolboxExec).await;
    assert_eq!(toolbox.channel(), Channel::ToolboxExec);
    let linked =
        DaytonaSandbox::attach(daytona_config(&fake), toolbox.id(), &daytona_options(DaytonaMode::Link))
            .await
            .expect("attach over the preview link");
    let native: Arc<dyn BaseSandbox> = Arc::new(linked);
    let derived = Box::new(toolbox);
    let keep = (Arc::clone(&native), fake, workspace);
    Some(Target { native, derived, ws, keep: Box::new(keep) })
}

const DAYTONA_IMAGE: &str = "agentd-base-debian:latest";

/// A fake Daytona whose containers bind-mount a fresh workspace at the same path and start in it.
/// One fake and sandbox per case (about 1–2.5 s each): a case's workspace is the sandbox's working
/// directory (relative paths) and is snapshotted whole, and the sandbox's connections live on the
/// case's runtime; sharing one per factory would make the cases take turns, which measured no
/// faster over the whole suite. Skips without Docker or the image.
async fn daytona_fake() -> Option<(FakeDaytona, tempfile::TempDir, std::path::PathBuf)> {
    if !agentd_tests::docker_available(DAYTONA_IMAGE).await {
        return None;
    }
    let workspace = tempfile::tempdir().expect("tempdir");
    let ws = workspace.path().canonicalize().expect("canonical");
    let fake = FakeDaytona::start();
    fake.mount(&ws);
    Some((fake, workspace, ws))
}

fn daytona_config(fake: &FakeDaytona) -> DaytonaConfig {
    DaytonaConfig::new(fake.api_url(), fake.api_key())
}

fn daytona_options(mode: DaytonaMode) -> DaytonaOptions {
    DaytonaOptions {
        mode,
        link_timeout: std::time::Duration::from_secs(20),
        agentd_binary: Some(agentd_tests::static_agentd()),
        ..DaytonaOptions::default()
    }
}

/// A sandbox on `fake` from [`DAYTONA_IMAGE`] (`daytona:IMAGE`, built through `buildInfo`).
async fn daytona_sandbox(fake: &FakeDaytona, mode: DaytonaMode) -> DaytonaSandbox {
    let started = std::time::Instant::now();
    let sandbox = DaytonaSandbox::create(daytona_config(fake), DAYTONA_IMAGE, &daytona_options(mode))
        .await
        .expect("create a Daytona sandbox through the fake");
    eprintln!("daytona create + inject ({mode:?}): {:?}", started.elapsed());
    sandbox
}

/// A Modal sandbox made through the fake from `agentd-base-debian` (agentd injected) over the
/// tunnel link; derived: the same sandbox through `execute` over that link ([`ExecOnly`]).
pub async fn modal_link() -> Option<Target> {
    let (fake, workspace, ws) = modal_fake().await?;
    let sandbox = modal_sandbox(&fake, ModalMode::Link).await;
    assert_eq!(sandbox.channel(), modal::Channel::Link);
    let native: Arc<dyn BaseSandbox> = Arc::new(sandbox);
    let derived = Box::new(ExecOnly(Arc::clone(&native)));
    let keep = (Arc::clone(&native), fake, workspace);
    Some(Target { native, derived, ws, keep: Box::new(keep) })
}

/// The router-exec fallback: a Modal sandbox made through the fake in [`ModalMode::RouterExec`]
/// (verbs and offload derived through the command router's exec) is the derived side; the native
/// side is the same sandbox attached over the tunnel link.
pub async fn modal_router() -> Option<Target> {
    let (fake, workspace, ws) = modal_fake().await?;
    let router = modal_sandbox(&fake, ModalMode::RouterExec).await;
    assert_eq!(router.channel(), modal::Channel::RouterExec);
    let linked = ModalSandbox::attach(modal_config(&fake), router.id(), &modal_options(ModalMode::Link))
        .await
        .expect("attach over the tunnel link");
    let native: Arc<dyn BaseSandbox> = Arc::new(linked);
    let derived = Box::new(router);
    let keep = (Arc::clone(&native), fake, workspace);
    Some(Target { native, derived, ws, keep: Box::new(keep) })
}

/// A fake Modal whose containers bind-mount a fresh workspace at the same path and start in it
/// (one per case, as [`daytona_fake`]). Skips without Docker or the image.
async fn modal_fake() -> Option<(FakeModal, tempfile::TempDir, std::path::PathBuf)> {
    if !agentd_tests::docker_available(DAYTONA_IMAGE).await {
        return None;
    }
    let workspace = tempfile::tempdir().expect("tempdir");
    let ws = workspace.path().canonicalize().expect("canonical");
    let fake = FakeModal::start();
    fake.mount(&ws);
    Some((fake, workspace, ws))
}

fn modal_config(fake: &FakeModal) -> ModalConfig {
    ModalConfig::new(fake.server_url(), fake.token_id(), fake.token_secret())
}

fn modal_options(mode: ModalMode) -> ModalOptions {
    ModalOptions {
        mode,
        link_timeout: std::time::Duration::from_secs(20),
        agentd_binary: Some(agentd_tests::static_agentd()),
        ..ModalOptions::default()
    }
}

/// A sandbox on `fake` from `agentd-base-debian` (`modal:IMAGE`).
async fn modal_sandbox(fake: &FakeModal, mode: ModalMode) -> ModalSandbox {
    let started = std::time::Instant::now();
    let sandbox = ModalSandbox::create(modal_config(fake), DAYTONA_IMAGE, &modal_options(mode))
        .await
        .expect("create a Modal sandbox through the fake");
    eprintln!("modal create + inject ({mode:?}): {:?}", started.elapsed());
    sandbox
}

/// A Pod through the fake Kubernetes API from `agentd-debian` (agentd baked in) over the exec-stream
/// link; derived: the same sandbox through `execute` over that link ([`ExecOnly`]).
pub async fn kube_pod_baked() -> Option<Target> {
    kube_pod("agentd-debian:latest").await
}

/// The same from `agentd-base-debian` (agentd injected through exec).
pub async fn kube_pod_injected() -> Option<Target> {
    kube_pod(DAYTONA_IMAGE).await
}

/// A fake Kubernetes API, a fresh workspace, and a Pod spec that mounts it (`hostPath`) at the same
/// path and starts there (one per case, as [`daytona_fake`]). Skips without Docker or `image`.
async fn kube_fake(
    image: &str,
) -> Option<(FakeKube, tempfile::TempDir, std::path::PathBuf, serde_json::Value)> {
    if !agentd_tests::docker_available(image).await {
        return None;
    }
    let workspace = tempfile::tempdir().expect("tempdir");
    let ws = workspace.path().canonicalize().expect("canonical");
    let path = ws.to_str().expect("a UTF-8 workspace");
    let spec = serde_json::json!({
        "containers": [{
            "name": kubernetes::CONTAINER,
            "workingDir": path,
            "volumeMounts": [{ "name": "workspace", "mountPath": path }],
        }],
        "volumes": [{ "name": "workspace", "hostPath": { "path": path } }],
    });
    Some((FakeKube::start(), workspace, ws, spec))
}

fn kube_options(fake: &FakeKube) -> KubernetesOptions {
    KubernetesOptions {
        mode: KubernetesMode::Link,
        kubeconfig: Some(fake.kubeconfig_path().to_owned()),
        link_timeout: std::time::Duration::from_secs(20),
        agentd_binary: None,
        ..KubernetesOptions::default()
    }
}

async fn kube_pod(image: &str) -> Option<Target> {
    let (fake, workspace, ws, spec) = kube_fake(image).await?;
    let mut options = kube_options(&fake);
    options.pod_template = Some(serde_json::from_value(serde_json::json!({ "spec": spec })).expect("a Pod"));
    let started = std::time::Instant::now();
    let sandbox = KubernetesSandbox::create(image, &options).await.expect("a Pod through the fake");
    eprintln!("kube:{image}: {:?}", started.elapsed());
    let native: Arc<dyn BaseSandbox> = Arc::new(sandbox);
    let derived = Box::new(ExecOnly(Arc::clone(&native)));
    let keep = (Arc::clone(&native), fake, workspace);
    Some(Target { native, derived, ws, keep: Box::new(keep) })
}

/// A Sandbox claimed from a warm pool of one, from the template `agentctl sandbox kube-template`
/// makes (agentd copied in by an initContainer) with the workspace mounted.
pub async fn kube_claim() -> Option<Target> {
    use kubernetes::{Cluster, manifests};
    if !agentd_tests::docker_available(manifests::AGENTD_IMAGE).await {
        return None;
    }
    let (fake, workspace, ws, spec) = kube_fake(DAYTONA_IMAGE).await?;
    agentd_fakes::fake_kube::agent_sandbox::install(&fake);
    let mut template = manifests::sandbox_template("conformance", DAYTONA_IMAGE, manifests::AGENTD_IMAGE);
    let pod = &mut template["spec"]["podTemplate"]["spec"];
    pod["volumes"].as_array_mut().expect("volumes").push(spec["volumes"][0].clone());
    let container = &mut pod["containers"][0];
    container["workingDir"] = spec["containers"][0]["workingDir"].clone();
    container["volumeMounts"]
        .as_array_mut()
        .expect("mounts")
        .push(spec["containers"][0]["volumeMounts"][0].clone());
    let options = kube_options(&fake);
    let cluster = Cluster::connect(&options).await.expect("the fake's cluster");
    manifests::apply(&cluster, &[template, manifests::warm_pool("conformance", "conformance", 1)])
        .await
        .expect("the template and pool");
    let started = std::time::Instant::now();
    let sandbox = KubernetesSandbox::claim("conformance", &options).await.expect("a claim through the fake");
    eprintln!("kube-claim: {:?}", started.elapsed());
    let native: Arc<dyn BaseSandbox> = Arc::new(sandbox);
    let derived = Box::new(ExecOnly(Arc::clone(&native)));
    let keep = (Arc::clone(&native), fake, workspace);
    Some(Target { native, derived, ws, keep: Box::new(keep) })
}
