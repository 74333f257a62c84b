//! The wire protocol spoken by hand: auth, handshake, bad input, in-flight isolation, interrupted
//! uploads. A real agentd, a raw websocket.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::time::Duration;

use agentd_host::{AgentdSandbox, SandboxError};
use agentd_tests::{Daemon, Ws, raw_connect, recv_json, send_text};
use futures_util::SinkExt as _;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{self, Message};

async fn greeted(daemon: &Daemon) -> Ws {
    let mut ws = raw_connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    send_text(&mut ws, json!({"type": "hello", "id": 0, "versions": [1]}).to_string()).await;
    let hello = recv_json(&mut ws).await;
    assert_eq!((hello["type"].as_str(), hello["version"].as_u64()), (Some("hello"), Some(1)), "{hello}");
    ws
}

/// Sends `upload` for `dest` and its first chunk.
async fn start_upload(ws: &mut Ws, id: u64, dest: &std::path::Path, first: &[u8]) {
    send_text(ws, json!({"type": "upload", "id": id, "path": dest.to_str().unwrap()}).to_string()).await;
    ws.send(Message::binary(agentd_protocol::chunk::encode(id, first))).await.unwrap();
}

fn expect_status(err: tungstenite::Error, status: u16) {
    match err {
        tungstenite::Error::Http(response) => assert_eq!(response.status().as_u16(), status),
        other => panic!("expected HTTP {status}, got {other}"),
    }
}

#[tokio::test]
async fn wrong_or_missing_token_gets_401_and_runs_nothing() {
    let daemon = Daemon::start();
    let marker = daemon.workspace.path().join("ran");
    expect_status(raw_connect(&daemon.url, Some("wrong-token")).await.unwrap_err(), 401);
    expect_status(raw_connect(&daemon.url, None).await.unwrap_err(), 401);
    let prefix = &daemon.token[..daemon.token.len() - 1];
    expect_status(raw_connect(&daemon.url, Some(prefix)).await.unwrap_err(), 401);
    match AgentdSandbox::connect(&daemon.url, Some("nope")).await {
        Err(SandboxError::Unauthorized { .. }) => {}
        Err(other) => panic!("expected Unauthorized, got {other}"),
        Ok(_) => panic!("connected with a wrong token"),
    }
    assert!(!marker.exists());
    assert!(AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.is_ok());
}

#[tokio::test]
async fn no_token_beyond_loopback_is_refused() {
    let out = std::process::Command::new(agentd_tests::binary("agentd"))
        .args(["serve", "--listen", "0.0.0.0:0"])
        .env_remove("AGENTD_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("refusing to listen on 0.0.0.0:0 without a token"), "{stderr}");
}

#[tokio::test]
async fn requests_before_hello_and_unknown_versions_are_refused() {
    let daemon = Daemon::start();
    let mut ws = raw_connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    send_text(&mut ws, json!({"type": "exec", "id": 4, "command": "true"}).to_string()).await;
    let reply = recv_json(&mut ws).await;
    assert_eq!(
        reply,
        json!({"type": "error", "id": 4, "code": "handshake_required", "message": "send `hello` first"})
    );
    send_text(&mut ws, json!({"type": "hello", "id": 5, "versions": [99]}).to_string()).await;
    assert_eq!(recv_json(&mut ws).await["code"], "unsupported_version");
    send_text(&mut ws, json!({"type": "hello", "id": 6, "versions": [99, 1]}).to_string()).await;
    assert_eq!(recv_json(&mut ws).await["version"], 1);
}

#[tokio::test]
async fn malformed_frames_get_error_replies_and_the_link_keeps_working() {
    let daemon = Daemon::start();
    let mut ws = greeted(&daemon).await;
    // An exec in flight while garbage arrives must be unaffected.
    send_text(&mut ws, json!({"type": "exec", "id": 100, "command": "sleep 0.5; echo survived"}).to_string())
        .await;
    let cases: Vec<(Message, Value, &str)> = vec![
        (Message::text("not json"), Value::Null, "malformed_frame"),
        (Message::text("[1,2,3]"), Value::Null, "malformed_frame"),
        (Message::text(json!({"type": "launch", "id": 1}).to_string()), json!(1), "unknown_type"),
        (Message::text(json!({"type": "exec", "id": 2}).to_string()), json!(2), "missing_field"),
        (Message::text(json!({"id": 3}).to_string()), json!(3), "missing_field"),
        (
            Message::text(json!({"type": "exec", "id": 4, "command": 5}).to_string()),
            json!(4),
            "invalid_field",
        ),
        (
            Message::text(json!({"type": "exec", "id": 5, "command": "x", "timeout": -1}).to_string()),
            json!(5),
            "invalid_field",
        ),
        (
            Message::text(json!({"type": "exec", "id": 100, "command": "true"}).to_string()),
            json!(100),
            "duplicate_id",
        ),
        (Message::text("x".repeat(17 << 20)), Value::Null, "frame_too_large"),
        (Message::binary(vec![1, 2, 3]), Value::Null, "malformed_frame"),
        (Message::binary(agentd_protocol::chunk::encode(77, b"data")), json!(77), "unknown_id"),
        (
            Message::text(json!({"type": "upload_end", "id": 78, "sha256": "00"}).to_string()),
            json!(78),
            "unknown_id",
        ),
    ];
    for (frame, id, code) in cases {
        ws.send(frame).await.unwrap();
        let reply = recv_json(&mut ws).await;
        assert_eq!(
            (reply["type"].as_str(), &reply["id"], reply["code"].as_str()),
            (Some("error"), &id, Some(code)),
            "{reply}"
        );
        assert!(!reply["message"].as_str().unwrap().is_empty());
    }
    let missing = {
        send_text(&mut ws, json!({"type": "exec", "id": 6}).to_string()).await;
        recv_json(&mut ws).await
    };
    assert_eq!(missing["message"], "missing field `command`");
    let result = recv_json(&mut ws).await;
    assert_eq!(
        (result["id"].as_u64(), result["output"].as_str(), result["exit_code"].as_i64()),
        (Some(100), Some("survived\n"), Some(0))
    );
    send_text(&mut ws, json!({"type": "exec", "id": 101, "command": "echo still up"}).to_string()).await;
    assert_eq!(recv_json(&mut ws).await["output"], "still up\n");
}

#[tokio::test]
async fn an_interrupted_upload_leaves_no_file() {
    let daemon = Daemon::start();
    let dest = daemon.workspace.path().join("dir/partial.bin");
    let mut ws = greeted(&daemon).await;
    start_upload(&mut ws, 9, &dest, &[7u8; 65536]).await;
    for _ in 0..7 {
        ws.send(Message::binary(agentd_protocol::chunk::encode(9, &[7u8; 65536]))).await.unwrap();
    }
    ws.flush().await.unwrap();
    // Make sure agentd has the chunks before the connection dies: a round trip on the same socket.
    send_text(&mut ws, json!({"type": "cancel", "id": 10, "target": 12345}).to_string()).await;
    assert_eq!(recv_json(&mut ws).await["found"], false);
    let dir = dest.parent().unwrap().to_owned();
    let count = |dir: &std::path::Path| std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0);
    assert!(
        agentd_tests::eventually(Duration::from_secs(5), || count(&dir) == 1).await,
        "no temporary file mid-upload"
    );
    assert!(!dest.exists());
    drop(ws);
    let clean = agentd_tests::eventually(Duration::from_secs(5), || count(&dir) == 0).await;
    assert!(
        clean,
        "left behind: {:?}",
        std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name()).collect::<Vec<_>>()
    );
    assert!(!dest.exists());
}

#[tokio::test]
async fn a_wrong_digest_or_cancel_keeps_the_destination_untouched() {
    let daemon = Daemon::start();
    let dest = daemon.workspace.path().join("kept.txt");
    std::fs::write(&dest, b"original").unwrap();
    let mut ws = greeted(&daemon).await;
    start_upload(&mut ws, 1, &dest, b"replacement").await;
    send_text(&mut ws, json!({"type": "upload_end", "id": 1, "sha256": "0".repeat(64)}).to_string()).await;
    let reply = recv_json(&mut ws).await;
    assert!(reply["error"].as_str().unwrap().starts_with("sha256 mismatch"), "{reply}");
    start_upload(&mut ws, 2, &dest, b"replacement").await;
    send_text(&mut ws, json!({"type": "cancel", "id": 3, "target": 2}).to_string()).await;
    let mut replies = [recv_json(&mut ws).await, recv_json(&mut ws).await];
    replies.sort_by_key(|r| r["id"].as_u64());
    assert_eq!(
        (replies[0]["type"].as_str(), replies[0]["error"].as_str()),
        (Some("upload_result"), Some("cancelled"))
    );
    assert_eq!(replies[1]["found"], true);
    assert_eq!(std::fs::read(&dest).unwrap(), b"original");
    assert_eq!(std::fs::read_dir(daemon.workspace.path()).unwrap().count(), 1);
}

#[tokio::test]
async fn cancel_by_id_reports_cancelled() {
    let daemon = Daemon::start();
    let mut ws = greeted(&daemon).await;
    send_text(&mut ws, json!({"type": "exec", "id": 1, "command": "sleep 1008", "stream": true}).to_string())
        .await;
    assert_eq!(recv_json(&mut ws).await["type"], "exec_started");
    send_text(&mut ws, json!({"type": "cancel", "id": 2, "target": 1}).to_string()).await;
    let mut replies = [recv_json(&mut ws).await, recv_json(&mut ws).await];
    replies.sort_by_key(|r| r["id"].as_u64());
    assert_eq!(
        (replies[0]["cancelled"].as_bool(), replies[0]["timed_out"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(replies[1], json!({"type": "cancel_result", "id": 2, "target": 1, "found": true}));
    assert!(agentd_tests::processes_named("sleep 1008").is_empty());
}

/// SIGTERM while commands run: the client gets a close frame saying agentd goes away, and no
/// `exec_result` of the kills the shutdown made (a result for a kill it never asked for would read
/// as the command's own failure). A request sent after the close frame gets nothing.
#[tokio::test]
async fn sigterm_closes_links_with_going_away_and_no_result_of_its_kills() {
    use futures_util::StreamExt as _;
    use tungstenite::protocol::frame::coding::CloseCode;
    let daemon = Daemon::start();
    let mut ws = greeted(&daemon).await;
    for id in 1..=3 {
        let exec = json!({"type": "exec", "id": id, "command": "sleep 1013", "stream": true});
        send_text(&mut ws, exec.to_string()).await;
        assert_eq!(recv_json(&mut ws).await["type"], "exec_started");
    }
    let pid = agentd_tests::nix_pid(daemon.pid());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let frame = tokio::time::timeout(Duration::from_secs(10), ws.next()).await.expect("a frame in time");
    match frame.expect("open").expect("frame") {
        Message::Close(Some(close)) => {
            assert_eq!((close.code, close.reason.as_str()), (CloseCode::Away, "agentd is shutting down"));
        }
        other => panic!("expected the close frame first, got {other:?}"),
    }
    let _ = ws.send(Message::text(json!({"type": "exec", "id": 4, "command": "true"}).to_string())).await;
    let rest = tokio::time::timeout(Duration::from_secs(10), ws.next()).await.expect("the link ends");
    assert!(!matches!(rest, Some(Ok(Message::Text(_)))), "a reply after the close: {rest:?}");
}
