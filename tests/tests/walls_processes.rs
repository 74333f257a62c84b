//! The walls around processes, each tried as the attack that got through it before (issue 47):
//! a `kill` of a finished kept process that signalled whatever process had taken its reaped
//! shell's number; one client whose kept processes made every other client's `execute` fail; a
//! `processes` reply past the reply limit.

#![expect(
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::process::{Command, Stdio};
use std::time::Duration;

use agentd_tests::{Daemon, Need, PidsCap, Ws, ask, greeted, recv_json, send_text, skip};
use serde_json::{Value, json};

/// The pids of `pid`'s children.
fn children(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    let listed: String =
        tasks.map(|task| std::fs::read_to_string(task.path().join("children")).unwrap_or_default()).collect();
    listed.split_whitespace().filter_map(|pid| pid.parse().ok()).collect()
}

/// Ends the agentd at `pid` (its pid namespace's first process, whose `unshare` parent ignores
/// SIGTERM) when dropped: SIGTERM, then SIGKILL if it is still there after 5 s.
struct EndOnDrop(u32);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        use nix::sys::signal::{Signal, kill};
        let pid = agentd_tests::nix_pid(self.0);
        let _ = kill(pid, Signal::SIGTERM);
        for _ in 0..500 {
            if kill(pid, None).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = kill(pid, Signal::SIGKILL);
    }
}

#[tokio::test]
async fn kill_of_a_finished_kept_process_never_signals_the_process_that_took_its_number() {
    if !nix::unistd::geteuid().is_root() {
        return skip(Need::Root, "a pid namespace of the test's own, and its ns_last_pid");
    }
    let Some(cap) = PidsCap::or_skip(256) else { return };
    // agentd in a pid namespace of its own (its /proc with it), where the test can make the next
    // process take any number; its scratch and cgroups beneath the test's own directories.
    let tmp = tempfile::tempdir().unwrap();
    let enter = format!(
        "echo $$ > {}/cgroup.procs && exec env TMPDIR={} unshare --pid --fork --mount-proc --kill-child \"$@\"",
        cap.dir.display(),
        tmp.path().display()
    );
    let daemon = Daemon::launch(&["sh", "-c", &enter, "sh"], tempfile::tempdir().unwrap(), &[], None);
    let agentd = children(daemon.pid());
    assert_eq!(agentd.len(), 1, "unshare's one child is agentd: {agentd:?}");
    let _end = EndOnDrop(agentd[0]);
    let mut ws = greeted(&daemon).await;

    // A kept process that ends at once: its shell is reaped, its number free.
    let started = ask(&mut ws, json!({"type": "exec", "id": 1, "command": "exit 0", "keep": 0})).await;
    assert_eq!(started["type"], "exec_started", "{started}");
    let (process, number) =
        (started["process"].as_str().unwrap().to_owned(), started["pid"].as_u64().unwrap());
    let ended = recv_json(&mut ws).await;
    assert_eq!(
        (ended["type"].as_str(), ended["exit_code"].as_i64()),
        (Some("exec_result"), Some(0)),
        "{ended}"
    );

    // Another process takes that number, and leads a process group of that number (`setsid`).
    let script =
        format!("echo {} > /proc/sys/kernel/ns_last_pid; setsid sleep 60 & echo $!; wait", number - 1);
    let mut other = Command::new("nsenter")
        .arg("--target")
        .arg(agentd[0].to_string())
        .args(["--pid", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(other.stdout.take().unwrap()), &mut line)
        .unwrap();
    assert_eq!(line.trim(), number.to_string(), "the other process took the reaped shell's number");

    let killed = ask(&mut ws, json!({"type": "kill", "id": 2, "process": process})).await;
    assert_eq!(killed["type"], "kill_result", "{killed}");
    assert_eq!(killed["signalled"], 0, "{killed}");
    // Past the ladder's grace: a SIGTERM or SIGKILL would have ended it (and its waiting shell).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let alive = other.try_wait().unwrap().is_none();
    let _ = other.kill();
    let _ = other.wait();
    assert!(alive, "the process that took the number was signalled by `kill`");
}

/// The next text message, as sent.
async fn next_text(ws: &mut Ws) -> String {
    use futures_util::StreamExt as _;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(30), ws.next()).await.expect("in time");
        if let Message::Text(text) = frame.expect("open").expect("frame") {
            return text.as_str().to_owned();
        }
    }
}

#[tokio::test]
async fn a_listing_of_many_long_commands_stays_under_the_reply_limit_and_agentctl_ps_works() {
    use agentd_protocol::limits::{MAX_LISTED_COMMAND_BYTES, MAX_REPLY_BYTES};
    let daemon = Daemon::start();
    let mut ws = greeted(&daemon).await;
    // 200 retained results of 120 KiB commands: a 23 MiB listing before.
    let long = format!(": {}; exit 3", "x".repeat(120 << 10));
    for id in 1..=200u64 {
        let request = json!({"type": "exec", "id": id, "command": long, "keep": 0});
        let started = ask(&mut ws, request).await;
        assert_eq!(started["type"], "exec_started", "{started}");
        let ended = recv_json(&mut ws).await;
        assert_eq!(ended["exit_code"], 3, "{ended}");
    }
    send_text(&mut ws, json!({"type": "processes", "id": 500}).to_string()).await;
    let text = next_text(&mut ws).await;
    assert!(text.len() <= MAX_REPLY_BYTES, "a {} byte reply", text.len());
    let listed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(listed["type"], "processes_result", "{}", &text[..200]);
    let processes = listed["processes"].as_array().unwrap();
    assert_eq!(processes.len(), 200);
    assert!(listed.get("next").is_none(), "one page");
    for process in processes {
        assert_eq!(process["command_truncated"], true);
        let command = process["command"].as_str().unwrap();
        assert!(command.len() <= MAX_LISTED_COMMAND_BYTES && long.starts_with(command));
    }

    let agentctl = |args: &[&str]| {
        let out = Command::new(agentd_tests::binary("agentctl"))
            .arg("--url")
            .arg(&daemon.url)
            .args(args)
            .env("AGENTD_TOKEN", &daemon.token)
            .env_remove("AGENTCTL_SESSION")
            .output()
            .unwrap();
        assert!(out.status.success(), "agentctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let table = agentctl(&["ps"]);
    let rows: Vec<&str> = table.lines().skip(1).collect();
    assert_eq!(rows.len(), 200, "{}", &table[..table.len().min(2000)]);
    assert!(rows.iter().all(|row| row.contains(" exited ") && row.ends_with('…')), "{}", rows[0]);
    let json: Value = serde_json::from_str(&agentctl(&["--json", "ps"])).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 200);
}

#[tokio::test]
async fn one_client_with_its_kept_processes_all_taken_starves_no_other_client() {
    use agentd_host::BaseSandbox as _;
    use agentd_protocol::limits::MAX_KEPT_PROCESSES;
    // A ceiling for everything the kept processes start, where the machine has one.
    let cap = PidsCap::new(2048);
    let wrapper = cap.as_ref().map(PidsCap::enter);
    let wrapper: Vec<&str> = match &wrapper {
        Some(enter) => vec!["sh", "-c", enter, "sh"],
        None => Vec::new(),
    };
    let daemon = Daemon::launch(&wrapper, tempfile::tempdir().unwrap(), &[], None);
    let mut greedy = greeted(&daemon).await;
    let mut id = 0;
    let mut kept = |command: &str, keep: f64| {
        id += 1;
        json!({"type": "exec", "id": id, "command": command, "keep": keep, "stream": true})
    };
    // Its whole budget of kept processes, then as many executes as a host heals (kept 30 s).
    for _ in 0..MAX_KEPT_PROCESSES {
        let started = ask(&mut greedy, kept("exec sleep 60", 0.0)).await;
        assert_eq!(started["type"], "exec_started", "{started}");
    }
    let over = ask(&mut greedy, kept("true", 0.0)).await;
    assert_eq!(over["code"], "limit_reached", "{over}");
    for _ in 0..32 {
        let started = ask(&mut greedy, kept("exec sleep 60", 30.0)).await;
        assert_eq!(
            started["type"], "exec_started",
            "an execute the host heals is no kept process: {started}"
        );
    }

    // Another client: its plain execute (kept to heal, over TCP) and its own kept exec run.
    let other = agentd_host::AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    let plain = other.execute("echo fine", None).await.unwrap();
    assert_eq!((plain.output.as_str(), plain.exit_code), ("fine\n", Some(0)), "{plain:?}");
    let mut second = greeted(&daemon).await;
    let started =
        ask(&mut second, json!({"type": "exec", "id": 1, "command": "echo kept", "keep": 0, "stream": true}))
            .await;
    assert_eq!(started["type"], "exec_started", "{started}");
    drop(greedy);
    drop(second);
    drop(daemon);
    drop(cap);
}

#[tokio::test]
async fn a_sandbox_that_pages_processes_without_end_cannot_hold_the_host() {
    use agentd_fakes::evil_agentd::{Evil, EvilAgentd};
    let server = EvilAgentd::start(Evil::EndlessPages).unwrap();
    let link = agentd_host::Link::connect(&server.url(), None).await.unwrap();
    let listed = tokio::time::timeout(Duration::from_secs(30), link.processes()).await.expect("in time");
    let err = listed.unwrap_err().to_string();
    assert!(err.contains("more than 64 pages"), "{err}");
}
