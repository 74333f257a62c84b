//! A real agentd started as a child process ([`Daemon`]): on TCP with a fresh token (optionally
//! through a wrapper command, e.g. one that joins a cgroup) or on a Unix socket, for the tests that
//! speak the protocol by hand. Dropping it stops agentd and removes what it left.

use crate::binaries::binary;
use crate::processes::nix_pid;
use crate::scratch::remove_scratch;

/// A started agentd with its address and token, for tests that speak the protocol by hand.
pub struct Daemon {
    pub child: std::process::Child,
    pub url: String,
    pub token: String,
    pub workspace: tempfile::TempDir,
    /// Holds the socket of a daemon started with [`Daemon::start_unix`].
    pub socket_dir: Option<tempfile::TempDir>,
}

impl Daemon {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts agentd with extra `serve` arguments.
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_in(tempfile::tempdir().expect("tempdir"), extra)
    }

    /// Starts agentd in `workspace` (its working directory) with extra `serve` arguments.
    pub fn start_in(workspace: tempfile::TempDir, extra: &[&str]) -> Self {
        Self::launch(&[], workspace, extra, None)
    }

    /// Starts agentd on TCP with a fresh token, through `wrapper` when given (a command that ends by
    /// running its arguments, e.g. a shell that first joins a cgroup), in `workspace`, with extra
    /// `serve` arguments. The token goes in through `token_file` when given, else `AGENTD_TOKEN`.
    pub fn launch(
        wrapper: &[&str],
        workspace: tempfile::TempDir,
        extra: &[&str],
        token_file: Option<&std::path::Path>,
    ) -> Self {
        let token = format!("test-token-{}", rand::random::<u64>());
        let agentd = binary("agentd");
        let mut command = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut command = std::process::Command::new(program);
                command.args(rest).arg(&agentd);
                command
            }
            None => std::process::Command::new(&agentd),
        };
        command.args(["serve", "--listen", "127.0.0.1:0"]).args(extra);
        match token_file {
            Some(path) => {
                std::fs::write(path, &token).expect("token file");
                command.arg("--token-file").arg(path);
            }
            None => {
                command.env("AGENTD_TOKEN", &token);
            }
        }
        Self::spawn(command, workspace, token, None)
    }

    /// Starts agentd on a Unix socket (a local session: no token), with extra `serve` arguments.
    pub fn start_unix(extra: &[&str]) -> Self {
        let socket_dir = tempfile::tempdir().expect("tempdir");
        let mut command = std::process::Command::new(binary("agentd"));
        command.arg("serve").arg("--unix").arg(socket_dir.path().join("agentd.sock")).args(extra);
        Self::spawn(command, tempfile::tempdir().expect("tempdir"), String::new(), Some(socket_dir))
    }

    fn spawn(
        mut command: std::process::Command,
        workspace: tempfile::TempDir,
        token: String,
        socket_dir: Option<tempfile::TempDir>,
    ) -> Self {
        let mut child = command
            .current_dir(workspace.path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn agentd");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
            &mut line,
        )
        .expect("read address");
        let url = line.trim().strip_prefix("agentd listening on ").expect("address line").to_owned();
        Self { child, url, token, workspace, socket_dir }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(nix_pid(self.child.id()), nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
        remove_scratch(self.child.id());
    }
}
