//! Small helpers the benchmarks share: medians, percentiles, milliseconds.

use std::time::Duration;

/// The middle of `times` (sorted in place).
pub fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// The value below which the fraction `p` of `sorted` lies (nearest rank; 0.5 is the median).
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a rank between 0 and len - 1 (p is a fraction): the float to integer cast is exact"
)]
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Milliseconds, for printing.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
