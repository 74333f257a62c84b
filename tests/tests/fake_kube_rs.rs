//! The fake Kubernetes API server (`agentd_fakes::fake_kube`) driven by kube-rs, the client the
//! host's Kubernetes adapter uses: kubeconfig loading, typed create/get/list/delete with the
//! apiserver's errors, the runtime's watcher (list+watch and streaming lists) and `await_condition`,
//! exec over `v5.channel.k8s.io` with stdin closed and the exit status.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::time::Duration;

use agentd_fakes::fake_kube::FakeKube;
use agentd_tests::docker_available;
use futures_util::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{AttachParams, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt as _, conditions, wait::await_condition, watcher};
use kube::{Api, Client, Config};
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const IMAGE: &str = "agentd-base-debian:latest";

async fn client(fake: &FakeKube) -> Client {
    let kubeconfig = Kubeconfig::read_from(fake.kubeconfig_path()).unwrap();
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.unwrap();
    assert_eq!(config.default_namespace, "default");
    Client::try_from(config).unwrap()
}

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "kube-rs"}},
        "spec": {"containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "infinity"]}]},
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_creates_watches_execs_and_deletes() {
    if !docker_available(IMAGE).await {
        return;
    }
    for tls in [false, true] {
        let fake = if tls { FakeKube::start_tls() } else { FakeKube::start() };
        let client = client(&fake).await;
        let version = client.apiserver_version().await.unwrap();
        assert_eq!(version.major, "1");
        let pods: Api<Pod> = Api::default_namespaced(client.clone());

        // The runtime's watcher, in both its initial-list strategies, sees the pod appear.
        let listed =
            watcher(pods.clone(), watcher::Config::default().labels("app=kube-rs")).applied_objects();
        let streamed =
            watcher(pods.clone(), watcher::Config::default().labels("app=kube-rs").streaming_lists())
                .applied_objects();
        let name = "kube-rs";
        pods.create(&PostParams::default(), &pod(name)).await.unwrap();
        for mut stream in [listed.boxed(), streamed.boxed()] {
            let first = tokio::time::timeout(Duration::from_secs(20), stream.try_next()).await;
            let seen = first.expect("the watcher sees the pod").unwrap().unwrap();
            assert_eq!(seen.metadata.name.as_deref(), Some(name));
        }
        let running = tokio::time::timeout(
            Duration::from_secs(60),
            await_condition(pods.clone(), name, conditions::is_pod_running()),
        )
        .await
        .expect("running in time")
        .unwrap()
        .unwrap();
        let uid = running.metadata.uid.clone().unwrap();
        assert!(running.status.unwrap().pod_ip.is_some());

        // The apiserver's errors as kube's typed Status.
        match pods.create(&PostParams::default(), &pod(name)).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!((status.code, status.reason.as_str()), (409, "AlreadyExists"))
            }
            other => panic!("{other:?}"),
        }
        match pods.get("nope").await {
            Err(kube::Error::Api(status)) => {
                assert_eq!((status.code, status.message.as_str()), (404, "pods \"nope\" not found"))
            }
            other => panic!("{other:?}"),
        }
        let list = pods.list(&ListParams::default().labels("app=kube-rs")).await.unwrap();
        assert_eq!(list.items.len(), 1);
        assert!(list.metadata.resource_version.is_some());

        // Server-side apply creates, then merges; a merge patch changes labels.
        let maps: Api<ConfigMap> = Api::default_namespaced(client.clone());
        let apply = PatchParams::apply("fake-kube-test");
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"a": "1"}});
        let created = maps.patch("applied", &apply, &Patch::Apply(&config)).await.unwrap();
        assert_eq!(created.data.unwrap()["a"], "1");
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"a": "2"}});
        let updated = maps.patch("applied", &apply, &Patch::Apply(&config)).await.unwrap();
        assert_eq!(updated.data.unwrap()["a"], "2");
        let labelled = pods
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"extra": "yes"}}})),
            )
            .await
            .unwrap();
        assert_eq!(labelled.metadata.labels.unwrap()["extra"], "yes");

        // Exec on v5: stdin written then shut down (the close signal), stdout, the exit status.
        let params = AttachParams::default().stdin(true).stdout(true).stderr(true);
        let mut attached =
            pods.exec(name, ["sh", "-c", "wc -c; echo err >&2; exit 3"], &params).await.unwrap();
        let mut stdin = attached.stdin().unwrap();
        stdin.write_all(b"seven b").await.unwrap();
        stdin.shutdown().await.unwrap();
        let mut stdout = attached.stdout().unwrap();
        let mut stderr = attached.stderr().unwrap();
        let status = attached.take_status().unwrap();
        let (mut out, mut err) = (String::new(), String::new());
        stdout.read_to_string(&mut out).await.unwrap();
        stderr.read_to_string(&mut err).await.unwrap();
        let status = tokio::time::timeout(Duration::from_secs(30), status).await.unwrap().unwrap();
        assert_eq!((out.trim(), err.as_str()), ("7", "err\n"));
        assert_eq!(status.status.as_deref(), Some("Failure"));
        assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
        let causes = status.details.unwrap().causes.unwrap();
        assert_eq!(
            (causes[0].reason.as_deref(), causes[0].message.as_deref()),
            (Some("ExitCode"), Some("3"))
        );
        attached.join().await.unwrap();
        let mut attached = pods.exec(name, ["true"], &AttachParams::default().stdout(true)).await.unwrap();
        let status = attached.take_status().unwrap().await.unwrap();
        assert_eq!(status.status.as_deref(), Some("Success"));

        // Delete: the pod, Terminating, then gone.
        let deleted = pods.delete(name, &DeleteParams::default()).await.unwrap();
        assert!(deleted.left().is_some_and(|p| p.metadata.deletion_timestamp.is_some()));
        let gone = tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(pods.clone(), name, conditions::is_deleted(&uid)),
        )
        .await;
        assert!(gone.is_ok(), "the pod stayed");
    }
}
