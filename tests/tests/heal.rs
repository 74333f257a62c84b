//! The link heals itself: a TCP proxy on loopback between the host library and a real agentd cuts
//! every connection at random moments, many times while execs write known output. Every `execute`
//! returns its exact output and exit code; a streamed exec's output arrives byte-exact, each cut
//! resumed from the last byte delivered.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agentd_host::{AgentdSandbox, BaseSandbox};
use agentd_protocol::ExecRequest;
use agentd_tests::Daemon;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A proxy to `target` whose connections a cutter drops at random moments.
struct CuttingProxy {
    url: String,
    cuts: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<()>>,
}

impl CuttingProxy {
    /// Cuts every open connection once every `min..max` milliseconds (random).
    async fn start(target: &str, min: u64, max: u64) -> Self {
        let target = target.trim_start_matches("ws://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        let open: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let cuts = Arc::new(AtomicUsize::new(0));
        let accept = {
            let open = Arc::clone(&open);
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    let target = target.clone();
                    let pipe = tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(&target).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    open.lock().unwrap().push(pipe);
                }
            })
        };
        let cutter = {
            let (open, cuts) = (Arc::clone(&open), Arc::clone(&cuts));
            tokio::spawn(async move {
                loop {
                    let pause = min + rand::random::<u64>() % (max - min);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    let pipes: Vec<JoinHandle<()>> = std::mem::take(&mut *open.lock().unwrap());
                    let live = pipes.iter().filter(|pipe| !pipe.is_finished()).count();
                    for pipe in pipes {
                        // Dropping both sockets mid-stream: the link sees its connection end.
                        pipe.abort();
                    }
                    if live > 0 {
                        cuts.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        Self { url, cuts, tasks: vec![accept, cutter] }
    }
}

impl Drop for CuttingProxy {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// What `seq 1 n` prints.
fn numbers(n: u32) -> String {
    (1..=n).map(|i| format!("{i}\n")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execs_survive_a_link_cut_many_times_with_exact_output_and_exit_codes() {
    let daemon = Daemon::start();
    let proxy = CuttingProxy::start(&daemon.url, 40, 250).await;
    let sandbox = Arc::new(AgentdSandbox::connect(&proxy.url, Some(&daemon.token)).await.unwrap());
    let rounds = 12;
    let mut runs = Vec::new();
    for i in 0..rounds {
        let sandbox = Arc::clone(&sandbox);
        runs.push(tokio::spawn(async move {
            // Output before, across and after cuts: half of it after a pause.
            let n = 20_000 + i * 1000;
            let command =
                format!("seq 1 {}; sleep 0.{}; seq {} {n}; exit {}", n / 2, 2 + i % 5, n / 2 + 1, i % 7);
            let response = sandbox.execute(&command, None).await.expect("execute survives the cuts");
            assert_eq!(response.output, numbers(n), "round {i}");
            assert_eq!(response.exit_code, Some(i32::try_from(i % 7).unwrap()), "round {i}");
        }));
    }
    for i in 0..rounds / 2 {
        let sandbox = Arc::clone(&sandbox);
        runs.push(tokio::spawn(async move {
            let n = 30_000 + i * 500;
            let request = ExecRequest {
                command: format!("seq 1 {}; sleep 0.3; seq {} {n}", n / 2, n / 2 + 1),
                ..ExecRequest::default()
            };
            let mut streamed = Vec::new();
            let mut sink = |data: &[u8]| streamed.extend_from_slice(data);
            let result = sandbox.exec(request, Some(&mut sink)).await.expect("streamed exec survives");
            assert_eq!(String::from_utf8(streamed).unwrap(), numbers(n), "streamed {i}: byte-exact");
            assert_eq!(result.output.as_deref(), Some(numbers(n).as_str()));
            assert_eq!(result.exit_code, 0);
        }));
    }
    for run in runs {
        run.await.unwrap();
    }
    let cuts = proxy.cuts.load(Ordering::Relaxed);
    println!("{cuts} cuts of the link during {} execs", rounds + rounds / 2);
    assert!(cuts >= 3, "the proxy cut the link only {cuts} times");
}

/// Where [`NamingProxy`] ends a connection.
#[derive(Clone, Copy, Debug)]
enum Before {
    /// The first request after `hello` (the exec) is swallowed: agentd never sees it.
    Request,
    /// agentd's `exec_started` is swallowed: the command runs, the client never learns its name.
    Started,
}

/// A proxy to `target` that ends each of its first `cuts` connections at `before`; later ones pass.
struct NamingProxy {
    url: String,
    cut: Arc<AtomicUsize>,
    accept: JoinHandle<()>,
}

impl NamingProxy {
    async fn start(target: &str, before: Before, cuts: usize) -> Self {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let target = target.trim_start_matches("ws://").to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        let cut = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&cut);
        let accept = tokio::spawn(async move {
            let mut accepted = 0;
            while let Ok((client, _)) = listener.accept().await {
                accepted += 1;
                let Ok(server) = TcpStream::connect(&target).await else { continue };
                let (counted, cutting) = (Arc::clone(&counted), accepted <= cuts);
                tokio::spawn(async move {
                    let (mut client_rx, mut client_tx) = client.into_split();
                    let (mut server_rx, mut server_tx) = server.into_split();
                    let greeted = Arc::new(tokio::sync::Notify::new());
                    let greeted_up = Arc::clone(&greeted);
                    // Both directions end when either does: the sockets drop together.
                    let up = async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        let mut after_hello = false;
                        loop {
                            tokio::select! {
                                () = greeted_up.notified(), if !after_hello => after_hello = true,
                                read = client_rx.read(&mut buf) => {
                                    let n = match read { Ok(0) | Err(_) => return false, Ok(n) => n };
                                    if cutting && after_hello && matches!(before, Before::Request) {
                                        return true;
                                    }
                                    if server_tx.write_all(&buf[..n]).await.is_err() {
                                        return false;
                                    }
                                }
                            }
                        }
                    };
                    let down = async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        let mut seen = Vec::new();
                        loop {
                            let n = match server_rx.read(&mut buf).await {
                                Ok(0) | Err(_) => return false,
                                Ok(n) => n,
                            };
                            seen.extend_from_slice(&buf[..n]);
                            let has = |text: &[u8]| seen.windows(text.len()).any(|w| w == text);
                            if cutting && matches!(before, Before::Started) && has(b"\"exec_started\"") {
                                return true;
                            }
                            if client_tx.write_all(&buf[..n]).await.is_err() {
                                return false;
                            }
                            if has(b"\"hello\"") {
                                greeted.notify_one();
                            }
                        }
                    };
                    let cut = tokio::select! { cut = up => cut, cut = down => cut };
                    if cut {
                        counted.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
        });
        Self { url, cut, accept }
    }
}

impl Drop for NamingProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// The window no resume covers: the link drops after the exec was sent and before agentd named its
/// process (`exec_started`), so the client cannot attach to it and does not know whether it
/// runs. The client named it (`exec.process`) and sends it again: refused as existing when the
/// first had arrived, then attached to. Each command runs once and returns its exact output,
/// streamed or not, however many connections drop in that window.
#[tokio::test]
async fn an_exec_whose_link_drops_before_it_is_named_runs_once() {
    for before in [Before::Request, Before::Started] {
        let daemon = Daemon::start();
        let proxy = NamingProxy::start(&daemon.url, before, 3).await;
        let sandbox = AgentdSandbox::connect(&proxy.url, Some(&daemon.token)).await.unwrap();
        assert!(sandbox.link().await.unwrap().hello().named_processes);
        let ws = daemon.workspace.path();
        let response = sandbox.execute("echo ran >> ran-1; seq 1 5000; exit 3", None).await.unwrap();
        assert_eq!(
            (response.output.as_str(), response.exit_code),
            (numbers(5000).as_str(), Some(3)),
            "{before:?}"
        );
        assert_eq!(std::fs::read_to_string(ws.join("ran-1")).unwrap(), "ran\n", "{before:?}: ran once");
        let request =
            ExecRequest { command: "echo ran >> ran-2; seq 1 7000".to_owned(), ..ExecRequest::default() };
        let mut streamed = Vec::new();
        let mut sink = |data: &[u8]| streamed.extend_from_slice(data);
        let result = sandbox.exec(request, Some(&mut sink)).await.unwrap();
        assert_eq!(String::from_utf8(streamed).unwrap(), numbers(7000), "{before:?}: streamed byte-exact");
        assert_eq!(result.exit_code, 0);
        assert_eq!(std::fs::read_to_string(ws.join("ran-2")).unwrap(), "ran\n", "{before:?}: ran once");
        // The first exec's connection and the ones after it were cut, up to `cuts`.
        assert_eq!(proxy.cut.load(Ordering::Relaxed), 3, "{before:?}");
    }
}

#[tokio::test]
async fn past_its_grace_a_cut_exec_is_ended_and_the_caller_told() {
    let daemon = Daemon::start();
    // A proxy that accepts the first connection only: the link never comes back.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let target = daemon.url.trim_start_matches("ws://").to_owned();
    let (cut_tx, cut_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut client, _) = listener.accept().await.unwrap();
        let mut server = TcpStream::connect(&target).await.unwrap();
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
            _ = cut_rx => {}
        }
        drop(listener);
    });
    let sandbox = AgentdSandbox::connect(&url, Some(&daemon.token)).await.unwrap();
    let request = ExecRequest { command: "sleep 60".into(), keep: Some(0.5), ..ExecRequest::default() };
    let exec = tokio::spawn(async move { sandbox.exec(request, None).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    cut_tx.send(()).unwrap();
    let outcome =
        tokio::time::timeout(Duration::from_secs(20), exec).await.expect("gives up in time").unwrap();
    assert!(outcome.is_err(), "no result can be had: {outcome:?}");
    // agentd ended it after its grace.
    let direct = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    let link = direct.link().await.unwrap();
    let mut ended = false;
    for _ in 0..100 {
        let processes = link.processes().await.unwrap();
        if processes.iter().all(|p| p.state == agentd_protocol::ProcessState::Exited && p.ending.abandoned) {
            ended = !processes.is_empty();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ended, "{:?}", link.processes().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_process_is_followed_again_from_the_last_byte_across_cuts() {
    use agentd_host::contract::link::ProcessEvent;
    let daemon = Daemon::start();
    let proxy = CuttingProxy::start(&daemon.url, 40, 200).await;
    let sandbox = AgentdSandbox::connect(&proxy.url, Some(&daemon.token)).await.unwrap();
    let mut runs = Vec::new();
    // Several spawned processes writing over about a second each, followed through the cuts.
    for i in 0..4u32 {
        let command =
            format!("for i in $(seq 1 20); do seq $((i*1000)) $((i*1000+999)); sleep 0.05; done; exit {i}");
        let request = ExecRequest { command, ..ExecRequest::default() };
        let mut process = loop {
            // Spawning itself may meet a cut: a new attempt is a new process.
            match sandbox.spawn(request.clone()).await {
                Ok(process) => break process,
                Err(err) => eprintln!("spawn through a cut: {err}"),
            }
        };
        let mut bytes = Vec::new();
        let result = loop {
            match process.next().await.expect("followed through the cuts") {
                Some(ProcessEvent::Output(data)) => bytes.extend_from_slice(&data),
                Some(ProcessEvent::Gap(offset)) => panic!("a gap at {offset}"),
                Some(ProcessEvent::Ended(result)) => break result,
                None => panic!("no result"),
            }
        };
        let expected: String =
            (1..=20).flat_map(|k| (k * 1000..=k * 1000 + 999).map(|n| format!("{n}\n"))).collect();
        assert_eq!(String::from_utf8(bytes).unwrap(), expected, "process {i}: every byte once, in order");
        assert_eq!(result.exit_code, i32::try_from(i).unwrap());
        runs.push(process.delivered());
    }
    let cuts = proxy.cuts.load(Ordering::Relaxed);
    println!("{cuts} cuts while following {} processes", runs.len());
    assert!(cuts >= 3, "the proxy cut the link only {cuts} times");
}

#[tokio::test]
async fn execs_kept_only_to_heal_leave_nothing_retained() {
    let daemon = Daemon::start();
    let sandbox = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    for i in 0..50 {
        let response = sandbox.execute(&format!("echo {i}"), None).await.unwrap();
        assert_eq!(response.output, format!("{i}\n"));
    }
    // The forget of each result goes without a wait: it is in by the time the list is answered.
    let link = sandbox.link().await.unwrap();
    let left = link.processes().await.unwrap();
    assert!(left.is_empty(), "{} results retained: {:?}", left.len(), left.first());
    // One the caller kept is retained.
    let request = ExecRequest { command: "echo mine".into(), keep: Some(5.0), ..ExecRequest::default() };
    let kept = sandbox.exec(request, None).await.unwrap();
    let left = link.processes().await.unwrap();
    assert_eq!(left.iter().map(|p| p.process.as_str()).collect::<Vec<_>>(), [kept.process.as_str()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agentctl_attach_prints_every_byte_once_across_cuts() {
    let daemon = Daemon::start();
    let direct = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    let command = "for i in $(seq 1 20); do seq $((i*1000)) $((i*1000+999)); sleep 0.05; done; exit 5";
    let request = ExecRequest { command: command.into(), ..ExecRequest::default() };
    let process = direct.link().await.unwrap().spawn(request).await.unwrap().process;
    let proxy = CuttingProxy::start(&daemon.url, 40, 200).await;
    let out = tokio::process::Command::new(agentd_tests::binary("agentctl"))
        .args(["--url", &proxy.url, "attach", &process])
        .env("AGENTD_TOKEN", &daemon.token)
        .env_remove("AGENTD_URL")
        .output()
        .await
        .unwrap();
    let expected: String =
        (1..=20).flat_map(|k| (k * 1000..=k * 1000 + 999).map(|n| format!("{n}\n"))).collect();
    assert_eq!(String::from_utf8_lossy(&out.stdout), expected, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(5));
    let cuts = proxy.cuts.load(Ordering::Relaxed);
    println!("{cuts} cuts while agentctl attached");
    assert!(cuts >= 2, "the proxy cut the link only {cuts} times");
}
