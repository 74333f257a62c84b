//! `fake-daytona`: the tests' fake Daytona, standalone. Prints `export DAYTONA_API_URL=…` and
//! `export DAYTONA_API_KEY=…` (for `eval`), then serves until killed; its containers are removed on
//! SIGINT/SIGTERM. `--listen ADDR` picks the address (default 127.0.0.1:0, a free port).

use std::io::Write as _;

fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let mut listen = String::from("127.0.0.1:0");
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--listen", Some(addr)) => listen = addr,
            _ => {
                eprintln!("usage: fake-daytona [--listen ADDR]");
                return std::process::ExitCode::from(2);
            }
        }
    }
    let addr = match listen.parse() {
        Ok(addr) => addr,
        Err(err) => {
            eprintln!("fake-daytona: bad address {listen}: {err}");
            return std::process::ExitCode::from(2);
        }
    };
    let fake = match agentd_fakes::fake_daytona::FakeDaytona::start_on(addr) {
        Ok(fake) => fake,
        Err(err) => {
            eprintln!("fake-daytona: {err}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "export DAYTONA_API_URL={}", fake.api_url());
    let _ = writeln!(stdout, "export DAYTONA_API_KEY={}", fake.api_key());
    let _ = stdout.flush();
    eprintln!(
        "fake-daytona: serving (containers labelled {}={})",
        agentd_fakes::fake_daytona::CONTAINER_LABEL,
        fake.instance()
    );
    // Wait for a signal (on the fake's own runtime), then drop the fake: it removes its containers.
    fake.block_on(agentd_fakes::until_terminated());
    drop(fake);
    std::process::ExitCode::SUCCESS
}
