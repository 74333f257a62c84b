//! The provider interface (`agentd_host::provider`): a `KIND:SPEC` opened into a `dyn BaseSandbox`
//! that works the same whatever its kind, with the native link reachable through `.agentd()`;
//! Docker sandboxes listed by their label and removed by id. Docker tests skip (see
//! [`agentd_tests::skip`]) without the engine or the images `images/build.sh` builds.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use agentd_host::provider::{self, SandboxSpec};
use agentd_host::{BaseSandbox, LocalSandbox};

const DEBIAN: &str = "agentd-debian:latest";
const DEBIAN_BASE: &str = "agentd-base-debian:latest";

/// The contract and the native link answer alike through a `dyn BaseSandbox`.
async fn drive(sandbox: &dyn BaseSandbox) {
    let r = sandbox.execute("echo from-sh; exit 4", None).await.unwrap();
    assert_eq!((r.output.as_str(), r.exit_code), ("from-sh\n", Some(4)));
    // In the workspace (the default cwd), which every kind's commands and verbs may write.
    let cwd = sandbox.execute("pwd", None).await.unwrap().output;
    let path = format!("{}/provider-test.txt", cwd.trim_end());
    let up = sandbox.upload_files(&[(path.clone(), b"one\ntwo\n".to_vec())]).await.unwrap();
    assert_eq!(up[0].error, None);
    let read = sandbox.read(&path, 1, 5).await.unwrap();
    assert_eq!(read.file_data.unwrap().content, "two", "{:?}", read.error);
    let agentd = sandbox.agentd().expect("a sandbox over a link exposes it");
    let hello = agentd.link().await.unwrap().hello().clone();
    let pid = sandbox.execute("echo $PPID", None).await.unwrap();
    eprintln!("{}: agentd pid {} (a command's parent: {})", sandbox.id(), hello.pid, pid.output.trim());
}

#[tokio::test]
async fn local_spec_opens_a_private_agentd_and_close_stops_it() {
    let opened = provider::open(&"local".parse().unwrap()).await.unwrap();
    assert!(opened.created && opened.kind() == agentd_host::adapters::local::KIND);
    drive(opened.sandbox.as_ref()).await;
    let agentd_pid = opened.sandbox.agentd().unwrap().link().await.unwrap().hello().pid;
    assert!(std::path::Path::new(&format!("/proc/{agentd_pid}")).exists());
    opened.close().await.unwrap();
    let gone = || !std::path::Path::new(&format!("/proc/{agentd_pid}")).exists();
    assert!(agentd_tests::eventually(std::time::Duration::from_secs(5), gone).await, "agentd still runs");
    // Nothing of a local kind outlives its owner, so there is nothing to list or remove.
    let local = provider::provider(agentd_host::adapters::local::KIND).unwrap();
    assert!(local.list().await.unwrap().is_empty());
    assert!(local.remove("x").await.is_err());
}

#[tokio::test]
async fn wrappers_delegate_to_their_link() {
    let local = LocalSandbox::start().await.unwrap();
    let as_dyn: &dyn BaseSandbox = &local;
    assert_eq!(as_dyn.id(), local.agentd().id());
    assert!(std::ptr::eq(as_dyn.agentd().unwrap(), local.agentd()));
    let fs = as_dyn.write(&format!("{}/w.txt", local.workspace().display()), "x").await.unwrap();
    assert_eq!(fs.error, None);
    assert_eq!(std::fs::read_to_string(local.workspace().join("w.txt")).unwrap(), "x");
}

#[tokio::test]
async fn docker_create_is_listed_then_removed_by_close() {
    if !agentd_tests::docker_available(DEBIAN).await {
        return;
    }
    let spec: SandboxSpec = format!("docker:{DEBIAN}").parse().unwrap();
    let opened = provider::open(&spec).await.unwrap();
    let id = opened.sandbox.id().to_owned();
    let _remove = agentd_tests::RemoveOnDrop(id.clone());
    assert!(opened.created && opened.kind() == agentd_host::adapters::docker::KIND);
    drive(opened.sandbox.as_ref()).await;
    let docker = provider::provider(agentd_host::adapters::docker::KIND).unwrap();
    let listed = docker.list().await.unwrap();
    let info = listed.iter().find(|i| i.id == id).expect("the new container is listed");
    assert_eq!((info.kind, info.source.as_str()), (agentd_host::adapters::docker::KIND, DEBIAN));
    opened.close().await.unwrap();
    assert!(!docker.list().await.unwrap().iter().any(|i| i.id == id), "close removed it");
}

#[tokio::test]
async fn docker_attach_injects_and_close_leaves_the_container() {
    if !agentd_tests::docker_available(DEBIAN_BASE).await {
        return;
    }
    let container = agentd_tests::plain_container(DEBIAN_BASE, &[]);
    let _remove = agentd_tests::RemoveOnDrop(container.clone());
    let spec: SandboxSpec = format!("docker-attach:{container}").parse().unwrap();
    let opened = provider::open(&spec).await.unwrap();
    assert!(!opened.created);
    assert_eq!(opened.sandbox.id(), container);
    drive(opened.sandbox.as_ref()).await;
    opened.close().await.unwrap();
    let docker = provider::provider(agentd_host::adapters::docker::KIND).unwrap();
    // Still there: attaching does not own it. `remove` does.
    assert!(docker.list().await.unwrap().iter().any(|i| i.id == container));
    docker.remove(&container).await.unwrap();
    assert!(!docker.list().await.unwrap().iter().any(|i| i.id == container));
}
