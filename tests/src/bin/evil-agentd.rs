//! `evil-agentd MODE`: the tests' lying agentd, standalone (the Python tests start it). Prints its
//! `ws://127.0.0.1:PORT`, then serves until SIGINT/SIGTERM. Modes: see `--help`.

use std::io::Write as _;

use agentd_fakes::evil_agentd::{Evil, EvilAgentd};

fn main() -> std::process::ExitCode {
    let modes: Vec<&str> = Evil::ALL.iter().map(|(name, _)| *name).collect();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(evil) = args.first().and_then(|name| Evil::from_name(name)).filter(|_| args.len() == 1) else {
        eprintln!("usage: evil-agentd MODE\nmodes: {}", modes.join(", "));
        return std::process::ExitCode::from(2);
    };
    let server = match EvilAgentd::start(evil) {
        Ok(server) => server,
        Err(err) => {
            eprintln!("evil-agentd: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "{}", server.url());
    let _ = stdout.flush();
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        return std::process::ExitCode::FAILURE;
    };
    runtime.block_on(agentd_fakes::until_terminated());
    std::process::ExitCode::SUCCESS
}
