//! Process ids: [`Pid`] everywhere inside agentd; the protocol's `u32` only at its edge, converted
//! here alone, checked (a pid is never cast between `u32` and `i32`).

use nix::unistd::Pid;

/// `pid` as the protocol carries it. agentd reports only processes it started, whose pids are
/// positive; anything else would be reported as 0 (no process), never wrapped.
pub fn to_wire(pid: Pid) -> u32 {
    u32::try_from(pid.as_raw()).unwrap_or(0)
}

/// A pid carried as `u32` (the protocol, `std::process`); `None` when no process can have it: 0
/// (to `kill`, the caller's own group) and values past `i32`.
pub fn from_wire(pid: u32) -> Option<Pid> {
    i32::try_from(pid).ok().filter(|&pid| pid > 0).map(Pid::from_raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_convert_without_wrapping() {
        assert_eq!(to_wire(Pid::from_raw(4242)), 4242);
        assert_eq!(to_wire(Pid::from_raw(-1)), 0);
        assert_eq!(from_wire(4242), Some(Pid::from_raw(4242)));
        assert_eq!(from_wire(u32::MAX), None);
        assert_eq!(from_wire(0), None);
    }
}
