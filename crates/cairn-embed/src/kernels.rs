//! The inner loops of vector search: int8 dot products and Hamming distances over a contiguous
//! matrix. Written as plain loops that the compiler vectorizes; [`pulp::Arch::dispatch`] compiles
//! them a second time for AVX2 (with `popcnt`) and picks that copy at run time where the
//! processor has it, so no `unsafe` is needed here.

/// The dot product of two int8 vectors of equal length.
#[inline(always)]
pub(crate) fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    const LANES: usize = 32;
    let mut acc = [0i32; LANES];
    let mut ca = a.chunks_exact(LANES);
    let mut cb = b.chunks_exact(LANES);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for j in 0..LANES {
            acc[j] += i32::from(x[j]) * i32::from(y[j]);
        }
    }
    let tail: i32 = ca.remainder().iter().zip(cb.remainder()).map(|(&x, &y)| i32::from(x) * i32::from(y)).sum();
    acc.iter().sum::<i32>() + tail
}

/// `out[r] = dot(query, rows[r])` for each row of a row-major matrix of `query.len()` columns.
pub(crate) fn dot_rows(query: &[i8], rows: &[i8], out: &mut [i32]) {
    let dim = query.len();
    pulp::Arch::new().dispatch(
        #[inline(always)]
        || {
            for (o, row) in out.iter_mut().zip(rows.chunks_exact(dim)) {
                *o = dot_i8(query, row);
            }
        },
    );
}

/// `out[r] = popcount(query ^ codes[r])` for each code of `query.len()` words.
pub(crate) fn hamming_rows(query: &[u64], codes: &[u64], out: &mut [u32]) {
    let words = query.len();
    pulp::Arch::new().dispatch(
        #[inline(always)]
        || {
            for (o, code) in out.iter_mut().zip(codes.chunks_exact(words)) {
                *o = query.iter().zip(code).map(|(a, b)| (a ^ b).count_ones()).sum();
            }
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_and_hamming_match_plain_loops() {
        let dim = 77;
        let q: Vec<i8> = (0..dim).map(|i| (i as i32 * 37 % 255 - 127) as i8).collect();
        let rows: Vec<i8> = (0..dim * 5).map(|i| (i as i32 * 91 % 253 - 126) as i8).collect();
        let mut out = vec![0; 5];
        dot_rows(&q, &rows, &mut out);
        for (r, o) in out.iter().enumerate() {
            let want: i32 = (0..dim).map(|i| i32::from(q[i]) * i32::from(rows[r * dim + i])).sum();
            assert_eq!(*o, want);
        }
        let qc = [0xF0F0u64, u64::MAX];
        let codes = [0u64, 0, 0xF0F0, u64::MAX, u64::MAX, 0];
        let mut h = vec![0; 3];
        hamming_rows(&qc, &codes, &mut h);
        assert_eq!(h, vec![8 + 64, 0, 64 - 8 + 64]);
    }
}
