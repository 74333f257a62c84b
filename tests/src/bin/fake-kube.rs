//! `fake-kube`: the tests' fake Kubernetes API server, standalone. Writes a kubeconfig, prints
//! `export KUBECONFIG=<path>` (for `eval`), then serves until killed; on SIGINT/SIGTERM its
//! containers and volumes are removed (and the kubeconfig with its directory). `--listen ADDR`
//! picks the address (default 127.0.0.1:0, a free port); `--tls` serves HTTPS with a fresh CA (in the
//! kubeconfig), which `kubectl` needs: client-go sends a token only over TLS; `--agent-sandbox`
//! installs kubernetes-sigs/agent-sandbox's resources and controller.

use std::io::Write as _;

fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let mut listen = String::from("127.0.0.1:0");
    let mut tls = false;
    let mut agent_sandbox = false;
    while let Some(arg) = args.next() {
        if arg == "--tls" {
            tls = true;
            continue;
        }
        if arg == "--agent-sandbox" {
            agent_sandbox = true;
            continue;
        }
        match (arg.as_str(), args.next()) {
            ("--listen", Some(addr)) => listen = addr,
            _ => {
                eprintln!("usage: fake-kube [--listen ADDR] [--tls] [--agent-sandbox]");
                return std::process::ExitCode::from(2);
            }
        }
    }
    let addr = match listen.parse() {
        Ok(addr) => addr,
        Err(err) => {
            eprintln!("fake-kube: bad address {listen}: {err}");
            return std::process::ExitCode::from(2);
        }
    };
    let fake = match agentd_tests::fake_kube::FakeKube::launch(addr, tls) {
        Ok(fake) => fake,
        Err(err) => {
            eprintln!("fake-kube: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if agent_sandbox {
        agentd_tests::fake_kube::agent_sandbox::install(&fake);
    }
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "export KUBECONFIG={}", fake.kubeconfig_path().display());
    let _ = stdout.flush();
    eprintln!(
        "fake-kube: serving {} (containers labelled {}={})",
        fake.url(),
        agentd_tests::fake_kube::CONTAINER_LABEL,
        fake.instance()
    );
    // Wait for a signal (on the fake's own runtime), then drop the fake: it removes its containers.
    fake.block_on(agentd_tests::until_terminated());
    drop(fake);
    std::process::ExitCode::SUCCESS
}
