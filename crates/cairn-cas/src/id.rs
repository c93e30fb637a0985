//! Content ids: 32-byte hashes (BLAKE3 by default, SHA-256 selectable per store), printed as hex.

use std::fmt;
use std::str::FromStr;

/// The hash function of a store. Fixed when the store is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HashAlgo {
    /// BLAKE3 (the default; fast).
    #[default]
    Blake3,
    /// SHA-256 (for interoperability).
    Sha256,
}

impl HashAlgo {
    pub(crate) fn code(self) -> u8 {
        match self {
            HashAlgo::Blake3 => 1,
            HashAlgo::Sha256 => 2,
        }
    }

    pub(crate) fn from_code(c: u8) -> Option<HashAlgo> {
        match c {
            1 => Some(HashAlgo::Blake3),
            2 => Some(HashAlgo::Sha256),
            _ => None,
        }
    }

    /// Hashes `data` in one go.
    pub fn hash(self, data: &[u8]) -> Id {
        let mut h = self.hasher();
        h.update(data);
        h.finish()
    }

    /// An incremental hasher.
    pub fn hasher(self) -> Hasher {
        match self {
            HashAlgo::Blake3 => Hasher::Blake3(Box::new(blake3::Hasher::new())),
            HashAlgo::Sha256 => Hasher::Sha256(<sha2::Sha256 as sha2::Digest>::new()),
        }
    }
}

impl FromStr for HashAlgo {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "blake3" => Ok(HashAlgo::Blake3),
            "sha256" | "sha-256" => Ok(HashAlgo::Sha256),
            _ => Err(format!("unknown hash {s:?} (blake3 or sha256)")),
        }
    }
}

/// An incremental hasher for either algorithm.
pub enum Hasher {
    /// BLAKE3.
    Blake3(Box<blake3::Hasher>),
    /// SHA-256.
    Sha256(sha2::Sha256),
}

impl Hasher {
    /// Adds bytes.
    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Blake3(h) => {
                h.update(data);
            }
            Hasher::Sha256(h) => sha2::Digest::update(h, data),
        }
    }

    /// The hash of everything added.
    pub fn finish(self) -> Id {
        match self {
            Hasher::Blake3(h) => Id(*h.finalize().as_bytes()),
            Hasher::Sha256(h) => Id(sha2::Digest::finalize(h).into()),
        }
    }
}

/// A 32-byte content id (of a chunk or of a whole blob).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id(pub [u8; 32]);

impl Id {
    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Builds an id from a 32-byte slice.
    pub fn from_slice(b: &[u8]) -> Option<Id> {
        Some(Id(b.try_into().ok()?))
    }

    /// Lower-case hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The first 12 hex digits (for display).
    pub fn short(&self) -> String {
        hex::encode(&self.0[..6])
    }
}

impl FromStr for Id {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let v = hex::decode(s).map_err(|e| format!("not a hex id: {e}"))?;
        Id::from_slice(&v).ok_or_else(|| format!("an id has 64 hex digits, got {}", s.len()))
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.short())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors_and_hex() {
        assert_eq!(
            HashAlgo::Sha256.hash(b"abc").to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(HashAlgo::Blake3.hash(b"").to_hex(), blake3::hash(b"").to_hex().to_string());
        let id = HashAlgo::Blake3.hash(b"x");
        assert_eq!(id.to_hex().parse::<Id>().unwrap(), id);
        assert!("zz".parse::<Id>().is_err());
        let mut h = HashAlgo::Sha256.hasher();
        h.update(b"a");
        h.update(b"bc");
        assert_eq!(h.finish(), HashAlgo::Sha256.hash(b"abc"));
    }
}
