//! `agentd serve --root DIR`: file verbs and transfers see DIR as `/` and cannot leave it.

// Test helpers outside #[test] functions: a failed step aborts the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use agentd_host::{AgentdSandbox, BaseSandbox};
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
