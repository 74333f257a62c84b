//! The byte budget of a verb's reply (`MAX_REPLY_BYTES`): `grep` and `glob` count what each match
//! adds to the JSON text and stop collecting before the reply would pass it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use agentd_protocol::limits::{MAX_REPLY_BYTES, REPLY_ENVELOPE_BYTES};

/// Bytes a verb's list may take in the reply: the rest is the envelope's.
pub const LIST_BUDGET: usize = MAX_REPLY_BYTES - REPLY_ENVELOPE_BYTES;

/// Bytes left of a reply's budget, shared by a verb's threads.
#[derive(Debug)]
pub struct Budget {
    left: AtomicUsize,
    /// Set once a `take` failed: a later, smaller match must not slip in after a larger one was
    /// refused, so the result stays a prefix of what was searched.
    spent: AtomicBool,
}

impl Budget {
    pub fn new(bytes: usize) -> Self {
        Self { left: AtomicUsize::new(bytes), spent: AtomicBool::new(false) }
    }

    /// Takes `cost` bytes; `false` (nothing taken, and every later call refused) when fewer are left.
    pub fn take(&self, cost: usize) -> bool {
        if self.spent.load(Ordering::Relaxed) {
            return false;
        }
        let taken =
            self.left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(cost));
        if taken.is_err() {
            self.spent.store(true, Ordering::Relaxed);
        }
        taken.is_ok()
    }

    /// Spends the budget: something that cannot be shown was found, so the result is truncated.
    pub fn refuse(&self) {
        self.spent.store(true, Ordering::Relaxed);
    }

    /// Bytes still available (0 once spent).
    pub fn left(&self) -> usize {
        if self.spent() { 0 } else { self.left.load(Ordering::Relaxed) }
    }

    /// Whether a `take` was refused: the result is truncated.
    pub fn spent(&self) -> bool {
        self.spent.load(Ordering::Relaxed)
    }
}

/// Decimal digits of `n`.
pub fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_decimal_digits() {
        for n in [0u64, 9, 10, 99, 100, 12345, u64::MAX] {
            assert_eq!(digits(n), n.to_string().len());
        }
    }

    #[test]
    fn a_refused_take_spends_the_budget() {
        let budget = Budget::new(10);
        assert!(budget.take(4));
        assert!(budget.take(6));
        assert_eq!(budget.left(), 0);
        assert!(!budget.spent());
        assert!(budget.take(0));
        assert!(!budget.take(1));
        assert!(budget.spent());
        let budget = Budget::new(10);
        assert!(!budget.take(11));
        assert!(!budget.take(1), "a smaller match after a refused one is refused too");
        assert_eq!(budget.left(), 0);
    }
}
