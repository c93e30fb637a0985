//! Combining ranked lists: reciprocal rank fusion, a min-max normalized convex combination, and
//! the aggregation of passage scores into document scores. Which to use by default, and with
//! which parameters, is measured on SciFact's train split (docs/design/).
//!
//! Every function returns documents best first, ties broken by the smaller key, so results are
//! deterministic.

use std::collections::HashMap;
use std::hash::Hash;

fn sorted<K: Ord>(map: HashMap<K, f64>) -> Vec<(K, f64)> {
    let mut v: Vec<(K, f64)> = map.into_iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// Reciprocal rank fusion (Cormack et al. 2009): each document scores `Σ 1 / (k + rank)` over
/// the lists it appears in, ranks counted from 1. `k = 60` is the usual choice. A document
/// listed twice in one list counts at its best rank.
pub fn reciprocal_rank_fusion<K: Clone + Eq + Hash + Ord>(lists: &[&[K]], k: f64) -> Vec<(K, f64)> {
    let mut scores: HashMap<K, f64> = HashMap::new();
    for list in lists {
        let mut seen = std::collections::HashSet::new();
        for (i, key) in list.iter().enumerate() {
            if seen.insert(key) {
                *scores.entry(key.clone()).or_default() += 1.0 / (k + (i + 1) as f64);
            }
        }
    }
    sorted(scores)
}

/// Scales a list's scores to [0, 1] by its minimum and maximum (all 1 when they are equal).
pub fn min_max_normalize<K: Clone>(list: &[(K, f64)]) -> Vec<(K, f64)> {
    let (lo, hi) = list.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), (_, s)| (lo.min(*s), hi.max(*s)));
    list.iter()
        .map(|(k, s)| {
            let n = if hi > lo { (s - lo) / (hi - lo) } else { 1.0 };
            (k.clone(), n)
        })
        .collect()
}

/// The convex combination `weight * a' + (1 - weight) * b'` of two lists' min-max normalized
/// scores (`a'`, `b'`); a document missing from a list gets 0 from it. `weight` is clamped to
/// [0, 1]. A document repeated in a list counts at its best score.
pub fn convex_combination<K: Clone + Eq + Hash + Ord>(a: &[(K, f64)], b: &[(K, f64)], weight: f64) -> Vec<(K, f64)> {
    let w = if weight.is_nan() { 0.5 } else { weight.clamp(0.0, 1.0) };
    let mut combined: HashMap<K, f64> = HashMap::new();
    for (list, factor) in [(a, w), (b, 1.0 - w)] {
        let mut best: HashMap<K, f64> = HashMap::new();
        for (k, s) in min_max_normalize(list) {
            let e = best.entry(k).or_insert(f64::NEG_INFINITY);
            *e = e.max(s);
        }
        for (k, s) in best {
            *combined.entry(k).or_default() += factor * s;
        }
    }
    sorted(combined)
}

/// A document's score is its best passage's: `passages` are `(document, score)` pairs, in any
/// order.
pub fn max_per_document<D: Clone + Eq + Hash + Ord>(passages: impl IntoIterator<Item = (D, f64)>) -> Vec<(D, f64)> {
    let mut best: HashMap<D, f64> = HashMap::new();
    for (d, s) in passages {
        let e = best.entry(d).or_insert(f64::NEG_INFINITY);
        *e = e.max(s);
    }
    sorted(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rrf_sums_reciprocal_ranks() {
        let a = ["x", "y", "z"];
        let b = ["y", "w"];
        let got = reciprocal_rank_fusion(&[&a, &b], 60.0);
        let score = |k: &str| got.iter().find(|(d, _)| *d == k).unwrap().1;
        assert!((score("y") - (1.0 / 62.0 + 1.0 / 61.0)).abs() < 1e-12);
        assert!((score("x") - 1.0 / 61.0).abs() < 1e-12);
        assert_eq!(got[0].0, "y");
        assert_eq!(got.len(), 4);
        // Equal scores: the smaller key first.
        let got = reciprocal_rank_fusion(&[&["b"][..], &["a"][..]], 60.0);
        assert_eq!(got[0].0, "a");
    }

    #[test]
    fn convex_combination_normalizes_each_list() {
        let bm25 = [("a", 10.0), ("b", 5.0), ("c", 0.0)];
        let dense = [("c", 0.9), ("b", 0.8), ("d", 0.7)];
        let got = convex_combination(&bm25, &dense, 0.5);
        let score = |k: &str| got.iter().find(|(d, _)| *d == k).unwrap().1;
        assert!((score("a") - 0.5).abs() < 1e-12);
        assert!((score("b") - (0.25 + 0.25)).abs() < 1e-9);
        assert!((score("c") - 0.5).abs() < 1e-12);
        assert!((score("d") - 0.0).abs() < 1e-12);
        // weight 1 keeps the first list's order.
        let only_a: Vec<&str> = convex_combination(&bm25, &dense, 1.0).into_iter().take(3).map(|x| x.0).collect();
        assert_eq!(only_a, vec!["a", "b", "c"]);
        assert_eq!(min_max_normalize(&[("q", 3.0)]), vec![("q", 1.0)]);
    }

    #[test]
    fn max_per_document_keeps_the_best_passage() {
        let got = max_per_document([(1u32, 0.2), (2, 0.5), (1, 0.7), (2, 0.1)]);
        assert_eq!(got, vec![(1, 0.7), (2, 0.5)]);
    }
}
