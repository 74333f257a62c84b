//! Process storms: a fork bomb, under the embedded default or without a profile, is capped (by the
//! profile's process limit and by the commands' task budget beneath agentd's own cgroup) and ended
//! with its exec; agentd never dies of one, even in a cgroup capped just above what it needs; what
//! commands leave running outlives them within that budget; neither dropping the sandbox nor
//! `agentctl down` is outrun by a bomb.
//!
//! Every bomb runs inside a pids cgroup the test makes ([`PidsCap`], a little above the profile's
//! limit), so a bomb that got past agentd's own cap could still not fill the machine's process
//! table; without a writable cgroup v1 `pids` hierarchy the tests skip (`AGENTD_REQUIRE_CGROUP`).
//! The tests run one at a time (a lock), so two bombs never share the machine's two cores.

// Test helpers outside #[test] functions: a failed step aborts the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use agentd_host::adapters::local::DEFAULT_PROCESSES;
use agentd_host::adapters::local::LocalOptions;
use agentd_host::{BaseSandbox as _, LocalSandbox};
use agentd_protocol::ExecRequest;
use agentd_protocol::profile::Level;
use agentd_tests::{PidsCap, binary, pids_below};

/// `:(){ :|:& };:` with a name dash accepts (it refuses to define `:`), after 50 sleepers that
/// outlive it (a bomb at its limit dies down by itself: each of its processes exits when its fork
/// fails), so what was not ended is seen.
const BOMB_AND_SLEEPERS: &str = "for i in $(seq 50); do sleep 1022 & done; bomb(){ bomb|bomb& };bomb";

/// Room above the profile's limit for agentd's own threads and the test's thread.
const CAP: u32 = DEFAULT_PROCESSES as u32 + 200;

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The per-command cgroups of the agentd `pid` that runs inside `cap`.
fn command_cgroups(cap: &PidsCap, pid: u32) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(cap.dir.join(format!("agentd-{pid}")))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// A `LocalSandbox` under the embedded default, its agentd started inside `cap`.
async fn default_sandbox_in(cap: &PidsCap) -> LocalSandbox {
    sandbox_in(cap, true).await
}

/// A `LocalSandbox`, under the embedded default or without a profile, its agentd started inside `cap`.
async fn sandbox_in(cap: &PidsCap, confined: bool) -> LocalSandbox {
    let _inside = cap.join_thread();
    LocalSandbox::start_with(&LocalOptions { confined, ..LocalOptions::default() }).await.unwrap()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default().trim().to_owned()
}

/// Pids of the commands of the agentd `pid` that runs inside `cap` (every per-command cgroup).
fn command_pids(cap: &PidsCap, pid: u32) -> usize {
    pids_below(&cap.dir.join(format!("agentd-{pid}"))).len()
}

/// A fork bomb (and sleepers) under the embedded default and without a profile: capped (by the
/// profile's limit, or by the commands' budget), and ended with its exec, whose result comes well
/// within its timeout; agentd then serves on, and stopping it leaves nothing behind.
#[tokio::test]
async fn a_fork_bomb_is_ended_with_its_exec_confined_or_not() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(cap) = PidsCap::or_skip(CAP) else { return };
    for confined in [true, false] {
        let sb = sandbox_in(&cap, confined).await;
        let agentd = sb.pid();
        let started = Instant::now();
        let request = ExecRequest {
            command: BOMB_AND_SLEEPERS.to_owned(),
            timeout: Some(30.0),
            ..ExecRequest::default()
        };
        let r = sb.agentd().exec(request, None).await.unwrap();
        let took = started.elapsed();
        let budget: u64 = read(&cap.dir.join(format!("agentd-{agentd}/pids.max"))).parse().unwrap_or(0);
        // Ended with its exec, or, when it met its limit only after the exec returned, by the watch
        // on what finished commands leave (a liveness bound, not a speed target).
        let returned = Instant::now();
        let mut gone_after = None;
        while returned.elapsed() < Duration::from_secs(1) {
            if gone_after.is_none() && command_pids(&cap, agentd) == 0 {
                gone_after = Some(returned.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let left_after_1s = command_pids(&cap, agentd);
        let ended =
            agentd_tests::eventually(Duration::from_secs(10), || command_pids(&cap, agentd) == 0).await;
        let peak: u64 = read(&cap.dir.join(format!("agentd-{agentd}/pids.peak"))).parse().unwrap_or(0);
        println!(
            "bomb (confined: {confined}): exec {took:?}, {:?} limit_exceeded {:?}, strays {:?}, \
             commands' peak {peak} of a budget of {budget}, all gone after {gone_after:?}, \
             left 1 s after: {left_after_1s}, ended after {:?}",
            r.exit_code,
            r.limit_exceeded,
            r.stray_processes,
            returned.elapsed()
        );
        assert!(ended, "the bomb outlived its exec by 10 s: {} processes", command_pids(&cap, agentd));
        // Well under its 30 s timeout: the result did not wait for the bomb.
        assert!(took < Duration::from_secs(25), "the exec took {took:?}");
        if confined {
            assert_eq!(r.enforcement.as_ref().map(|e| e.limits), Some(Level::Full), "{r:?}");
            assert!(peak <= DEFAULT_PROCESSES + 1, "the commands held {peak} tasks");
        }
        // Whatever the profile, the commands never held more than their budget, which leaves
        // agentd its own tasks beneath the cap.
        assert!(budget > 0 && budget < u64::from(CAP), "budget {budget}");
        // (A command's shell joins its cgroup after its clone, and a join is not refused: one over.)
        assert!(peak <= budget + 1, "the commands held {peak} tasks, over their budget of {budget}");
        // agentd serves on.
        let next = sb.execute("echo alive", None).await.unwrap();
        assert_eq!(next.output, "alive\n", "{next:?}");
        // Dropping the sandbox (SIGTERM, then SIGKILL after 5 s) leaves nothing behind.
        let started = Instant::now();
        drop(sb);
        let took = started.elapsed();
        let left = cap.pids();
        assert!(left.is_empty(), "{} processes outlived the sandbox ({took:?})", left.len());
        assert!(took < Duration::from_secs(5), "agentd took {took:?} to stop");
    }
}

/// agentd's own cgroup capped just above what agentd needs: a command's fork bomb, confined or
/// not, takes the commands' budget and no more, and agentd (its threads, its file workers, grep's
/// workers) answers every request through it and after it.
#[tokio::test]
async fn agentd_never_dies_of_a_fork_bomb_in_a_tight_cgroup() {
    let _one = ONE_AT_A_TIME.lock().await;
    // agentd needs about a dozen tasks (the runtime, the file workers, a pool thread).
    let Some(cap) = PidsCap::or_skip(96) else { return };
    for confined in [true, false] {
        let sb = sandbox_in(&cap, confined).await;
        let agentd = sb.pid();
        sb.write(&format!("{}/notes.txt", sb.workspace().display()), "needle\n").await.unwrap();
        for round in 0..3 {
            // One bomb with a timeout, one that ends by itself; both while verbs are asked.
            let command = if round == 0 { "bomb(){ bomb|bomb& };bomb; sleep 100" } else { BOMB_AND_SLEEPERS };
            let request =
                ExecRequest { command: command.to_owned(), timeout: Some(3.0), ..ExecRequest::default() };
            let (r, grep, ls) = tokio::join!(
                sb.agentd().exec(request, None),
                async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    sb.grep("needle", Some(&sb.workspace().display().to_string()), None, None).await
                },
                async {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    sb.ls(&sb.workspace().display().to_string()).await
                },
            );
            let r = r.unwrap();
            assert_eq!(r.ending.timed_out, round == 0, "{r:?}");
            let grep = grep.unwrap();
            assert_eq!(grep.error, None, "{grep:?}");
            assert_eq!(grep.matches.map(|m| m.len()), Some(1));
            assert_eq!(ls.unwrap().error, None);
            let ended =
                agentd_tests::eventually(Duration::from_secs(10), || command_pids(&cap, agentd) == 0).await;
            assert!(
                ended,
                "round {round}: {} processes outlived the bomb's exec",
                command_pids(&cap, agentd)
            );
            let next = sb.execute("echo alive", None).await.unwrap();
            assert_eq!(next.output, "alive\n", "round {round}: {next:?}");
        }
        assert!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(agentd as i32), None).is_ok());
        drop(sb);
        assert!(cap.pids().is_empty(), "processes outlived the sandbox");
    }
}

/// What a command leaves running may grow after its exec returned, within room of its own (twice
/// what was left, at least 512 tasks): 100 more sleepers live on, while a fork loop started after the
/// exec returned meets that room and is ended whole, confined or not.
#[tokio::test]
async fn what_a_command_leaves_grows_within_its_room_and_a_late_bomb_is_ended() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(cap) = PidsCap::or_skip(CAP) else { return };
    for confined in [true, false] {
        let sb = sandbox_in(&cap, confined).await;
        let agentd = sb.pid();
        let grows = "(sleep 0.5; for i in $(seq 100); do sleep 1031 & done; wait) >/dev/null 2>&1 & true";
        let r = sb.execute(grows, None).await.unwrap();
        assert_eq!(r.exit_code, Some(0), "{r:?}");
        let grown =
            agentd_tests::eventually(Duration::from_secs(10), || command_pids(&cap, agentd) >= 101).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let lived = command_pids(&cap, agentd);
        assert!(grown && lived >= 101, "the grown background processes were ended: {lived} left");
        let late_bomb = "(sleep 0.5; while :; do sleep 1032 & done) >/dev/null 2>&1 & true";
        let r = sb.execute(late_bomb, None).await.unwrap();
        assert_eq!(r.exit_code, Some(0), "{r:?}");
        let ended =
            agentd_tests::eventually(Duration::from_secs(20), || command_pids(&cap, agentd) <= lived).await;
        let peak: u64 = read(&cap.dir.join(format!("agentd-{agentd}/pids.peak"))).parse().unwrap_or(0);
        println!("late fork loop (confined: {confined}): commands' peak {peak}, ended: {ended}");
        assert!(ended, "the late fork loop lives on: {} processes", command_pids(&cap, agentd));
        assert_eq!(command_pids(&cap, agentd), lived, "the sleepers of the first exec were ended too");
        // Room of its own: never the budget.
        assert!(peak < 1200, "the commands held {peak} tasks");
        drop(sb);
        assert!(cap.pids().is_empty(), "processes outlived the sandbox");
    }
}

/// Background processes a command leaves may outlive it (a server started with `nohup … &`
/// answers in the next exec), confined or not; together they stay within the commands' budget:
/// execs that keep leaving sleepers fill it, and no further (a command whose forks are refused is
/// ended whole with its exec), while agentd serves on.
#[tokio::test]
async fn background_processes_outlive_their_exec_within_one_budget() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(cap) = PidsCap::or_skip(200) else { return };
    for confined in [true, false] {
        let sb = sandbox_in(&cap, confined).await;
        let agentd = sb.pid();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let serve = format!(
            "nohup python3 -m http.server {port} --bind 127.0.0.1 >/dev/null 2>&1 & \
             for i in $(seq 50); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}))' 2>/dev/null && break; sleep 0.1; done; echo up"
        );
        let r = sb.execute(&serve, Some(Duration::from_secs(20))).await.unwrap();
        assert_eq!(r.output, "up\n", "{r:?}");
        let get = format!(
            "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:{port}/\").status)'"
        );
        let r = sb.execute(&get, Some(Duration::from_secs(20))).await.unwrap();
        assert_eq!(r.output, "200\n", "the server did not outlive its exec: {r:?}");
        let budget: u64 = read(&cap.dir.join(format!("agentd-{agentd}/pids.max"))).parse().unwrap();
        let mut most = 0;
        for round in 0..12 {
            // Once the budget is full, the shell itself cannot fork: it fails, and is ended whole.
            let r =
                sb.execute("for i in $(seq 20); do sleep 1030 & done 2>/dev/null; true", None).await.unwrap();
            assert!(round > 0 || r.exit_code == Some(0), "{r:?}");
            most = most.max(command_pids(&cap, agentd));
        }
        println!("strays (confined: {confined}): at most {most} in a budget of {budget}");
        assert!(most as u64 <= budget + 1, "{most} processes in a budget of {budget}");
        assert!(budget < 200);
        let next = sb.execute("echo alive", None).await.unwrap();
        assert_eq!(next.output, "alive\n", "{next:?}");
        drop(sb);
        assert!(cap.pids().is_empty(), "processes outlived the sandbox");
    }
}

/// `agentctl up` inside `cap`, with its session file in `state`; a fork bomb (and sleepers) started
/// through it and in full swing. Returns agentd's pid and a runner of agentctl commands on that session.
async fn session_with_a_bomb(cap: &PidsCap, state: &Path) -> (u32, impl Fn(&[&str]) -> std::process::Output) {
    let session = state.join("session.json");
    let agentctl = {
        let session = session.clone();
        move |args: &[&str]| {
            std::process::Command::new(binary("agentctl"))
                .args(args)
                .env("AGENTCTL_SESSION", &session)
                .env_remove("AGENTD_URL")
                .output()
                .unwrap()
        }
    };
    let up = std::process::Command::new("sh")
        .args(["-c", &cap.enter(), "sh"])
        .arg(binary("agentctl"))
        .arg("up")
        .env("AGENTCTL_SESSION", &session)
        .output()
        .unwrap();
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&session).unwrap()).unwrap();
    let pid = saved["pid"].as_u64().unwrap() as u32;
    // Its exec still running: a bomb is ended with its exec, so `down` meets it while it runs.
    let running = format!("{BOMB_AND_SLEEPERS}; sleep 1000");
    let exec = std::process::Command::new(binary("agentctl"))
        .args(["exec", "--", &running])
        .env("AGENTCTL_SESSION", &session)
        .env_remove("AGENTD_URL")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Reaped by a thread of its own: it ends when agentd goes.
    std::thread::spawn(move || {
        let mut exec = exec;
        let _ = exec.wait();
    });
    let swing = agentd_tests::eventually(Duration::from_secs(5), || {
        command_cgroups(cap, pid).iter().map(|c| pids_below(c).len()).sum::<usize>() > 100
    })
    .await;
    assert!(swing, "the bomb did not start");
    (pid, agentctl)
}

#[tokio::test]
async fn agentctl_down_finishes_under_a_running_fork_bomb() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(cap) = PidsCap::or_skip(CAP) else { return };
    let state = tempfile::tempdir().unwrap();
    let (_pid, agentctl) = session_with_a_bomb(&cap, state.path()).await;
    let started = Instant::now();
    let down = agentctl(&["down"]);
    let took = started.elapsed();
    assert!(down.status.success(), "{}", String::from_utf8_lossy(&down.stderr));
    let left = cap.pids();
    let log = std::fs::read_to_string(state.path().join("session.log")).unwrap_or_default();
    assert!(
        left.is_empty(),
        "{} processes outlived `agentctl down` ({took:?}); agentd's log:\n{log}",
        left.len()
    );
    // It finishes: agentd ends the bomb itself on SIGTERM, else `down` SIGKILLs it after 5 s and
    // ends the tagged processes itself. A liveness bound, not a speed target (a loaded CI machine
    // was seen at 15 s; alone it takes 0.1–3 s).
    println!("agentctl down under a fork bomb: {took:?}");
    assert!(took < Duration::from_secs(60), "agentctl down took {took:?}; agentd's log:\n{log}");
    assert!(!state.path().join("session.json").exists());
}

#[tokio::test]
async fn agentctl_down_ends_the_commands_of_an_agentd_that_cannot() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(cap) = PidsCap::or_skip(CAP) else { return };
    let state = tempfile::tempdir().unwrap();
    let (pid, agentctl) = session_with_a_bomb(&cap, state.path()).await;
    // A stopped agentd never acts on SIGTERM: `down` kills it after 5 s and must end the bomb itself.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGSTOP)
        .unwrap();
    let started = Instant::now();
    let down = agentctl(&["down"]);
    let took = started.elapsed();
    assert!(down.status.success(), "{}", String::from_utf8_lossy(&down.stderr));
    let left = cap.pids();
    assert!(left.is_empty(), "{} processes outlived `agentctl down` ({took:?})", left.len());
    // A liveness bound: `down` waits 5 s for agentd, then ends it and its commands itself.
    assert!(took < Duration::from_secs(60), "agentctl down took {took:?}");
}

#[tokio::test]
async fn an_exec_result_counts_the_processes_it_left_running() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(cap) = PidsCap::or_skip(64) else { return };
    async fn run(sb: &LocalSandbox, command: &str, timeout: f64) -> agentd_protocol::ExecResult {
        let request =
            ExecRequest { command: command.to_owned(), timeout: Some(timeout), ..ExecRequest::default() };
        sb.agentd().exec(request, None).await.unwrap()
    }
    let (confined, unconfined) = {
        let _inside = cap.join_thread();
        (LocalSandbox::start().await.unwrap(), LocalSandbox::start_unconfined().await.unwrap())
    };
    // In a pids cgroup (the embedded default): counted exactly, however the strays left.
    let quiet = "for i in 1 2 3; do setsid sleep 1024 >/dev/null 2>&1 & done; true";
    assert_eq!(run(&confined, "true", 20.0).await.stray_processes, Some(0));
    assert_eq!(run(&confined, quiet, 20.0).await.stray_processes, Some(3));
    // A timeout kills them: none left.
    let r = run(&confined, "sleep 1024 & sleep 1024 & sleep 30", 0.5).await;
    assert_eq!(r.stray_processes, Some(0), "{r:?}");
    // Processes that outlive the grace are killed through the cgroup, whose limit goes to 0 first;
    // kept for the next command, the cgroup takes its limit again and the command can fork.
    let r = run(&confined, "trap '' TERM; sleep 1024 & sleep 30", 0.2).await;
    assert_eq!((r.ending.timed_out, r.stray_processes), (true, Some(0)), "{r:?}");
    let next = run(&confined, "sleep 0 & wait; echo forked", 20.0).await;
    assert_eq!((next.exit_code, next.output.as_deref()), (0, Some("forked\n")), "{next:?}");
    // Without a profile, in a cgroup of its own too: counted exactly.
    assert_eq!(run(&unconfined, "true", 20.0).await.stray_processes, Some(0));
    assert_eq!(
        run(&unconfined, "sleep 1024 & setsid sleep 1024 >/dev/null 2>&1 & true", 20.0).await.stray_processes,
        Some(2)
    );
    drop((confined, unconfined));
    assert!(cap.pids().is_empty(), "strays outlived their agentd");
}

/// The per-command cgroups of a burst are kept for the next commands while agentd is busy (making
/// and removing one per command costs more than the rest of the plan), and given back once it is
/// idle, down to the few kept for good.
#[tokio::test]
async fn a_bursts_cgroups_are_kept_while_busy_and_given_back_when_idle() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(cap) = PidsCap::or_skip(CAP) else { return };
    let sb = std::sync::Arc::new(default_sandbox_in(&cap).await);
    let burst = (0..48).map(|_| {
        let sb = std::sync::Arc::clone(&sb);
        async move { sb.execute("sleep 0.5", None).await.unwrap().exit_code }
    });
    let codes = futures_util::future::join_all(burst).await;
    assert!(codes.iter().all(|c| *c == Some(0)), "{codes:?}");
    let kept = command_cgroups(&cap, sb.pid()).len();
    assert!(kept >= 40, "only {kept} of the burst's 48 cgroups were kept");
    let deadline = Instant::now() + Duration::from_secs(15);
    while command_cgroups(&cap, sb.pid()).len() > 8 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let left = command_cgroups(&cap, sb.pid()).len();
    assert!(left <= 8, "{left} idle cgroups were still kept after 15 s idle");
    // What is kept still works.
    assert_eq!(sb.execute("true", None).await.unwrap().exit_code, Some(0));
    drop(sb);
    assert!(cap.pids().is_empty(), "a command outlived its agentd");
}

/// An agentd killed with SIGKILL cannot remove its cgroups; the next agentd beside it does, and
/// leaves alone what belongs to a live process (an agentd of an older version takes no lock) or
/// still holds one.
#[tokio::test]
async fn the_cgroups_a_killed_agentd_left_are_removed_by_the_next_one() {
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(cap) = PidsCap::or_skip(CAP) else { return };
    let killed = default_sandbox_in(&cap).await;
    assert_eq!(killed.execute("true", None).await.unwrap().exit_code, Some(0));
    let pid = killed.pid();
    let left = cap.dir.join(format!("agentd-{pid}"));
    assert!(!command_cgroups(&cap, pid).is_empty(), "the agentd made no per-command cgroup");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL)
        .unwrap();
    drop(killed);
    agentd_tests::remove_scratch(pid);
    assert!(left.is_dir(), "the control: a killed agentd leaves its cgroups");
    // A live process's directory, with no lock on it; and a dead one's whose cgroup holds a process.
    let live = cap.dir.join(format!("agentd-{}", std::process::id()));
    std::fs::create_dir(&live).unwrap();
    // An agentd of another pid namespace: its pid means nothing here (none reaches 2^22, the
    // kernel's highest pid_max), its lock is held.
    let elsewhere = cap.dir.join("agentd-4194310");
    std::fs::create_dir(&elsewhere).unwrap();
    let lock = nix::fcntl::Flock::lock(
        std::fs::File::open(&elsewhere).unwrap(),
        nix::fcntl::FlockArg::LockExclusiveNonblock,
    )
    .unwrap();
    let busy = cap.dir.join("agentd-4194311");
    std::fs::create_dir_all(busy.join("0")).unwrap();
    let mut sleeper = std::process::Command::new("sleep").arg("1024").spawn().unwrap();
    std::fs::write(busy.join("0/cgroup.procs"), sleeper.id().to_string()).unwrap();

    let next = default_sandbox_in(&cap).await;
    assert_eq!(next.execute("true", None).await.unwrap().exit_code, Some(0));
    let (gone, kept, locked, held) =
        (!left.exists(), live.is_dir(), elsewhere.is_dir(), busy.join("0").is_dir());
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    drop((next, lock));
    let _ = std::fs::remove_dir(&live);
    let _ = std::fs::remove_dir(&elsewhere);
    assert!(gone, "{} is still there", left.display());
    assert!(kept, "a live process's directory was removed");
    assert!(locked, "a directory whose lock is held was removed");
    assert!(held, "a cgroup holding a process was removed");
}

/// Execs that each leave a short-lived background process behind (their cgroups cannot be kept for
/// the next command): once the processes are gone and agentd is idle, the cgroups are reclaimed down
/// to the few kept for good.
#[tokio::test]
async fn the_cgroups_of_stray_leaving_execs_are_reclaimed_once_idle() {
    const EXECS: usize = 2000;
    let _one = ONE_AT_A_TIME.lock().await;
    let Some(cap) = PidsCap::or_skip(CAP) else { return };
    let sb = std::sync::Arc::new(default_sandbox_in(&cap).await);
    let agentd = sb.pid();
    let started = Instant::now();
    let mut most = 0;
    for chunk in 0..EXECS / 8 {
        let runs = (0..8).map(|_| {
            let sb = std::sync::Arc::clone(&sb);
            async move { sb.execute("sleep 0.2 & true", None).await.unwrap().exit_code }
        });
        let codes = futures_util::future::join_all(runs).await;
        assert!(codes.iter().all(|c| *c == Some(0)), "round {chunk}: {codes:?}");
        most = most.max(command_cgroups(&cap, agentd).len());
    }
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let left = command_cgroups(&cap, agentd).len();
    println!("{EXECS} stray-leaving execs in {took:?}: at most {most} cgroups, {left} after 10 s idle");
    assert!(left <= 8, "{left} cgroups after 10 s idle");
    drop(sb);
    assert!(cap.pids().is_empty(), "a command outlived its agentd");
}
