//! Unguessable names: tokens, temporary file names, heredoc-free identifiers.

/// 32 random bytes in hex: tokens and unguessable names.
pub fn random_hex() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
