//! How long the host waits on a sandbox. The sandbox runs code nobody trusts, and that code can put a
//! server of its own where agentd was: every wait on it ends, with [`SandboxError::Timeout`] naming
//! what was waited for.
//!
//! | wait | deadline | default | variable |
//! |---|---|---|---|
//! | TCP connect, websocket upgrade and `hello` | [`Deadlines::connect`] | 30 s | `AGENTD_CONNECT_DEADLINE` |
//! | an `exec`'s result | its own timeout + [`Deadlines::exec_margin`] | 1800 s + 15 s | `AGENTD_EXEC_MARGIN` |
//! | a file verb's reply; each step of a transfer | [`Deadlines::silence`] | 120 s | `AGENTD_SILENCE_DEADLINE` |
//!
//! Variables hold seconds (fractions allowed) and are read when a link connects, unless the program
//! chose its deadlines for the whole process ([`Deadlines::choose_for_process`]: `agentctl`'s flags).
//! An `exec` with timeout `0` ("no limit") has no deadline of its own.
//!
//! ```
//! use std::time::Duration;
//! use agentd_host::Deadlines;
//!
//! let tight = Deadlines { connect: Duration::from_secs(5), ..Deadlines::default() };
//! assert_eq!(tight.exec(Some(Duration::from_secs(10))), Some(Duration::from_secs(25)));
//! assert_eq!(tight.exec(Some(Duration::ZERO)), None);
//! ```

use std::sync::OnceLock;
use std::time::Duration;

use crate::contract::error::{Result, SandboxError};

/// agentd's default for commands that name no timeout; exec channels of providers use the same.
pub const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(1800);

/// The deadlines of one link (module docs: what each bounds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// Connecting: TCP (or Unix socket), the websocket upgrade and the `hello` reply together.
    pub connect: Duration,
    /// Added to an `exec`'s own timeout: agentd reports a timed-out command itself, so only a
    /// silent or lying server reaches this.
    pub exec_margin: Duration,
    /// A file verb's reply, and each step of an upload or a download (a chunk sent or received,
    /// the final reply): no progress for this long is an error.
    pub silence: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(30),
            exec_margin: Duration::from_secs(15),
            silence: Duration::from_secs(120),
        }
    }
}

/// Picks one field of [`Deadlines`].
type Field = fn(&mut Deadlines) -> &mut Duration;

/// The variables that override [`Deadlines::default`], each with the field it sets.
const VARIABLES: [(&str, Field); 3] = [
    ("AGENTD_CONNECT_DEADLINE", |d| &mut d.connect),
    ("AGENTD_EXEC_MARGIN", |d| &mut d.exec_margin),
    ("AGENTD_SILENCE_DEADLINE", |d| &mut d.silence),
];

/// The deadlines a program chose for all its links.
static CHOSEN: OnceLock<Deadlines> = OnceLock::new();

impl Deadlines {
    /// The deadlines a link uses unless given its own: those chosen for the process, else the
    /// defaults with each variable of the module docs that is set in place of its default.
    pub fn from_env() -> Result<Self> {
        match CHOSEN.get() {
            Some(chosen) => Ok(*chosen),
            None => Self::from_vars(|name| std::env::var(name).ok()),
        }
    }

    /// Makes `self` what [`Deadlines::from_env`] returns from now on, in this whole process (links
    /// that providers open inside, too). Once: `false` if deadlines were already chosen.
    pub fn choose_for_process(self) -> bool {
        CHOSEN.set(self).is_ok()
    }

    /// [`Deadlines::from_env`] over any source of variables (pure, for tests).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut deadlines = Self::default();
        for (name, field) in VARIABLES {
            if let Some(value) = var(name) {
                *field(&mut deadlines) = seconds(&value).map_err(|why| SandboxError::InvalidSpec {
                    spec: format!("{name}={value}"),
                    why: why.to_owned(),
                })?;
            }
        }
        Ok(deadlines)
    }

    /// The deadline of an `exec` with `timeout` (`None`: agentd's default); `None` for `0`, "no limit".
    pub fn exec(&self, timeout: Option<Duration>) -> Option<Duration> {
        match timeout {
            Some(t) if t.is_zero() => None,
            Some(t) => Some(t.saturating_add(self.exec_margin)),
            None => Some(DEFAULT_EXEC_TIMEOUT.saturating_add(self.exec_margin)),
        }
    }
}

/// A positive number of seconds, fractions allowed.
pub fn seconds(text: &str) -> std::result::Result<Duration, &'static str> {
    positive_seconds(text.trim().parse().map_err(|_| "not a number of seconds")?)
}

/// `value` seconds as a deadline: more than 0, finite.
pub fn positive_seconds(value: f64) -> std::result::Result<Duration, &'static str> {
    // NaN is not more than 0 either.
    if value.is_nan() || value <= 0.0 {
        return Err("must be more than 0 seconds");
    }
    Duration::try_from_secs_f64(value).map_err(|_| "too many seconds")
}

/// `call`, or a [`SandboxError::Timeout`] about `what` after `deadline` (`None`: no deadline).
pub async fn within<T>(
    what: &str,
    deadline: Option<Duration>,
    call: impl Future<Output = Result<T>>,
) -> Result<T> {
    match deadline {
        None => call.await,
        Some(after) => tokio::time::timeout(after, call)
            .await
            .map_err(|_| SandboxError::Timeout { what: what.to_owned(), after })?,
    }
}

/// `timeout` in whole seconds for a wire that takes them: rounded up, and at least 1, so a short
/// timeout never becomes 0 ("none").
pub fn whole_secs(timeout: Duration) -> u64 {
    timeout.as_secs().saturating_add(u64::from(timeout.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_replace_their_defaults() {
        let d = Deadlines::from_vars(|name| (name == "AGENTD_SILENCE_DEADLINE").then(|| "2.5".to_owned()))
            .unwrap();
        assert_eq!(d, Deadlines { silence: Duration::from_millis(2500), ..Deadlines::default() });
        let all = Deadlines::from_vars(|_| Some("1".to_owned())).unwrap();
        assert_eq!(
            all,
            Deadlines {
                connect: Duration::from_secs(1),
                exec_margin: Duration::from_secs(1),
                silence: Duration::from_secs(1)
            }
        );
    }

    #[test]
    fn bad_values_are_refused_with_their_name() {
        for bad in ["", "soon", "0", "-1", "NaN", "1e300"] {
            let err =
                Deadlines::from_vars(|name| (name == "AGENTD_CONNECT_DEADLINE").then(|| bad.to_owned()))
                    .unwrap_err()
                    .to_string();
            assert!(err.contains(&format!("AGENTD_CONNECT_DEADLINE={bad}")), "{err}");
        }
    }

    #[test]
    fn an_exec_waits_its_own_timeout_and_the_margin() {
        let d = Deadlines::default();
        assert_eq!(d.exec(Some(Duration::from_secs(5))), Some(Duration::from_secs(20)));
        assert_eq!(d.exec(None), Some(Duration::from_secs(1815)));
        assert_eq!(d.exec(Some(Duration::ZERO)), None);
        assert_eq!(d.exec(Some(Duration::MAX)), Some(Duration::MAX));
    }

    #[tokio::test]
    async fn within_names_what_it_waited_for() {
        let err = within(
            "hello from agentd",
            Some(Duration::from_millis(10)),
            std::future::pending::<Result<()>>(),
        )
        .await
        .unwrap_err();
        assert_eq!(err.to_string(), "hello from agentd: no answer within 10ms");
    }
}
