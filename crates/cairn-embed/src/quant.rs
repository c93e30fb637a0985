//! [`QuantizedVector`]: a vector as int8 with one scale per vector, and its byte encoding for
//! storage (format: docs/format/vector.md).
//!
//! Quantization maps the largest magnitude to ±127, so each component keeps about 8 bits of
//! relative precision; for unit-length embeddings the dot products it gives rank documents as
//! the f32 vectors do (docs/design/2026-12-07-embedding-model.md).

use crate::error::{Error, Result};

/// First byte of an encoded vector.
pub const VECTOR_MAGIC: u8 = 0xCE;
/// The encoding's version, second byte.
pub const VECTOR_VERSION: u8 = 1;
/// Bytes of an encoding besides the components: magic, version, dimension (u16), scale (f32),
/// crc32c (u32).
pub const VECTOR_OVERHEAD: usize = 12;
/// The largest dimension an encoding can hold.
pub const MAX_DIMENSION: usize = u16::MAX as usize;

/// A vector stored as `scale * data[i]`.
#[derive(Clone, Debug, PartialEq)]
pub struct QuantizedVector {
    scale: f32,
    data: Vec<i8>,
}

impl QuantizedVector {
    /// Quantizes `v`: `scale = max |v_i| / 127`, `data_i = round(v_i / scale)`. An all-zero vector
    /// gets scale 0. Refuses an empty vector, one longer than [`MAX_DIMENSION`], and non-finite
    /// components.
    pub fn quantize(v: &[f32]) -> Result<Self> {
        if v.is_empty() || v.len() > MAX_DIMENSION {
            return Err(Error::InvalidArgument(format!("cannot quantize a vector of dimension {}", v.len())));
        }
        if v.iter().any(|x| !x.is_finite()) {
            return Err(Error::InvalidArgument("cannot quantize a vector with a non-finite component".into()));
        }
        let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        if max == 0.0 {
            return Ok(QuantizedVector { scale: 0.0, data: vec![0; v.len()] });
        }
        let scale = max / 127.0;
        let data = v.iter().map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8).collect();
        Ok(QuantizedVector { scale, data })
    }

    /// Builds a vector from its parts. `scale` must be finite and not negative.
    pub fn from_parts(scale: f32, data: Vec<i8>) -> Result<Self> {
        if !scale.is_finite() || scale < 0.0 || data.is_empty() || data.len() > MAX_DIMENSION {
            return Err(Error::InvalidArgument(format!("scale {scale} with {} components", data.len())));
        }
        Ok(QuantizedVector { scale, data })
    }

    /// The number of components.
    pub fn dimension(&self) -> usize {
        self.data.len()
    }

    /// The per-vector scale.
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// The int8 components.
    pub fn data(&self) -> &[i8] {
        &self.data
    }

    /// The f32 vector this one approximates.
    pub fn dequantize(&self) -> Vec<f32> {
        self.data.iter().map(|&x| f32::from(x) * self.scale).collect()
    }

    /// The dot product with another quantized vector of the same dimension.
    pub fn dot(&self, other: &QuantizedVector) -> Result<f32> {
        if self.dimension() != other.dimension() {
            return Err(Error::Dimension { expected: self.dimension(), got: other.dimension() });
        }
        Ok(crate::kernels::dot_i8(&self.data, &other.data) as f32 * self.scale * other.scale)
    }

    /// The encoded length of a vector of `dimension` components.
    pub fn encoded_len(dimension: usize) -> usize {
        VECTOR_OVERHEAD + dimension
    }

    /// Encodes the vector: magic, version, dimension (u16 LE), scale (f32 LE), the components,
    /// then the crc32c of everything before it (u32 LE).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::encoded_len(self.dimension()));
        out.push(VECTOR_MAGIC);
        out.push(VECTOR_VERSION);
        // quantize and from_parts keep the dimension within u16.
        out.extend_from_slice(&(self.data.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.scale.to_le_bytes());
        out.extend(self.data.iter().map(|&x| x as u8));
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes [`QuantizedVector::encode`]'s output, refusing truncated, oversized or corrupt
    /// input.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let corrupt = |offset, message| Error::CorruptVector { offset, message };
        if bytes.len() < VECTOR_OVERHEAD {
            return Err(corrupt(bytes.len(), "truncated header"));
        }
        if bytes[0] != VECTOR_MAGIC {
            return Err(corrupt(0, "bad magic byte"));
        }
        if bytes[1] != VECTOR_VERSION {
            return Err(corrupt(1, "unknown version"));
        }
        let dim = usize::from(u16::from_le_bytes([bytes[2], bytes[3]]));
        if dim == 0 {
            return Err(corrupt(2, "zero dimension"));
        }
        let expected = Self::encoded_len(dim);
        if bytes.len() < expected {
            return Err(corrupt(bytes.len(), "truncated components"));
        }
        if bytes.len() > expected {
            return Err(corrupt(expected, "trailing bytes"));
        }
        let body = expected - 4;
        let stored = u32::from_le_bytes([bytes[body], bytes[body + 1], bytes[body + 2], bytes[body + 3]]);
        if crc32c::crc32c(&bytes[..body]) != stored {
            return Err(corrupt(body, "checksum mismatch"));
        }
        let scale = f32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        if !scale.is_finite() || scale < 0.0 {
            return Err(corrupt(4, "scale is negative or not finite"));
        }
        let data = bytes[8..body].iter().map(|&b| b as i8).collect();
        Ok(QuantizedVector { scale, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn vector() -> impl Strategy<Value = Vec<f32>> {
        proptest::collection::vec(-10.0f32..10.0, 1..600)
    }

    #[test]
    fn refuses_bad_vectors() {
        assert!(QuantizedVector::quantize(&[]).is_err());
        assert!(QuantizedVector::quantize(&[1.0, f32::NAN]).is_err());
        assert!(QuantizedVector::from_parts(-1.0, vec![1]).is_err());
        let z = QuantizedVector::quantize(&[0.0; 4]).unwrap();
        assert_eq!(z.scale(), 0.0);
        assert_eq!(z.dequantize(), vec![0.0; 4]);
    }

    #[test]
    fn decoder_names_each_fault() {
        let enc = QuantizedVector::quantize(&[0.5, -0.25, 1.0]).unwrap().encode();
        let err = |b: &[u8]| match QuantizedVector::decode(b) {
            Err(Error::CorruptVector { message, .. }) => message,
            other => panic!("expected corruption, got {other:?}"),
        };
        assert_eq!(err(&enc[..5]), "truncated header");
        assert_eq!(err(&enc[..enc.len() - 1]), "truncated components");
        let mut long = enc.clone();
        long.push(0);
        assert_eq!(err(&long), "trailing bytes");
        let mut bad = enc.clone();
        bad[0] ^= 1;
        assert_eq!(err(&bad), "bad magic byte");
        let mut bad = enc.clone();
        bad[1] = 9;
        assert_eq!(err(&bad), "unknown version");
        let mut bad = enc.clone();
        bad[9] ^= 0x10;
        assert_eq!(err(&bad), "checksum mismatch");
        let mut bad = enc.clone();
        bad[2] = 0;
        bad[3] = 0;
        assert_eq!(err(&bad), "zero dimension");
    }

    proptest! {
        #[test]
        fn round_trip_error_is_within_half_a_step(v in vector()) {
            let q = QuantizedVector::quantize(&v).unwrap();
            let back = q.dequantize();
            for (a, b) in v.iter().zip(&back) {
                prop_assert!((a - b).abs() <= q.scale() * 0.5 + 1e-6);
            }
        }

        #[test]
        fn encoding_round_trips(v in vector()) {
            let q = QuantizedVector::quantize(&v).unwrap();
            let enc = q.encode();
            prop_assert_eq!(enc.len(), QuantizedVector::encoded_len(v.len()));
            prop_assert_eq!(QuantizedVector::decode(&enc).unwrap(), q);
        }

        #[test]
        fn decoder_refuses_any_single_byte_change(v in vector(), at in any::<prop::sample::Index>(), flip in 1u8..=255) {
            let mut enc = QuantizedVector::quantize(&v).unwrap().encode();
            let i = at.index(enc.len());
            enc[i] ^= flip;
            prop_assert!(QuantizedVector::decode(&enc).is_err());
        }

        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = QuantizedVector::decode(&bytes);
        }

        #[test]
        fn dot_matches_f32(a in proptest::collection::vec(-1.0f32..1.0, 64), b in proptest::collection::vec(-1.0f32..1.0, 64)) {
            let qa = QuantizedVector::quantize(&a).unwrap();
            let qb = QuantizedVector::quantize(&b).unwrap();
            let exact: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            let bound = 64.0 * ((qa.scale() + qb.scale()) * 0.5 + qa.scale() * qb.scale() * 0.25) + 1e-4;
            prop_assert!((qa.dot(&qb).unwrap() - exact).abs() <= bound);
        }
    }
}
