//! Processes that outlive their connection, spoken by hand over real websockets to a real agentd:
//! `keep`, `attach` from an offset, `kill` of a tree with background children, the grace, stdin
//! pipes, terminals, and the bounds and bad input around them.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::time::Duration;

use agentd_tests::{Daemon, Ws, ask, greeted, recv_json, send_text};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// What a stream for request `id` carried until its terminal reply: the bytes of its chunks, the
/// `output_gap` if one came, and the terminal message.
struct Streamed {
    bytes: Vec<u8>,
    started: Option<Value>,
    gap: Option<Value>,
    end: Value,
}

async fn collect(ws: &mut Ws, id: u64) -> Streamed {
    let mut out = Streamed { bytes: Vec::new(), started: None, gap: None, end: Value::Null };
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(60), ws.next()).await.expect("in time");
        match frame.expect("open").expect("frame") {
            Message::Binary(data) => {
                let (chunk_id, payload) = agentd_protocol::chunk::decode(&data).unwrap();
                assert_eq!(chunk_id, id);
                out.bytes.extend_from_slice(payload);
            }
            Message::Text(text) => {
                let value: Value = serde_json::from_str(text.as_str()).unwrap();
                assert_eq!(value["id"], id, "{value}");
                match value["type"].as_str() {
                    Some("exec_started") => out.started = Some(value),
                    Some("output_gap") => out.gap = Some(value),
                    _ => {
                        out.end = value;
                        return out;
                    }
                }
            }
            _ => {}
        }
    }
}

/// Starts a kept, streamed exec and returns its process id (from `exec_started`).
async fn start_kept(ws: &mut Ws, id: u64, command: &str, extra: Value) -> String {
    let mut request = json!({"type": "exec", "id": id, "command": command, "keep": 0, "stream": true});
    if let (Some(request), Some(extra)) = (request.as_object_mut(), extra.as_object()) {
        request.extend(extra.clone());
    }
    let started = ask(ws, request).await;
    assert_eq!(started["type"], "exec_started", "{started}");
    started["process"].as_str().unwrap().to_owned()
}

/// The numbered lines `0..n`, as `seq` prints them.
fn lines(n: u32) -> Vec<u8> {
    (1..=n).map(|i| format!("{i}\n")).collect::<String>().into_bytes()
}

#[tokio::test]
async fn a_kept_process_outlives_its_connection_and_replays_byte_exact_from_any_offset() {
    let daemon = Daemon::start();
    let mut first = greeted(&daemon).await;
    let process =
        start_kept(&mut first, 1, "seq 1 20000; sleep 0.3; seq 20001 40000; exit 7", json!({})).await;
    // The client goes away mid-output.
    drop(first);
    let whole = lines(40000);
    let mut second = greeted(&daemon).await;
    for (id, from) in [(2u64, 0usize), (3, 1), (4, 12345), (5, whole.len())] {
        let request = json!({"type": "attach", "id": id, "process": process, "from": from});
        send_text(&mut second, request.to_string()).await;
        let streamed = collect(&mut second, id).await;
        assert_eq!(streamed.started.as_ref().map(|s| s["process"].clone()), Some(json!(process)));
        assert_eq!(streamed.bytes, whole[from..], "replay from {from}");
        assert!(streamed.gap.is_none());
        let end = streamed.end;
        assert_eq!(
            (end["type"].as_str(), end["exit_code"].as_i64()),
            (Some("exec_result"), Some(7)),
            "{end}"
        );
        assert_eq!(end["total_bytes"], whole.len());
        assert!(end.get("output").is_none(), "a streamed attach carries its output as chunks: {end}");
    }
    // Two attachers at once, without streams, get one and the same result, output included.
    let mut third = greeted(&daemon).await;
    for (ws, id) in [(&mut second, 6u64), (&mut third, 7)] {
        let request = json!({"type": "attach", "id": id, "process": process, "stream": false});
        send_text(ws, request.to_string()).await;
    }
    let a = collect(&mut second, 6).await.end;
    let b = collect(&mut third, 7).await.end;
    assert_eq!(a["output"].as_str().map(str::as_bytes), Some(&whole[..]));
    let without_id = |mut v: Value| {
        v.as_object_mut().unwrap().remove("id");
        v
    };
    assert_eq!(without_id(a), without_id(b));
    let listed = ask(&mut third, json!({"type": "processes", "id": 8})).await;
    let entry =
        listed["processes"].as_array().unwrap().iter().find(|p| p["process"] == process).unwrap().clone();
    assert_eq!((entry["state"].as_str(), entry["exit_code"].as_i64()), (Some("exited"), Some(7)), "{entry}");
    assert_eq!(entry["kept"], true);
    let forgot = ask(&mut third, json!({"type": "forget", "id": 9, "process": process})).await;
    assert_eq!(forgot["type"], "forget_result", "{forgot}");
    let gone = ask(&mut third, json!({"type": "attach", "id": 10, "process": process})).await;
    assert_eq!(gone["code"], "unknown_process", "{gone}");
}

#[tokio::test]
async fn attach_refuses_what_it_cannot_give_and_the_daemon_stays_up() {
    let daemon = Daemon::start();
    let mut ws = greeted(&daemon).await;
    let never = ask(&mut ws, json!({"type": "attach", "id": 1, "process": "00000000-1"})).await;
    assert_eq!(never["code"], "unknown_process", "{never}");
    let process = start_kept(&mut ws, 2, "printf hello; sleep 30", json!({})).await;
    let huge = ask(&mut ws, json!({"type": "attach", "id": 3, "process": process, "from": u64::MAX})).await;
    assert_eq!(huge["code"], "invalid_field", "{huge}");
    assert!(huge["message"].as_str().unwrap().contains("past the"), "{huge}");
    // An exec that was not kept is listed but cannot be attached.
    send_text(&mut ws, json!({"type": "exec", "id": 4, "command": "sleep 30", "stream": true}).to_string())
        .await;
    let mut plain = None;
    while plain.is_none() {
        let reply = recv_json(&mut ws).await;
        if reply["id"] == 4 {
            plain = reply["process"].as_str().map(str::to_owned);
        }
    }
    let refused = ask(&mut ws, json!({"type": "attach", "id": 5, "process": plain.unwrap()})).await;
    assert_eq!(refused["code"], "process_state", "{refused}");
    let forget = ask(&mut ws, json!({"type": "forget", "id": 6, "process": process})).await;
    assert_eq!(forget["code"], "process_state", "a running process is not forgotten: {forget}");
    let stdin = ask(&mut ws, json!({"type": "write_stdin", "id": 7, "process": process, "data": "x"})).await;
    assert_eq!(stdin["code"], "process_state", "{stdin}");
    let both = ask(
        &mut ws,
        json!({"type": "exec", "id": 8, "command": "true", "keep": 1, "offload": {"capture_path": "o", "inline_budget": 1}}),
    )
    .await;
    assert_eq!(both["code"], "invalid_field", "{both}");
    let bad_keep = ask(&mut ws, json!({"type": "exec", "id": 9, "command": "true", "keep": -1})).await;
    assert_eq!(bad_keep["code"], "invalid_field", "{bad_keep}");
    let killed = ask(&mut ws, json!({"type": "kill", "id": 10, "process": process, "signal": "NOPE"})).await;
    assert_eq!(killed["code"], "invalid_field", "{killed}");
    let listed = ask(&mut ws, json!({"type": "processes", "id": 11})).await;
    assert_eq!(listed["processes"].as_array().map(Vec::len), Some(2), "{listed}");
}

#[tokio::test]
async fn kill_ends_a_kept_process_and_its_background_children() {
    let daemon = Daemon::start();
    let mut ws = greeted(&daemon).await;
    let marker = daemon.workspace.path().join("child.pid");
    let command = format!("sleep 1000 & echo $! > {}; echo started; wait", marker.display());
    let process = start_kept(&mut ws, 1, &command, json!({})).await;
    drop(ws);
    let mut ws = greeted(&daemon).await;
    // The shell makes the file before `echo` writes it: wait for the whole line.
    let written = || std::fs::read_to_string(&marker).is_ok_and(|text| text.ends_with('\n'));
    assert!(agentd_tests::eventually(Duration::from_secs(10), written).await);
    let child: i32 = std::fs::read_to_string(&marker).unwrap().trim().parse().unwrap();
    assert!(std::path::Path::new(&format!("/proc/{child}")).exists());
    let killed = ask(&mut ws, json!({"type": "kill", "id": 2, "process": process})).await;
    assert_eq!(killed["type"], "kill_result", "{killed}");
    assert!(killed["signalled"].as_u64().unwrap() >= 2, "the shell and its child: {killed}");
    let waited = ask(&mut ws, json!({"type": "wait", "id": 3, "process": process, "timeout": 10})).await;
    assert_eq!(waited["process"]["state"], "exited", "{waited}");
    assert_eq!(waited["process"]["cancelled"], true, "{waited}");
    assert!(
        !std::path::Path::new(&format!("/proc/{child}/status")).exists()
            || std::fs::read_to_string(format!("/proc/{child}/status")).unwrap().contains("zombie")
    );
}

#[tokio::test]
async fn a_kept_process_nobody_attaches_to_is_ended_after_its_grace() {
    let daemon = Daemon::start();
    let mut ws = greeted(&daemon).await;
    let request = json!({"type": "exec", "id": 1, "command": "sleep 60", "keep": 0.5, "stream": true});
    let started = ask(&mut ws, request).await;
    let process = started["process"].as_str().unwrap().to_owned();
    drop(ws);
    let mut ws = greeted(&daemon).await;
    let waited = ask(&mut ws, json!({"type": "wait", "id": 2, "process": process, "timeout": 20})).await;
    let info = &waited["process"];
    assert_eq!(
        (info["state"].as_str(), info["abandoned"].as_bool()),
        (Some("exited"), Some(true)),
        "{waited}"
    );
    // One still attached is not ended: the grace starts when the last client goes.
    let request = json!({"type": "exec", "id": 3, "command": "sleep 1; echo done", "keep": 0.2});
    let started = ask(&mut ws, request).await;
    assert_eq!(started["type"], "exec_started", "a kept exec names its process at once: {started}");
    let result = recv_json(&mut ws).await;
    assert_eq!(
        (result["output"].as_str(), result["abandoned"].as_bool()),
        (Some("done\n"), None),
        "{result}"
    );
}

#[tokio::test]
async fn stdin_pipe_drives_an_interactive_shell() {
    let daemon = Daemon::start();
    let mut ws = greeted(&daemon).await;
    let process = start_kept(&mut ws, 1, "sh -i 2>/dev/null", json!({"stdin": "pipe"})).await;
    let mut control = greeted(&daemon).await;
    for (id, line, answer) in [(2u64, "echo $((6*7))\n", "42\n"), (3, "echo hi there\n", "hi there\n")] {
        let written =
            ask(&mut control, json!({"type": "write_stdin", "id": id, "process": process, "data": line}))
                .await;
        assert_eq!(
            (written["type"].as_str(), written["bytes"].as_u64()),
            (Some("write_stdin_result"), Some(line.len() as u64))
        );
        let mut got = Vec::new();
        while !got.ends_with(answer.as_bytes()) {
            let frame = tokio::time::timeout(Duration::from_secs(10), ws.next())
                .await
                .expect("answer")
                .unwrap()
                .unwrap();
            if let Message::Binary(data) = frame {
                got.extend_from_slice(agentd_protocol::chunk::decode(&data).unwrap().1);
            }
        }
    }
    let closed = ask(&mut control, json!({"type": "close_stdin", "id": 4, "process": process})).await;
    assert_eq!(closed["type"], "close_stdin_result", "{closed}");
    let end = collect(&mut ws, 1).await.end;
    assert_eq!(end["exit_code"], 0, "EOF ends the shell: {end}");
    let late =
        ask(&mut control, json!({"type": "write_stdin", "id": 5, "process": process, "data": "x"})).await;
    assert_eq!(late["code"], "process_state", "{late}");
}

#[tokio::test]
async fn a_terminal_has_its_size_and_takes_a_resize() {
    let daemon = Daemon::start();
    let mut ws = greeted(&daemon).await;
    let command = "test -t 0 && test -t 1 && echo tty; stty size; read line; stty size";
    let process = start_kept(&mut ws, 1, command, json!({"pty": {"rows": 33, "cols": 101}})).await;
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("33 101") {
        let frame =
            tokio::time::timeout(Duration::from_secs(10), ws.next()).await.expect("output").unwrap().unwrap();
        if let Message::Binary(data) = frame {
            seen.extend_from_slice(agentd_protocol::chunk::decode(&data).unwrap().1);
        }
    }
    assert!(String::from_utf8_lossy(&seen).contains("tty"), "{}", String::from_utf8_lossy(&seen));
    let mut control = greeted(&daemon).await;
    let resized =
        ask(&mut control, json!({"type": "resize", "id": 2, "process": process, "rows": 12, "cols": 40}))
            .await;
    assert_eq!(resized["type"], "resize_result", "{resized}");
    let written =
        ask(&mut control, json!({"type": "write_stdin", "id": 3, "process": process, "data": "go\n"})).await;
    assert_eq!(written["type"], "write_stdin_result", "{written}");
    let rest = collect(&mut ws, 1).await;
    let text = String::from_utf8_lossy(&rest.bytes).into_owned();
    assert!(text.contains("12 40"), "{text}");
    assert_eq!(rest.end["exit_code"], 0, "{}", rest.end);
    let plain = start_kept(&mut control, 4, "sleep 5", json!({})).await;
    let refused =
        ask(&mut control, json!({"type": "resize", "id": 5, "process": plain, "rows": 1, "cols": 1})).await;
    assert_eq!(refused["code"], "process_state", "{refused}");
}

#[tokio::test]
async fn journals_past_their_budget_and_kept_processes_past_the_cap_are_refused_cleanly() {
    use agentd_protocol::limits::{MAX_JOURNAL_BYTES, MAX_JOURNAL_BYTES_TOTAL, MAX_KEPT_PROCESSES};
    let daemon = Daemon::start();
    let mut ws = greeted(&daemon).await;
    // Each reserves its whole cap while it runs.
    let fit = MAX_JOURNAL_BYTES_TOTAL / MAX_JOURNAL_BYTES;
    for id in 0..fit {
        start_kept(&mut ws, id, "sleep 30", json!({"max_capture_bytes": MAX_JOURNAL_BYTES})).await;
    }
    let over = ask(
        &mut ws,
        json!({"type": "exec", "id": 100, "command": "true", "keep": 0, "max_capture_bytes": MAX_JOURNAL_BYTES}),
    )
    .await;
    assert_eq!(over["code"], "limit_reached", "{over}");
    // A plain exec still runs.
    let plain = ask(&mut ws, json!({"type": "exec", "id": 101, "command": "echo fine"})).await;
    assert_eq!(plain["output"], "fine\n", "{plain}");
    drop(ws);
    drop(daemon);
    let daemon = Daemon::start();
    let mut ws = greeted(&daemon).await;
    let mut id = 200;
    for _ in 0..MAX_KEPT_PROCESSES {
        start_kept(&mut ws, id, "sleep 30", json!({"max_capture_bytes": 1})).await;
        id += 1;
    }
    let over = ask(&mut ws, json!({"type": "exec", "id": id, "command": "true", "keep": 0})).await;
    assert_eq!(over["code"], "limit_reached", "{over}");
    assert!(over["message"].as_str().unwrap().contains("kept processes"), "{over}");
}

#[tokio::test]
async fn a_gigabyte_nobody_reads_keeps_agentd_flat_and_comes_back_as_a_head_and_a_gap() {
    let daemon = Daemon::start();
    let rss_before = agentd_tests::status_kb(daemon.pid(), "VmRSS");
    let mut ws = greeted(&daemon).await;
    let gib = 1u64 << 30;
    let process = start_kept(&mut ws, 1, &format!("head -c {gib} /dev/zero"), json!({})).await;
    drop(ws);
    let mut ws = greeted(&daemon).await;
    let waited = ask(&mut ws, json!({"type": "wait", "id": 2, "process": process})).await;
    assert_eq!(waited["process"]["total_bytes"], gib, "{waited}");
    let stored = waited["process"]["stored_bytes"].as_u64().unwrap();
    assert_eq!(stored, agentd_protocol::limits::DEFAULT_MAX_CAPTURE_BYTES, "{waited}");
    let rss_after = agentd_tests::status_kb(daemon.pid(), "VmRSS");
    println!("agentd VmRSS {rss_before} kB before, {rss_after} kB after 1 GiB went by unread");
    assert!(rss_after < rss_before + 32 * 1024, "RSS grew from {rss_before} to {rss_after} kB");
    send_text(&mut ws, json!({"type": "attach", "id": 3, "process": process}).to_string()).await;
    let streamed = collect(&mut ws, 3).await;
    assert_eq!(streamed.bytes.len() as u64, stored);
    assert!(streamed.bytes.iter().all(|&b| b == 0));
    assert_eq!(streamed.gap.map(|gap| gap["offset"].clone()), Some(json!(stored)));
    assert_eq!(
        (streamed.end["truncated"].as_bool(), streamed.end["total_bytes"].as_u64()),
        (Some(true), Some(gib))
    );
}

#[tokio::test]
async fn a_terminal_under_a_profile_keeps_the_walls() {
    let config = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let profile = config.path().join("p.toml");
    let body = format!(
        "name = \"offline\"\nwritable_roots = [\"{}\"]\nnetwork = \"deny\"\n",
        workspace.path().display()
    );
    std::fs::write(&profile, body).unwrap();
    let daemon = Daemon::start_in(workspace, &["--profile", profile.to_str().unwrap()]);
    let outside = config.path().join("escaped");
    let port = daemon.url.rsplit(':').next().unwrap().to_owned();
    let command = format!(
        "test -t 1 && echo tty; echo x > {} && echo wrote-outside; \
         python3 -c 'import socket\ntry:\n socket.create_connection((\"127.0.0.1\", {port})); print(\"connected\")\nexcept OSError as e: print(\"refused\", e.errno)'; \
         echo end",
        outside.display()
    );
    let mut ws = greeted(&daemon).await;
    start_kept(&mut ws, 1, &command, json!({"pty": {"rows": 24, "cols": 80}})).await;
    let streamed = collect(&mut ws, 1).await;
    let text = String::from_utf8_lossy(&streamed.bytes).into_owned();
    assert!(text.contains("tty") && text.contains("end"), "{text}");
    assert!(!text.contains("wrote-outside") && !text.contains("connected"), "{text}");
    // The probe ran and its connect to agentd's own listening port was refused by the wall.
    assert!(text.contains("refused"), "{text}");
    assert!(!outside.exists());
    assert!(streamed.end["enforcement"].is_object(), "{}", streamed.end);
}

#[tokio::test]
async fn what_a_kept_command_left_running_is_counted_and_killed_after_its_shell_ended() {
    let daemon = Daemon::start();
    let mut ws = greeted(&daemon).await;
    let marker = daemon.workspace.path().join("server.pid");
    let command = format!("sleep 1000 > /dev/null 2>&1 & echo $! > {}", marker.display());
    let process = start_kept(&mut ws, 1, &command, json!({})).await;
    let end = collect(&mut ws, 1).await.end;
    assert_eq!((end["exit_code"].as_i64(), end["stray_processes"].as_u64()), (Some(0), Some(1)), "{end}");
    let server: i32 = std::fs::read_to_string(&marker).unwrap().trim().parse().unwrap();
    let alive = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z "))
    };
    assert!(alive(server), "the server runs on after its shell");
    let listed = ask(&mut ws, json!({"type": "processes", "id": 2})).await;
    let entry =
        listed["processes"].as_array().unwrap().iter().find(|p| p["process"] == process).unwrap().clone();
    assert_eq!(
        (entry["state"].as_str(), entry["stray_processes"].as_u64()),
        (Some("exited"), Some(1)),
        "{entry}"
    );
    let killed = ask(&mut ws, json!({"type": "kill", "id": 3, "process": process})).await;
    assert_eq!(killed["signalled"], 1, "{killed}");
    assert!(
        agentd_tests::eventually(Duration::from_secs(5), || !alive(server)).await,
        "the server survived kill"
    );
}
