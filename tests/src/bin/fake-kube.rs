//! `fake-kube`: the tests' fake Kubernetes API server, standalone. Writes a kubeconfig, prints
//! `export KUBECONFIG=<path>` (for `eval`), then serves until killed; on SIGINT/SIGTERM its
//! containers and volumes are removed (and the kubeconfig with its directory). `--listen ADDR`
//! picks the address (default 127.0.0.1:0, a free port); `--tls` serves HTTPS with a fresh CA (in the
//! kubeconfig), which `kubectl` needs: client-go sends a token only over TLS; `--agent-sandbox`
//! installs kubernetes-sigs/agent-sandbox's resources and controller; `--warm-pool NAME=IMAGE:N`
//! (implies `--agent-sandbox`, may repeat) also makes the `SandboxTemplate` and `SandboxWarmPool`
//! NAME that `agentctl sandbox kube-template` makes: N warm Sandboxes of IMAGE, agentd copied in by
//! an initContainer.

use std::io::Write as _;

fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let mut listen = String::from("127.0.0.1:0");
    let mut tls = false;
    let mut agent_sandbox = false;
    let mut pools = Vec::new();
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
            ("--warm-pool", Some(pool)) => match warm_pool(&pool) {
                Some(pool) => {
                    agent_sandbox = true;
                    pools.push(pool);
                }
                None => {
                    eprintln!("fake-kube: --warm-pool takes NAME=IMAGE:N, not {pool}");
                    return std::process::ExitCode::from(2);
                }
            },
            _ => {
                eprintln!(
                    "usage: fake-kube [--listen ADDR] [--tls] [--agent-sandbox] [--warm-pool NAME=IMAGE:N]…"
                );
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
    let fake = match agentd_fakes::fake_kube::FakeKube::launch(addr, tls) {
        Ok(fake) => fake,
        Err(err) => {
            eprintln!("fake-kube: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    if agent_sandbox {
        agentd_fakes::fake_kube::agent_sandbox::install(&fake);
    }
    for (name, image, replicas) in pools {
        use agentd_fakes::fake_kube::ResourceKey;
        use agentd_host::adapters::kubernetes::manifests;
        let group = "extensions.agents.x-k8s.io";
        let made = [
            (
                ResourceKey::new(group, "sandboxtemplates"),
                manifests::sandbox_template(&name, &image, manifests::AGENTD_IMAGE),
            ),
            (ResourceKey::new(group, "sandboxwarmpools"), manifests::warm_pool(&name, &name, replicas)),
        ];
        for (key, object) in made {
            if let Err(err) = fake.store().create(&key, fake.namespace(), object) {
                eprintln!("fake-kube: cannot make the warm pool {name}: {}", err.body());
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "export KUBECONFIG={}", fake.kubeconfig_path().display());
    let _ = stdout.flush();
    eprintln!(
        "fake-kube: serving {} (containers labelled {}={})",
        fake.url(),
        agentd_fakes::fake_kube::CONTAINER_LABEL,
        fake.instance()
    );
    // Wait for a signal (on the fake's own runtime), then drop the fake: it removes its containers.
    fake.block_on(agentd_fakes::until_terminated());
    drop(fake);
    std::process::ExitCode::SUCCESS
}

/// `NAME=IMAGE:N` (the image may hold colons: N is after the last).
fn warm_pool(text: &str) -> Option<(String, String, u32)> {
    let (name, rest) = text.split_once('=')?;
    let (image, replicas) = rest.rsplit_once(':')?;
    Some((name.to_owned(), image.to_owned(), replicas.parse().ok()?))
}
