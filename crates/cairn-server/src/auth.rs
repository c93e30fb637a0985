//! Token checks.

/// Whether `given` equals `expected`, in time that depends only on their lengths (no early
/// exit on the first differing byte).
pub fn token_matches(given: &[u8], expected: &[u8]) -> bool {
    if given.len() != expected.len() || expected.is_empty() {
        return false;
    }
    let diff = given.iter().zip(expected).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::token_matches;

    #[test]
    fn compares_whole_tokens() {
        assert!(token_matches(b"secret", b"secret"));
        assert!(!token_matches(b"secreT", b"secret"));
        assert!(!token_matches(b"secret1", b"secret"));
        assert!(!token_matches(b"", b""));
    }
}
