//! agentctl from the shell: a one-shot exec on the embedded default, and a multi-step session
//! (up, upload, exec, download, down) against one local agentd.

// Test helpers outside #[test] functions: a failed step aborts the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use agentd_tests::binary;

fn agentctl(session: &std::path::Path) -> Command {
    let mut command = Command::new(binary("agentctl"));
    command.env("AGENTCTL_SESSION", session).env_remove("AGENTD_URL").env_remove("AGENTD_TOKEN");
    command
}

/// Runs `command`, which must succeed; returns its output.
fn succeed(command: &mut Command) -> std::process::Output {
    let out = command.output().unwrap();
    assert!(out.status.success(), "{:?} failed: {}", command, String::from_utf8_lossy(&out.stderr));
    out
}

#[test]
fn one_shot_exec_prints_output_and_exits_with_the_code() {
    let state = tempfile::tempdir().unwrap();
    let out = agentctl(&state.path().join("s.json"))
        .args(["exec", "--", "echo hello; echo err >&2; exit 5"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\nerr\n");
    let out = agentctl(&state.path().join("s.json"))
        .args(["--json", "exec", "--timeout", "0.3", "--env", "A=b", "--", "echo $A; sleep 5"])
        .output()
        .unwrap();
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((result["timed_out"].as_bool(), result["output"].as_str()), (Some(true), Some("b\n")));
    assert_eq!(out.status.code(), Some(143));
}

#[test]
fn up_upload_exec_download_down() {
    let state = tempfile::tempdir().unwrap();
    let session = state.path().join("session.json");
    succeed(agentctl(&session).arg("up"));
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&session).unwrap()).unwrap();
    let pid = saved["pid"].as_u64().unwrap();

    let local = state.path().join("in.txt");
    std::fs::write(&local, b"line one\nline two\n").unwrap();
    succeed(agentctl(&session).args(["upload", local.to_str().unwrap(), "data/in.txt"]));
    succeed(agentctl(&session).args(["exec", "--", "wc -l < data/in.txt > data/count.txt"]));
    let back = state.path().join("count.txt");
    succeed(agentctl(&session).args(["download", "data/count.txt", back.to_str().unwrap()]));
    assert_eq!(std::fs::read_to_string(&back).unwrap().trim(), "2");
    let out = agentctl(&session)
        .args(["--json", "download", "data/missing", back.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("file_not_found"));
    assert_eq!(
        std::fs::read_to_string(&back).unwrap().trim(),
        "2",
        "a failed download must not touch the file"
    );

    // The session file holds no secret, and a command that uses it to drive its own agentd (the
    // attack: read ~/.agentd/session.json, connect, write outside the profile's roots) is refused.
    let text = std::fs::read_to_string(&session).unwrap();
    assert!(saved["url"].as_str().unwrap().starts_with("unix:") && !text.contains("token"), "{text}");
    let outside = tempfile::tempdir().unwrap();
    let planted = outside.path().join("planted");
    let inner = format!(
        "AGENTCTL_SESSION={} {} write {} < /dev/null; echo inner=$?",
        session.display(),
        binary("agentctl").display(),
        planted.display()
    );
    let out = succeed(agentctl(&session).args(["exec", "--", &inner]));
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(printed.contains("403") && printed.contains("inner=125"), "{printed}");
    assert!(!planted.exists());

    succeed(agentctl(&session).arg("down"));
    assert!(!session.exists());
    let workspace = saved["workspace"].as_str().unwrap();
    assert!(!std::path::Path::new(workspace).exists());
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(stat.is_empty() || stat.contains(") Z"), "agentd {pid} still running");
}
