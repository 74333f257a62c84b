//! What a command's own process asked of its confinement and what it measured of it before its exec
//! ([`Measured`]), in the few bytes the child writes into memory it shares with agentd until then.
//! Shared by the child's steps ([`super::child`]) and the report they correct ([`super::report`]).

/// What the child asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Expect {
    pub(super) landlock: bool,
    pub(super) seccomp: bool,
    pub(super) privileges: bool,
}

/// What the child got, measured after landlock and seccomp were applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Measured {
    pub(super) landlock: Applied,
    pub(super) no_new_privs: bool,
    pub(super) seccomp: bool,
    /// The identity was applied and holds: the ids asked for, no capability left.
    pub(super) privileges: bool,
}

/// What `landlock_restrict_self` gave. Nothing partial: the ruleset asks exactly what this kernel
/// offers ([`build_ruleset`](super::ruleset::build_ruleset)), so a ruleset in force is in force in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Applied {
    NotAsked = 1,
    Failed,
    NotEnforced,
    Full,
}

pub(super) const STATUS_LEN: usize = 5;

impl Measured {
    pub(super) fn encode(self) -> [u8; STATUS_LEN] {
        [
            b'S',
            self.landlock as u8,
            u8::from(self.no_new_privs),
            u8::from(self.seccomp),
            u8::from(self.privileges),
        ]
    }

    pub(super) fn decode(bytes: [u8; STATUS_LEN]) -> Option<Self> {
        let landlock = match bytes[1] {
            1 => Applied::NotAsked,
            2 => Applied::Failed,
            3 => Applied::NotEnforced,
            4 => Applied::Full,
            _ => return None,
        };
        (bytes[0] == b'S' && bytes[2..].iter().all(|b| *b <= 1)).then_some(Self {
            landlock,
            no_new_privs: bytes[2] == 1,
            seccomp: bytes[3] == 1,
            privileges: bytes[4] == 1,
        })
    }

    /// Less than asked: what a strict profile refuses.
    pub(super) fn short_of(self, expect: Expect) -> bool {
        (expect.landlock && self.landlock != Applied::Full)
            || (expect.seccomp && !self.seccomp)
            || (expect.privileges && !self.privileges)
            || !self.no_new_privs
    }
}
