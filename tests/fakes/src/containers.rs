//! The fake providers' sandboxes as Docker containers, driven through the `docker` CLI (shared by
//! the fake Daytona and the fake Modal). Bytes go through `docker exec -i` stdin/stdout without a
//! terminal, so they arrive unchanged.
//!
//! Every container carries `<label>=<instance>` (the fake's instance) and `<label>.sandbox=<id>`, so
//! a fake removes its own on drop and a leftover can be found by label.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;

use tokio::io::AsyncWriteExt as _;
use tokio::process::Command;

/// Keeps a container alive with nothing of agentd in it; `docker-init` (`--init`) reaps the
/// orphans a killed exec leaves and ends `sleep` at once on stop.
const KEEP_ALIVE: &[&str] = &["sleep", "infinity"];

/// Runs `docker ARGS` with `input` on stdin; (exit code, stdout, stderr). `kill_on_drop`: a caller
/// that gives up takes the CLI down with it.
pub async fn docker(args: &[&str], input: Option<Vec<u8>>) -> std::io::Result<(i32, Vec<u8>, Vec<u8>)> {
    let mut child = Command::new("docker")
        .args(args)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    // Written from its own task: a process that writes a lot before reading cannot deadlock us.
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        tokio::spawn(async move {
            // The process may exit without reading it all (EPIPE): its exit status tells.
            let _ = stdin.write_all(&input).await;
            let _ = stdin.shutdown().await;
        });
    }
    let output = child.wait_with_output().await?;
    Ok((output.status.code().unwrap_or(-1), output.stdout, output.stderr))
}

/// [`docker`] for a command that makes something (a container, a volume), run to completion even
/// when its caller is dropped. It runs on the runtime's blocking pool, which a runtime that shuts
/// down waits for: killing the CLI instead can leave the daemon finishing the container after the
/// fake's cleanup (which runs once its runtime is gone) has listed what to remove.
pub async fn docker_making(args: &[&str]) -> std::io::Result<(i32, Vec<u8>, Vec<u8>)> {
    let args: Vec<String> = args.iter().map(|&a| a.to_owned()).collect();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("docker").args(&args).stdin(Stdio::null()).output()
    })
    .await
    .map_err(std::io::Error::other)??;
    Ok((output.status.code().unwrap_or(-1), output.stdout, output.stderr))
}

/// Docker's output as trimmed text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim().to_owned()
}

pub async fn image_exists(image: &str) -> bool {
    matches!(docker(&["image", "inspect", "--format", "{{.Id}}", image], None).await, Ok((0, _, _)))
}

/// What one sandbox's container is made of.
pub struct Spec<'a> {
    /// The label naming the fake (`dev.agentd.fake-daytona`, …) and its value, the fake's instance.
    pub label: &'a str,
    pub instance: &'a str,
    /// The sandbox id (label `<label>.sandbox`).
    pub sandbox: &'a str,
    pub image: &'a str,
    pub env: &'a BTreeMap<String, String>,
    /// Host directories bound at the same paths.
    pub mounts: &'a [PathBuf],
    pub workdir: Option<&'a str>,
    /// The command (entrypoint and arguments); empty: `sleep infinity`.
    pub command: &'a [String],
    /// Container ports published on 127.0.0.1 (a random host port each: [`published_port`]).
    pub publish: &'a [u16],
}

/// Creates and starts a container (under `docker-init`); its id, or Docker's message.
pub async fn run(spec: &Spec<'_>) -> Result<String, String> {
    let instance_label = format!("{}={}", spec.label, spec.instance);
    let sandbox_label = format!("{}.sandbox={}", spec.label, spec.sandbox);
    let env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut args = vec!["run", "-d", "--init", "--label", &instance_label, "--label", &sandbox_label];
    for pair in &env {
        args.extend(["-e", pair.as_str()]);
    }
    let binds: Vec<String> = spec.mounts.iter().map(|dir| format!("{0}:{0}", dir.display())).collect();
    for bind in &binds {
        args.extend(["-v", bind.as_str()]);
    }
    let ports: Vec<String> = spec.publish.iter().map(|port| format!("127.0.0.1::{port}")).collect();
    for port in &ports {
        args.extend(["-p", port.as_str()]);
    }
    if let Some(dir) = spec.workdir {
        args.extend(["-w", dir]);
    }
    let command: Vec<&str> = match spec.command {
        [] => KEEP_ALIVE.to_vec(),
        words => words.iter().map(String::as_str).collect(),
    };
    args.extend(["--entrypoint", command[0], spec.image]);
    args.extend(&command[1..]);
    match docker_making(&args).await {
        Ok((0, stdout, _)) => Ok(text(&stdout)),
        Ok((_, _, stderr)) => Err(text(&stderr)),
        Err(err) => Err(format!("docker: {err}")),
    }
}

/// The host port on 127.0.0.1 that container port `port` (TCP) is published on.
pub async fn published_port(container: &str, port: u16) -> Option<u16> {
    let port = format!("{port}/tcp");
    match docker(&["port", container, &port], None).await {
        Ok((0, stdout, _)) => {
            text(&stdout).lines().find_map(|line| line.strip_prefix("127.0.0.1:")?.trim().parse().ok())
        }
        _ => None,
    }
}

/// The container's address on its (bridge) network.
pub async fn ip(container: &str) -> Option<String> {
    let format = "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}";
    match docker(&["inspect", "--format", format, container], None).await {
        Ok((0, stdout, _)) => text(&stdout).split_whitespace().next().map(str::to_owned),
        _ => None,
    }
}

pub async fn stop(container: &str) -> Result<(), String> {
    match docker(&["stop", "-t", "2", container], None).await {
        Ok((0, _, _)) => Ok(()),
        Ok((_, _, stderr)) => Err(text(&stderr)),
        Err(err) => Err(err.to_string()),
    }
}

pub async fn start(container: &str) -> Result<(), String> {
    match docker(&["start", container], None).await {
        Ok((0, _, _)) => Ok(()),
        Ok((_, _, stderr)) => Err(text(&stderr)),
        Err(err) => Err(err.to_string()),
    }
}

pub async fn remove(container: &str) {
    let _ = docker(&["rm", "-f", "-v", container], None).await;
}

/// Blocks until the container's main process ends; its exit code (None when the container is gone).
pub async fn wait(container: &str) -> Option<i32> {
    match docker(&["wait", container], None).await {
        Ok((0, stdout, _)) => text(&stdout).parse().ok(),
        _ => None,
    }
}

/// The ids of the containers (any state) that match a `docker ps --filter` (e.g.
/// `label=dev.agentd.fake-modal.sandbox=sb-…`); blocking, for tests.
pub fn listed(filter: &str) -> Vec<String> {
    match std::process::Command::new("docker").args(["ps", "-aq", "--filter", filter]).output() {
        Ok(out) => text(&out.stdout).split_whitespace().map(str::to_owned).collect(),
        Err(_) => Vec::new(),
    }
}

/// Removes every container labelled `label=instance` (from `Drop`, outside any runtime).
pub fn remove_all_blocking(label: &str, instance: &str) {
    let ids = listed(&format!("label={label}={instance}"));
    if !ids.is_empty() {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", "-v"])
            .args(&ids)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A fresh `NAME=<random>` to put in one exec's environment: every process of that exec inherits
/// it, so [`kill_marked`] can find them all (its process group and whatever it started).
pub fn exec_marker(name: &str) -> String {
    format!("{name}={}", crate::random_hex(12))
}

/// SIGKILLs every process in `container` whose environment holds `marker` (two passes, for
/// children forked during the first).
pub async fn kill_marked(container: &str, marker: &str) {
    let script = format!(
        "for pass in 1 2; do for d in /proc/[0-9]*; do \
         if grep -q '{marker}' \"$d/environ\" 2>/dev/null; then kill -9 \"${{d#/proc/}}\" 2>/dev/null; fi; \
         done; done"
    );
    let _ = docker(&["exec", container, "sh", "-c", &script], None).await;
}
