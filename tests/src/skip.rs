//! Skips made visible: what a test needs from the machine ([`Need`]), the one way a test says it
//! cannot run here ([`skip`], a failure where CI requires the need), and [`as_root`].

/// What a test needs from the machine that the machine may not have.
#[derive(Clone, Copy, Debug)]
pub enum Need {
    /// A Docker engine and the images `images/build.sh` builds.
    Docker,
    /// Landlock (at the ABI the test names in its reason).
    Landlock,
    /// A writable cgroup v1 `pids` hierarchy (root).
    Cgroup,
    /// python3, for the probes the shell cannot make.
    Python3,
    /// The official `daytona` Python SDK: `$AGENTD_DAYTONA_PYTHON` names a python that imports it.
    DaytonaSdk,
    /// The official `modal` Python client: `$AGENTD_MODAL_PYTHON` names a python that imports it.
    ModalSdk,
    /// The official Kubernetes Python clients (`kubernetes`, `k8s-agent-sandbox`):
    /// `$AGENTD_KUBE_PYTHON` names a python that imports them.
    KubeSdk,
    /// deepagents itself (its `StateBackend` is the reference for `StateSandbox`):
    /// `$AGENTD_DEEPAGENTS_PYTHON` names a python that imports it.
    Deepagents,
    /// `kubectl` on the `PATH`.
    Kubectl,
    /// Root, for what only root may do to the machine around agentd (mounts).
    Root,
}

impl Need {
    /// The variable that makes a skip for this need a failure (`.ci/run` sets them all).
    pub fn variable(self) -> &'static str {
        match self {
            Self::Docker => "AGENTD_REQUIRE_DOCKER",
            Self::Landlock => "AGENTD_REQUIRE_LANDLOCK",
            Self::Cgroup => "AGENTD_REQUIRE_CGROUP",
            Self::Python3 => "AGENTD_REQUIRE_PYTHON3",
            Self::DaytonaSdk => "AGENTD_REQUIRE_DAYTONA_SDK",
            Self::ModalSdk => "AGENTD_REQUIRE_MODAL_SDK",
            Self::KubeSdk => "AGENTD_REQUIRE_KUBE_SDK",
            Self::Deepagents => "AGENTD_REQUIRE_DEEPAGENTS",
            Self::Kubectl => "AGENTD_REQUIRE_KUBECTL",
            Self::Root => "AGENTD_REQUIRE_ROOT",
        }
    }
}

/// The one way a test says it cannot run here; the caller returns right after.
///
/// libtest has no runtime skip, so a skipped test counts as passed there. This makes it visible:
/// it fails the test when `need`'s `AGENTD_REQUIRE_*` variable is set; otherwise it writes
/// `skipped: <binary>::<test>: <reason>` to stderr (straight to the descriptor, so libtest's capture
/// does not hide it) and appends the same line to the file `$AGENTD_SKIP_LOG` names, from which
/// `.ci/run` counts skips (one per test) and takes them off the passed count.
pub fn skip(need: Need, reason: impl std::fmt::Display) {
    use std::io::Write as _;
    let variable = need.variable();
    assert!(std::env::var_os(variable).is_none(), "{variable} is set, but this test would skip: {reason}");
    let line = format!("skipped: {}: {reason}\n", test_name());
    // One write each: lines from tests running in parallel do not mix.
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(log) = std::env::var_os("AGENTD_SKIP_LOG") {
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .and_then(|mut file| file.write_all(line.as_bytes()));
        if let Err(err) = appended {
            panic!("cannot record the skip in {}: {err}", std::path::Path::new(&log).display());
        }
    }
}

/// Whether this test runs as root; it skips otherwise, saying `why` root is needed.
pub fn as_root(why: &str) -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        skip(Need::Root, why);
    }
    root
}

/// `<test binary>::<test>`: libtest runs each test on a thread named after it; the binary's name
/// (without cargo's hash) tells apart tests of the same name in several binaries.
fn test_name() -> String {
    let binary = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|stem| match stem.rsplit_once('-') {
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
            _ => stem,
        })
        .unwrap_or_else(|| "?".to_owned());
    let thread = std::thread::current();
    format!("{binary}::{}", thread.name().unwrap_or("?"))
}
