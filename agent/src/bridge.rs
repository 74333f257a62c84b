//! `agentd bridge --unix PATH`: relays this process's stdin and stdout to the agentd serving the
//! Unix socket at PATH, byte for byte, until either side ends. For channels that carry only stdio
//! (Kubernetes' `pods/exec`): the session it carries, and every command that session starts,
//! belong to the agentd behind the socket, so they outlive the channel, and a client that lost
//! the channel attaches to its processes again over a new one.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::ExitCode;

/// Exit status when nothing serves the socket (the caller starts agentd and tries again).
pub const NOT_SERVED: u8 = 3;

pub fn bridge(socket: &Path) -> ExitCode {
    let stream = match UnixStream::connect(socket) {
        Ok(stream) => stream,
        Err(err) => {
            eprintln!("agentd bridge: nothing serves {}: {err}", socket.display());
            return ExitCode::from(NOT_SERVED);
        }
    };
    let (mut to_agentd, mut from_agentd) = match stream.try_clone() {
        Ok(clone) => (stream, clone),
        Err(err) => {
            eprintln!("agentd bridge: {err}");
            return ExitCode::FAILURE;
        }
    };
    // stdin → agentd on its own thread; at EOF (the channel closed) agentd sees the end of the
    // connection, closes its side, and the copy below ends too.
    std::thread::spawn(move || {
        let _ = relay(&mut std::io::stdin().lock(), &mut to_agentd);
        let _ = to_agentd.shutdown(std::net::Shutdown::Write);
    });
    match relay(&mut from_agentd, &mut std::io::stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        // The channel's reader went away: nothing more to deliver.
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("agentd bridge: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Copies until EOF, flushing each piece at once (a websocket frame must not wait in a buffer).
fn relay(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        to.write_all(&buf[..n])?;
        to.flush()?;
    }
}
