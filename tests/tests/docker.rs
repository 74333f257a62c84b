//! Containers on the real Docker engine: agentd baked into `agentd-busybox` / `agentd-debian` (built by
//! `images/build.sh`), and injected into a running container from a base image without it.
//!
//! Without a reachable engine (or without the images) each test prints one line and returns, unless
//! `AGENTD_REQUIRE_DOCKER=1` (set by `.ci/run`) makes that a failure.

// Test helpers outside #[test] functions: a failed step aborts the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use agentd_host::adapters::docker::{self, DockerSandbox};
use agentd_host::{BaseSandbox, Result as HostResult};
use agentd_protocol::fs::{FsRequest, FsResponse};
use agentd_protocol::{ExecRequest, ExecuteResponse, FileDownloadResponse, FileUploadResponse};
use sha2::{Digest as _, Sha256};

const BUSYBOX: &str = "agentd-busybox:latest";
const DEBIAN: &str = "agentd-debian:latest";
const BUSYBOX_BASE: &str = "agentd-base-busybox:latest";
const DEBIAN_BASE: &str = "agentd-base-debian:latest";

/// Whether the engine and `image` are there; prints why not (or fails when Docker is required).
async fn available(image: &str) -> bool {
    let reason = match docker::engine().await {
        Err(err) => Some(format!("{err}")),
        Ok(engine) => match engine.inspect_image(image).await {
            Ok(_) => None,
            Err(_) => Some(format!("image {image} is missing: run images/build.sh")),
        },
    };
    match reason {
        None => true,
        Some(reason) => {
            assert!(std::env::var_os("AGENTD_REQUIRE_DOCKER").is_none(), "Docker required but: {reason}");
            println!("skipped: {reason}");
            false
        }
    }
}

/// A running container from `image` with a shell that just waits (no agentd in it).
async fn plain_container(image: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["run", "-d", "--label", docker::LABEL, "--entrypoint", "/bin/sh", image, "-c", "sleep 3600"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn static_agentd() -> std::path::PathBuf {
    let release = agentd_tests::binary("agentd");
    let target = release.parent().and_then(|p| p.parent()).unwrap();
    let path = target.join("x86_64-unknown-linux-gnu/release/agentd");
    assert!(path.is_file(), "{} is missing: images/build.sh builds it", path.display());
    path
}

/// The same sandbox seen only through its four required members: the verbs take the derived path.
struct ExecOnly<'a>(&'a DockerSandbox);

#[agentd_host::async_trait]
impl BaseSandbox for ExecOnly<'_> {
    fn id(&self) -> &str {
        self.0.id()
    }
    fn agentd_command(&self) -> &str {
        self.0.agentd_command()
    }
    async fn execute(&self, command: &str, timeout: Option<Duration>) -> HostResult<ExecuteResponse> {
        self.0.execute(command, timeout).await
    }
    async fn upload_files(&self, files: &[(String, Vec<u8>)]) -> HostResult<Vec<FileUploadResponse>> {
        self.0.upload_files(files).await
    }
    async fn download_files(&self, paths: &[String]) -> HostResult<Vec<FileDownloadResponse>> {
        self.0.download_files(paths).await
    }
}

/// Verbs on a fixture inside the container: native (link) and derived (`agentd fs` through execute)
/// give identical results, and the golden values where the spec fixes them.
async fn verbs_agree(sb: &DockerSandbox) {
    let derived = ExecOnly(sb);
    let t = "/tmp/conf";
    let setup = format!(
        "rm -rf {t} && mkdir -p {t}/sub/deep {t}/.git && printf 'a\\r\\nb\\r\\nc\\r\\n' > {t}/crlf && \
         printf 'needle one\\nno\\nneedle two\\n' > {t}/a.py && printf 'xx needle\\n' > {t}/sub/b.py && \
         printf 'needle in git\\n' > {t}/.git/config && printf 'apple\\nbanana\\napple\\n' > {t}/fruit && \
         ln -s {t}/sub {t}/ln && ln -s nowhere {t}/bad && : > {t}/empty.txt"
    );
    let requests = vec![
        FsRequest::Ls { path: format!("{t}/") },
        FsRequest::Read { path: format!("{t}/crlf"), offset: 0, limit: 2000 },
        FsRequest::Read { path: format!("{t}/crlf"), offset: 1, limit: 1 },
        FsRequest::Read { path: format!("{t}/crlf"), offset: 3, limit: 2000 },
        FsRequest::Read { path: format!("{t}/empty.txt"), offset: 0, limit: 10 },
        FsRequest::Read { path: format!("{t}/missing"), offset: 0, limit: 10 },
        FsRequest::Grep { pattern: "needle".into(), path: Some(t.into()), glob: None, max_count: None },
        FsRequest::Grep {
            pattern: "needle".into(),
            path: Some(t.into()),
            glob: Some("**/*.py".into()),
            max_count: None,
        },
        FsRequest::Glob { pattern: "**/*.py".into(), path: Some(t.into()) },
        FsRequest::Edit {
            path: format!("{t}/fruit"),
            old: "apple".into(),
            new: "pear".into(),
            replace_all: false,
        },
        FsRequest::Edit {
            path: format!("{t}/fruit"),
            old: "apple".into(),
            new: "pear".into(),
            replace_all: true,
        },
        FsRequest::Edit {
            path: format!("{t}/crlf"),
            old: "b\nc".into(),
            new: "X\nY".into(),
            replace_all: false,
        },
        FsRequest::Write { path: format!("{t}/w/x/y.txt"), content: "hi\n".into() },
        FsRequest::Write { path: "rel.txt".into(), content: "x".into() },
        FsRequest::Delete { path: format!("{t}/ln") },
        FsRequest::Delete { path: format!("{t}/ln") },
    ];
    for request in requests {
        assert_eq!(sb.execute(&setup, None).await.unwrap().exit_code, Some(0));
        let native = sb.fs(request.clone()).await.unwrap();
        let native_state =
            sb.execute(&format!("cd {t} && find . | sort && cat fruit crlf"), None).await.unwrap();
        assert_eq!(sb.execute(&setup, None).await.unwrap().exit_code, Some(0));
        let derived_result = derived.fs(request.clone()).await.unwrap();
        let derived_state =
            sb.execute(&format!("cd {t} && find . | sort && cat fruit crlf"), None).await.unwrap();
        let (native, derived_result) = (sorted(native), sorted(derived_result));
        assert_eq!(native, derived_result, "native vs derived for {request:?}");
        assert_eq!(native_state.output, derived_state.output, "file state after {request:?}");
    }
    // Golden values the spec fixes.
    sb.execute(&setup, None).await.unwrap();
    let read = sb.read(&format!("{t}/crlf"), 0, 2000).await.unwrap();
    assert_eq!(read.file_data.unwrap().content, "a\nb\nc");
    let edit = sb.edit(&format!("{t}/fruit"), "apple", "pear", false).await.unwrap();
    assert_eq!(
        edit.error.as_deref(),
        Some(
            "Error: String 'apple' appears multiple times. Use replace_all=True to replace all occurrences."
        )
    );
    let grep = sb.grep("needle", Some(t), None, None).await.unwrap();
    assert_eq!(grep.matches.unwrap().len(), 3, "nothing from .git");
}

/// Route-A grep order is unspecified: compare as sorted.
fn sorted(response: FsResponse) -> FsResponse {
    match response {
        FsResponse::Grep(mut grep) => {
            if let Some(matches) = grep.matches.as_mut() {
                matches.sort();
            }
            FsResponse::Grep(grep)
        }
        other => other,
    }
}

async fn transfers(sb: &DockerSandbox) {
    let mut data = vec![0u8; 100 << 20];
    rand::Fill::fill(&mut data[..], &mut rand::rng());
    let digest = format!("{:x}", Sha256::digest(&data));
    // Through the archive API (the adapter's own channel).
    let up = sb.upload_files(&[("/tmp/big/archive.bin".into(), data.clone())]).await.unwrap();
    assert_eq!(up[0].error, None);
    let down = sb.download_files(&["/tmp/big/archive.bin".into()]).await.unwrap();
    assert_eq!(format!("{:x}", Sha256::digest(down[0].content.as_ref().unwrap())), digest);
    // Through the link.
    let link = sb.agentd().link().await.unwrap();
    assert_eq!(link.upload("/tmp/big/link.bin", data.as_slice(), |_| {}).await.unwrap(), None);
    let mut back = Vec::new();
    let done = link.download("/tmp/big/link.bin", &mut back, |_, _| {}).await.unwrap().unwrap();
    assert_eq!(
        (done.sha256.as_str(), format!("{:x}", Sha256::digest(&back))),
        (digest.as_str(), digest.clone())
    );
    // Per-file codes, in order.
    let down =
        sb.download_files(&["/tmp/missing".into(), "/tmp/big".into(), "relative".into()]).await.unwrap();
    let errors: Vec<_> = down.iter().map(|d| d.error.as_deref()).collect();
    assert_eq!(errors, [Some("file_not_found"), Some("is_directory"), Some("invalid_path")]);
    let up = sb
        .upload_files(&[
            ("/tmp/big".into(), b"x".to_vec()),
            ("rel".into(), vec![]),
            ("/tmp/n/deep/f".into(), b"\0\r\n\xff".to_vec()),
        ])
        .await
        .unwrap();
    let errors: Vec<_> = up.iter().map(|u| u.error.as_deref()).collect();
    assert_eq!(errors, [Some("is_directory"), Some("invalid_path"), None]);
    let down = sb.download_files(&["/tmp/n/deep/f".into()]).await.unwrap();
    assert_eq!(down[0].content.as_deref(), Some(&b"\0\r\n\xff"[..]));
}

#[tokio::test]
async fn baked_busybox_runs_commands_transfers_and_verbs() {
    if !available(BUSYBOX).await {
        return;
    }
    let sb = DockerSandbox::create(BUSYBOX).await.unwrap();
    let r = sb.execute("printf a; printf b >&2; exit 3", None).await.unwrap();
    assert_eq!((r.output.as_str(), r.exit_code), ("ab", Some(3)));
    transfers(&sb).await;
    verbs_agree(&sb).await;
    let id = sb.container().to_owned();
    sb.close().await.unwrap();
    let engine = docker::engine().await.unwrap();
    assert!(
        engine
            .inspect_container(&id, None::<bollard::query_parameters::InspectContainerOptions>)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn agentd_as_pid_1_reaps_orphans_keeps_exit_codes_and_stops_fast() {
    if !available(BUSYBOX).await {
        return;
    }
    let sb = DockerSandbox::create(BUSYBOX).await.unwrap();
    // 50 orphans that exit quickly, while other execs run and report their own codes.
    let orphans =
        sb.execute("for i in $(seq 50); do (sleep 0.2 &) ; done; echo spawned", None).await.unwrap();
    assert_eq!(orphans.output, "spawned\n");
    let link = sb.agentd();
    let codes = futures_util::future::join_all((0..20).map(|i| async move {
        let request =
            ExecRequest { command: format!("sleep 0.{}; exit {i}", i % 5), ..ExecRequest::default() };
        (i, link.exec(request, None).await.unwrap().exit_code)
    }))
    .await;
    for (i, code) in codes {
        assert_eq!(code, i);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let zombies = sb
        .execute("for s in /proc/[0-9]*/stat; do cut -d' ' -f3 $s; done | grep -c Z || true", None)
        .await
        .unwrap();
    assert_eq!(zombies.output.trim(), "0", "zombies left in the container");
    // A timeout kills the whole tree inside the container too.
    let start = Instant::now();
    let r = link
        .exec(
            ExecRequest {
                command: "sh -c 'sleep 100 & setsid sleep 100 & sleep 100'".into(),
                timeout: Some(0.5),
                ..ExecRequest::default()
            },
            None,
        )
        .await
        .unwrap();
    assert!(r.timed_out && start.elapsed() < Duration::from_secs(4));
    let left = sb.execute("ps | grep -c '[s]leep 100' || true", None).await.unwrap();
    assert_eq!(left.output.trim(), "0");
    // `docker stop` (SIGTERM to PID 1) ends it at once, not after the 10 s SIGKILL grace.
    let _running = sb.execute("sleep 300 > /dev/null 2>&1 &", None).await.unwrap();
    let start = Instant::now();
    let out = std::process::Command::new("docker").args(["stop", sb.container()]).output().unwrap();
    assert!(out.status.success());
    assert!(start.elapsed() < Duration::from_secs(3), "docker stop took {:?}", start.elapsed());
    sb.close().await.unwrap();
}

#[tokio::test]
async fn injected_into_a_busybox_container_without_agentd() {
    if !available(BUSYBOX_BASE).await {
        return;
    }
    let container = plain_container(BUSYBOX_BASE).await;
    let sb = DockerSandbox::attach(&container, &static_agentd()).await.unwrap();
    let r = sb.execute("echo injected; exit 4", None).await.unwrap();
    assert_eq!((r.output.as_str(), r.exit_code), ("injected\n", Some(4)));
    transfers(&sb).await;
    verbs_agree(&sb).await;
    let engine = docker::engine().await.unwrap();
    docker::remove(&engine, &container).await.unwrap();
}

#[tokio::test]
async fn debian_baked_and_injected() {
    if !available(DEBIAN).await || !available(DEBIAN_BASE).await {
        return;
    }
    let sb = DockerSandbox::create(DEBIAN).await.unwrap();
    let r = sb.execute("python3 -c 'print(6*7)'", None).await.unwrap();
    assert_eq!(r.output, "42\n");
    verbs_agree(&sb).await;
    sb.close().await.unwrap();
    let container = plain_container(DEBIAN_BASE).await;
    let sb = DockerSandbox::attach(&container, &static_agentd()).await.unwrap();
    verbs_agree(&sb).await;
    let engine = docker::engine().await.unwrap();
    docker::remove(&engine, &container).await.unwrap();
}
