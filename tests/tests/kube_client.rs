//! The fake Kubernetes API server (`agentd_fakes::fake_kube`) driven by real clients: the official
//! `kubernetes` Python client (`tests/kube_client_check.py`, in the python `$AGENTD_KUBE_PYTHON`
//! names) and `kubectl`.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::time::{Duration, Instant};

use agentd_fakes::fake_kube::{CONTAINER_LABEL, FakeKube};
use agentd_tests::{Need, docker_available, skip};

const IMAGE: &str = "agentd-base-debian:latest";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_creates_watches_execs_and_deletes_a_pod() {
    if !docker_available(IMAGE).await {
        return;
    }
    let Some(python) = std::env::var_os("AGENTD_KUBE_PYTHON") else {
        skip(Need::KubeSdk, "AGENTD_KUBE_PYTHON is not set (.ci/run installs the client in a venv)");
        return;
    };
    let fake = FakeKube::start();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kube_client_check.py");
    let cwd = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(python);
    command.arg(&script).arg(IMAGE).current_dir(cwd.path()).kill_on_drop(true);
    command.env("KUBECONFIG", fake.kubeconfig_path());
    let started = Instant::now();
    let output = tokio::time::timeout(Duration::from_secs(180), command.output())
        .await
        .expect("the client script finishes")
        .expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!(
        "client script took {:?}; stderr:\n{}",
        started.elapsed(),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("requests the client made:\n  {}", fake.requests().join("\n  "));
    assert!(output.status.success(), "the client script failed:\n{stdout}");
    let expected = [
        "check created-phase Pending",
        "check created-uid True",
        "check conflict 409",
        "check missing 404",
        "check get-name kube-client-check",
        "check list kube-client-check",
        "check list-other 0",
        "check ready True",
        "check phase Running",
        "check pod-ip True",
        "check exec-stdout 'out\\n'",
        "check exec-stderr 'err\\n'",
        "check exec-code 3",
        "check exec-protocol v5.channel.k8s.io",
        "check stdin '12\\ndone\\n'",
        "check stdin-code 0",
        "check preloaded 'preloaded\\n'",
        "check deleted True",
        "done",
    ];
    assert_eq!(stdout.lines().collect::<Vec<_>>(), expected);
    let requests = fake.requests();
    assert!(requests.iter().any(|r| r.contains("watch=True") || r.contains("watch=true")), "{requests:?}");
    assert!(requests.iter().any(|r| r.contains("/pods/kube-client-check/exec?")), "{requests:?}");
    assert!(
        agentd_fakes::containers::listed(&format!("label={CONTAINER_LABEL}={}", fake.instance())).is_empty(),
        "the client's delete left containers"
    );
}

/// Runs `kubectl --kubeconfig <fake's> ARGS` with `stdin`; (exit code, stdout, stderr).
async fn kubectl(fake: &FakeKube, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    use tokio::io::AsyncWriteExt as _;
    let mut child = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(fake.kubeconfig_path())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).await.unwrap();
    }
    drop(input);
    let output =
        tokio::time::timeout(Duration::from_secs(90), child.wait_with_output()).await.unwrap().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_applies_waits_execs_and_deletes() {
    if !docker_available(IMAGE).await {
        return;
    }
    if std::process::Command::new("kubectl").args(["version", "--client"]).output().is_err() {
        skip(Need::Kubectl, "kubectl is not on the PATH (.ci/run installs Debian's kubernetes-client)");
        return;
    }
    // client-go sends the kubeconfig's token only over TLS: this fake serves HTTPS.
    let fake = FakeKube::start_tls();
    let (code, out, err) = kubectl(&fake, &["get", "pods"], None).await;
    assert_eq!((code, out.as_str(), err.trim()), (0, "", "No resources found in default namespace."));
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("pod.yaml");
    std::fs::write(
        &manifest,
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kc\n  labels:\n    app: kc\nspec:\n  containers:\n  \
             - name: main\n    image: {IMAGE}\n    imagePullPolicy: Never\n    command: [\"sleep\", \"infinity\"]\n"
        ),
    )
    .unwrap();
    // The fake serves no OpenAPI document, which kubectl's client-side validation downloads.
    let (code, out, err) =
        kubectl(&fake, &["apply", "--validate=false", "-f", manifest.to_str().unwrap()], None).await;
    assert_eq!((code, out.trim()), (0, "pod/kc created"), "{err}");
    let (code, out, err) =
        kubectl(&fake, &["wait", "--for=condition=Ready", "pod/kc", "--timeout=60s"], None).await;
    assert_eq!((code, out.trim()), (0, "pod/kc condition met"), "{err}");
    let (code, out, _) =
        kubectl(&fake, &["get", "pod", "kc", "-o", "jsonpath={.status.phase} {.spec.nodeName}"], None).await;
    assert_eq!((code, out.as_str()), (0, "Running fake-kube"));
    // The server's Table: kubectl's own columns.
    let (code, out, _) = kubectl(&fake, &["get", "pods"], None).await;
    let lines: Vec<Vec<&str>> = out.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!((code, lines[0].clone()), (0, vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE"]), "{out}");
    assert_eq!(lines[1][..4], ["kc", "1/1", "Running", "0"], "{out}");
    let (code, out, _) = kubectl(&fake, &["get", "pods", "-l", "app=kc", "-o", "name"], None).await;
    assert_eq!((code, out.as_str()), (0, "pod/kc\n"));

    // kubectl execs over websockets (v5.channel.k8s.io) from 1.30 on; older ones (Debian's 1.20)
    // speak only SPDY/3.1, which the fake does not serve: for them this step is left out.
    let (_, version, _) = kubectl(&fake, &["version", "--client", "-o", "json"], None).await;
    let version: serde_json::Value = serde_json::from_str(&version).unwrap();
    let minor: u32 =
        version["clientVersion"]["minor"].as_str().unwrap().trim_end_matches('+').parse().unwrap();
    if minor >= 30 {
        let (code, out, err) = kubectl(&fake, &["exec", "kc", "--", "echo", "hi"], None).await;
        assert_eq!((code, out.as_str()), (0, "hi\n"), "{err}");
        let (code, _, err) = kubectl(&fake, &["exec", "kc", "--", "sh", "-c", "exit 4"], None).await;
        assert_eq!(code, 4, "{err}");
        let (code, out, err) =
            kubectl(&fake, &["exec", "-i", "kc", "--", "sh", "-c", "wc -c"], Some("from stdin")).await;
        assert_eq!((code, out.trim()), (0, "10"), "{err}");
    } else {
        eprintln!("kubectl 1.{minor} execs over SPDY only: the exec step is left out");
    }
    let (code, out, err) = kubectl(&fake, &["delete", "pod", "kc"], None).await;
    assert_eq!((code, out.trim()), (0, "pod \"kc\" deleted"), "{err}");
    let (code, _, err) = kubectl(&fake, &["get", "pod", "kc"], None).await;
    assert_eq!((code, err.trim()), (1, "Error from server (NotFound): pods \"kc\" not found"));
}
