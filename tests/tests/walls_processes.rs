//! The walls around processes, each tried as the attack that got through it before (issue 47):
//! a `kill` of a finished kept process that signalled whatever process had taken its reaped
//! shell's number; one client whose kept processes made every other client's `execute` fail; a
//! `processes` reply past the reply limit.

// Test helpers outside #[test] functions: a failed step aborts the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::Duration;

use agentd_tests::{Daemon, Need, PidsCap, Ws, raw_connect, recv_json, send_text, skip};
use serde_json::{Value, json};

async fn greeted(daemon: &Daemon) -> Ws {
    let mut ws = raw_connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    send_text(&mut ws, json!({"type": "hello", "id": 0, "versions": [1]}).to_string()).await;
    let hello = recv_json(&mut ws).await;
    assert_eq!(hello["type"], "hello", "{hello}");
    ws
}

/// Sends `message` and returns the next text reply.
async fn ask(ws: &mut Ws, message: Value) -> Value {
    send_text(ws, message.to_string()).await;
    recv_json(ws).await
}

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
        let pid = nix::unistd::Pid::from_raw(self.0 as i32);
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
    let (process, number) = (started["process"].as_str().unwrap().to_owned(), started["pid"].as_u64().unwrap());
    let ended = recv_json(&mut ws).await;
    assert_eq!((ended["type"].as_str(), ended["exit_code"].as_i64()), (Some("exec_result"), Some(0)), "{ended}");

    // Another process takes that number, and leads a process group of that number (`setsid`).
    let script = format!("echo {} > /proc/sys/kernel/ns_last_pid; setsid sleep 60 & echo $!; wait", number - 1);
    let mut other = Command::new("nsenter")
        .arg("--target")
        .arg(agentd[0].to_string())
        .args(["--pid", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(other.stdout.take().unwrap()), &mut line).unwrap();
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
