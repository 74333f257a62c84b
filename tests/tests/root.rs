//! `agentd serve --root DIR`: file verbs, transfers, exec `cwd` and capture paths see DIR as `/` and
//! cannot leave it. The swap races are in `root_races.rs`.

use agentd_host::{AgentdSandbox, BaseSandbox, SandboxError};
use agentd_protocol::{ErrorCode, ExecRequest, Offload};
use agentd_tests::Daemon;

#[tokio::test]
async fn paths_are_virtual_and_escapes_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let daemon = Daemon::start_with(&["--root", root_path.to_str().unwrap()]);
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "s3cret").unwrap();
    std::os::unix::fs::symlink(outside.path(), root_path.join("out")).unwrap();
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();

    // `/` is the root: an upload to /data/a.txt lands in DIR/data/a.txt.
    let up = sb.upload_files(&[("/data/a.txt".into(), b"hello\n".to_vec())]).await.unwrap();
    assert_eq!(up[0].error, None);
    assert_eq!(std::fs::read(root_path.join("data/a.txt")).unwrap(), b"hello\n");
    let read = sb.read("/data/a.txt", 0, 10).await.unwrap();
    assert_eq!(read.file_data.unwrap().content, "hello");
    let listed: Vec<String> =
        sb.ls("/data").await.unwrap().entries.unwrap().into_iter().map(|e| e.path).collect();
    assert_eq!(listed, ["/data/a.txt"]);

    // Leaving the root: `..`, or a link that points outside.
    let down = sb.download_files(&["/../etc/hostname".into(), "/out/secret".into()]).await.unwrap();
    let errors: Vec<_> = down.iter().map(|d| d.error.as_deref()).collect();
    assert_eq!(errors, [Some("invalid_path"), Some("invalid_path")]);
    assert_eq!(
        sb.read("/out/secret", 0, 10).await.unwrap().error.as_deref(),
        Some("File '/out/secret': invalid_path")
    );
    assert_eq!(sb.ls("/../").await.unwrap().error.as_deref(), Some("Path '/../': invalid_path"));
    let write = sb.write("/out/new", "x").await.unwrap();
    assert_eq!(write.error.as_deref(), Some("Failed to write file '/out/new': invalid_path"));
    assert!(!outside.path().join("new").exists());
    let edit = sb.edit("/out/secret", "s3", "xx", false).await.unwrap();
    assert_eq!(edit.error.as_deref(), Some("Error editing file '/out/secret': invalid_path"));
    assert_eq!(std::fs::read_to_string(outside.path().join("secret")).unwrap(), "s3cret");
    let up = sb.upload_files(&[("/out/planted".into(), b"x".to_vec())]).await.unwrap();
    assert_eq!(up[0].error.as_deref(), Some("invalid_path"));
    assert!(!outside.path().join("planted").exists());
}

/// An exec refused before it starts: `spawn_failed`, as for any unusable `cwd` or capture path.
async fn refused(sb: &AgentdSandbox, request: ExecRequest) -> String {
    match sb.exec(request, None).await {
        Err(SandboxError::Refused { code: ErrorCode::SpawnFailed, message }) => message,
        other => panic!("expected spawn_failed, got {other:?}"),
    }
}

fn offload(command: &str, capture_path: &str, inline_budget: u64) -> ExecRequest {
    ExecRequest {
        command: command.into(),
        offload: Some(Offload { capture_path: capture_path.into(), inline_budget }),
        ..ExecRequest::default()
    }
}

#[tokio::test]
async fn capture_paths_stay_under_the_root() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let daemon = Daemon::start_with(&["--root", root_path.to_str().unwrap()]);
    let outside = tempfile::tempdir().unwrap();
    let outside_path = outside.path().canonicalize().unwrap();
    let victim = outside_path.join("x");
    std::fs::write(&victim, "keep me").unwrap();
    std::os::unix::fs::symlink(&outside_path, root_path.join("out")).unwrap();
    std::os::unix::fs::symlink(&victim, root_path.join("lnk")).unwrap();
    std::fs::create_dir(root_path.join("sub")).unwrap();
    std::os::unix::fs::symlink(&victim, root_path.join("sub/lnk")).unwrap();
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();

    // Inline output (the file is removed) and offloaded output (the file is kept): either way the
    // outside file survives, untouched.
    let outside_rel = format!("/../{}/x", outside_path.file_name().unwrap().to_str().unwrap());
    for budget in [1_000_000, 0] {
        for path in [outside_rel.as_str(), "/../x", "/out/x", "out/x"] {
            let message = refused(&sb, offload("echo hi", path, budget)).await;
            assert!(message.contains("leaves the root"), "{path}: {message}");
        }
        // A capture path that is a link (to a file outside, or anywhere) is refused: the capture
        // file is created and removed by its own name, never through a link.
        for path in ["/lnk", "/sub/lnk"] {
            let message = refused(&sb, offload("echo hi", path, budget)).await;
            assert!(message.contains("symbolic links"), "{path}: {message}");
        }
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
    }

    // Inside the root: virtual paths, parents made, the virtual path in the result.
    let kept = sb.exec(offload("seq 1 1000", "/cap/deep/c", 10), None).await.unwrap();
    assert_eq!((kept.offloaded, kept.capture_path.as_deref()), (true, Some("/cap/deep/c")));
    assert_eq!(std::fs::read(root_path.join("cap/deep/c")).unwrap().len(), 3893);
    let inline = sb.exec(offload("echo hi", "cap/deep/c", 1000), None).await.unwrap();
    assert_eq!((inline.offloaded, inline.output.as_deref()), (false, Some("hi\n")));
    assert!(!root_path.join("cap/deep/c").exists(), "inline output removes the capture file");
}

#[tokio::test]
async fn cwd_stays_under_the_root() {
    let root = tempfile::tempdir().unwrap();
    let root_path = root.path().canonicalize().unwrap();
    let daemon = Daemon::start_with(&["--root", root_path.to_str().unwrap()]);
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), root_path.join("out")).unwrap();
    std::fs::create_dir(root_path.join("sub")).unwrap();
    std::os::unix::fs::symlink(root_path.join("sub"), root_path.join("in")).unwrap();
    let sb = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    let pwd = |cwd: Option<&str>| ExecRequest {
        command: "pwd -P".into(),
        cwd: cwd.map(str::to_owned),
        ..ExecRequest::default()
    };

    for cwd in ["/..", "/../", "..", "/sub/../..", "/out", "out/", "/in/../../"] {
        let message = refused(&sb, pwd(Some(cwd))).await;
        assert!(message.contains("working directory") && message.contains("leaves the root"), "{message}");
    }
    let missing = refused(&sb, pwd(Some("/missing"))).await;
    assert!(missing.contains("working directory `/missing` is not usable: No such file"), "{missing}");
    let real = |cwd: Option<&str>| {
        let sb = &sb;
        let request = pwd(cwd);
        async move { sb.exec(request, None).await.unwrap().output.unwrap() }
    };
    let root_text = root_path.to_str().unwrap();
    assert_eq!(real(None).await, format!("{root_text}\n"));
    assert_eq!(real(Some("/")).await, format!("{root_text}\n"));
    assert_eq!(real(Some("sub")).await, format!("{root_text}/sub\n"));
    assert_eq!(real(Some("/in")).await, format!("{root_text}/sub\n"));
}
