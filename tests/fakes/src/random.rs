//! Random text for the fakes' ids and tokens (and the tests' unique names).

/// `n` random bytes as lowercase hex.
pub fn random_hex(n: usize) -> String {
    (0..n).map(|_| format!("{:02x}", rand::random::<u8>())).collect()
}
