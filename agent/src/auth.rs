//! Who may connect: a bearer token on the websocket upgrade, compared in constant time; TCP always
//! needs one (the Unix socket of a local session checks the peer process instead, in `server`).
//!
//! The token comes from `--token-file` or from `AGENTD_TOKEN`, never from the command line (where
//! `/proc/<pid>/cmdline` shows it to every process). `main` removes `AGENTD_TOKEN` from agentd's own
//! environment before any thread or child exists, so no exec inherits it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Environment variable that may carry the token.
pub const TOKEN_ENV: &str = "AGENTD_TOKEN";

#[derive(Debug, Error)]
pub enum AuthError {
    #[error("cannot read the token file `{path}`: {source}")]
    TokenFile { path: PathBuf, source: std::io::Error },
    #[error("the token is empty")]
    EmptyToken,
    #[error(
        "refusing to listen on {0} without a token: any process that can reach it (on loopback: \
         every local user and the sandbox's own commands) could run commands. Give --token-file FILE \
         or set AGENTD_TOKEN, or serve a local session on a Unix socket with --unix PATH"
    )]
    NoToken(SocketAddr),
}

/// The shared secret clients must present.
pub struct Token(Vec<u8>);

impl Token {
    /// Reads the token from `file`, else takes `from_env` (the value `AGENTD_TOKEN` had).
    pub fn load(file: Option<&Path>, from_env: Option<String>) -> Result<Option<Self>, AuthError> {
        let raw = match file {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|source| AuthError::TokenFile { path: path.to_owned(), source })?,
            None => match from_env {
                Some(value) => value,
                None => return Ok(None),
            },
        };
        let token = raw.trim();
        if token.is_empty() {
            return Err(AuthError::EmptyToken);
        }
        Ok(Some(Self(token.as_bytes().to_vec())))
    }

    /// Whether an `Authorization` header value presents this token.
    pub fn accepts(&self, authorization: Option<&[u8]>) -> bool {
        let presented = authorization.and_then(|value| value.strip_prefix(b"Bearer ")).unwrap_or_default();
        constant_time_eq(presented, &self.0)
    }
}

/// Takes the token out of agentd's environment: returns its value, overwrites it in the process's
/// original environment block (which `/proc/<pid>/environ` shows, even after `unsetenv`), then
/// removes the variable so no child inherits it.
///
/// # Safety
/// Must run before any other thread exists: it writes to the environment without locks.
pub unsafe fn take_env_token() -> Option<String> {
    let value = std::env::var(TOKEN_ENV).ok();
    unsafe extern "C" {
        static mut environ: *mut *mut libc::c_char;
    }
    let prefix = format!("{TOKEN_ENV}=");
    // SAFETY: single-threaded (the caller's promise); `environ` is the NULL-terminated array of
    // NUL-terminated strings the kernel placed in writable memory at exec, and each write stays
    // within the string it overwrites (its own length, found with `strlen`).
    unsafe {
        let mut entry = environ;
        while !entry.is_null() && !(*entry).is_null() {
            let text = *entry;
            let len = libc::strlen(text);
            let bytes = std::slice::from_raw_parts(text.cast::<u8>(), len);
            if bytes.starts_with(prefix.as_bytes()) {
                std::ptr::write_bytes(text.add(prefix.len()), 0, len - prefix.len());
            }
            entry = entry.add(1);
        }
        std::env::remove_var(TOKEN_ENV);
    }
    value
}

/// Checks the rule that a TCP listener needs a token, loopback included: a loopback port is open to
/// every local process, the sandbox's own commands among them.
pub fn check_listen(addr: SocketAddr, token: Option<&Token>) -> Result<(), AuthError> {
    if token.is_none() {
        return Err(AuthError::NoToken(addr));
    }
    Ok(())
}

/// Compares without an early exit, so timing does not reveal how much of a guess was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_token_must_match_exactly() {
        let token = Token(b"s3cret-token".to_vec());
        assert!(token.accepts(Some(b"Bearer s3cret-token")));
        assert!(!token.accepts(Some(b"Bearer s3cret-tokenX")));
        assert!(!token.accepts(Some(b"Bearer s3cret-toke")));
        assert!(!token.accepts(Some(b"s3cret-token")));
        assert!(!token.accepts(None));
    }

    #[test]
    fn tcp_needs_a_token_loopback_too() {
        let token = Token(b"t".to_vec());
        assert!(check_listen("127.0.0.1:1".parse().unwrap(), None).is_err());
        assert!(check_listen("[::1]:1".parse().unwrap(), None).is_err());
        assert!(check_listen("0.0.0.0:1".parse().unwrap(), None).is_err());
        assert!(check_listen("127.0.0.1:1".parse().unwrap(), Some(&token)).is_ok());
        assert!(check_listen("0.0.0.0:1".parse().unwrap(), Some(&token)).is_ok());
    }

    #[test]
    fn token_file_is_trimmed_and_must_not_be_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, "abc\n").unwrap();
        assert!(Token::load(Some(&path), None).unwrap().unwrap().accepts(Some(b"Bearer abc")));
        std::fs::write(&path, "\n").unwrap();
        assert!(matches!(Token::load(Some(&path), None), Err(AuthError::EmptyToken)));
        assert!(Token::load(None, None).unwrap().is_none());
    }
}
