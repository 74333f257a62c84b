//! `fake-modal`: the tests' fake Modal, standalone. Prints `export MODAL_SERVER_URL=…`,
//! `export MODAL_TOKEN_ID=…` and `export MODAL_TOKEN_SECRET=…` (for `eval`), then serves until
//! killed; its containers are removed on SIGINT/SIGTERM. `--listen ADDR` picks the control plane's
//! address and `--router ADDR` the command router's (default 127.0.0.1:0 each, a free port).

use std::io::Write as _;
use std::net::SocketAddr;

fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let mut listen = String::from("127.0.0.1:0");
    let mut router = String::from("127.0.0.1:0");
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--listen", Some(addr)) => listen = addr,
            ("--router", Some(addr)) => router = addr,
            _ => {
                eprintln!("usage: fake-modal [--listen ADDR] [--router ADDR]");
                return std::process::ExitCode::from(2);
            }
        }
    }
    let parse = |text: &str| -> Option<SocketAddr> {
        text.parse().map_err(|err| eprintln!("fake-modal: bad address {text}: {err}")).ok()
    };
    let (Some(listen), Some(router)) = (parse(&listen), parse(&router)) else {
        return std::process::ExitCode::from(2);
    };
    let fake = match agentd_fakes::fake_modal::FakeModal::start_on(listen, router) {
        Ok(fake) => fake,
        Err(err) => {
            eprintln!("fake-modal: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout();
    for (key, value) in fake.env() {
        let _ = writeln!(stdout, "export {key}={value}");
    }
    let _ = stdout.flush();
    eprintln!(
        "fake-modal: serving, router at {} (containers labelled {}={})",
        fake.router_url(),
        agentd_fakes::fake_modal::CONTAINER_LABEL,
        fake.instance()
    );
    // Wait for a signal (on the fake's own runtime), then drop the fake: it removes its containers.
    fake.block_on(agentd_fakes::until_terminated());
    drop(fake);
    std::process::ExitCode::SUCCESS
}
