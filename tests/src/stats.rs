//! Small helpers the benchmarks share: medians, percentiles, milliseconds.

use std::time::Duration;

/// The middle of `times` (sorted in place).
pub fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// The value below which the fraction `p` of `sorted` lies (nearest rank; 0.5 is the median).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Milliseconds, for printing.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
