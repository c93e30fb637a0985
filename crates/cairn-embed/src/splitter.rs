//! [`Splitter`]: cuts a long text into passages of at most `window` tokens, each starting
//! `window - overlap` tokens after the previous one, as byte ranges into the text, so a snippet
//! can be cut from the best passage. Sizes: docs/design/2026-12-07-embedding-model.md.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::tokenizer::TextTokenizer;

/// Token windows with overlap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Splitter {
    window: usize,
    overlap: usize,
}

impl Splitter {
    /// A splitter of `window` tokens per passage (special tokens not counted) overlapping by
    /// `overlap` tokens; `overlap` must be below `window`.
    pub fn new(window: usize, overlap: usize) -> Result<Self> {
        if window == 0 || overlap >= window {
            return Err(Error::InvalidArgument(format!("a window of {window} tokens cannot overlap by {overlap}")));
        }
        Ok(Splitter { window, overlap })
    }

    /// Tokens per passage.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Tokens shared by consecutive passages.
    pub fn overlap(&self) -> usize {
        self.overlap
    }

    /// The passages of `text`, in order. A text of at most `window` tokens is one passage that
    /// covers it whole; a text without tokens (empty or only spaces) has none. Passages cover
    /// every token; the last one ends at the text's last token, and a short tail is folded
    /// into a final window that ends there rather than left as a tiny passage.
    pub fn split(&self, tokenizer: &TextTokenizer, text: &str) -> Result<Vec<Range<usize>>> {
        let offsets = tokenizer.token_offsets(text)?;
        Ok(self.split_offsets(text, &offsets))
    }

    /// [`Splitter::split`] on token byte ranges already computed.
    pub fn split_offsets(&self, text: &str, offsets: &[(usize, usize)]) -> Vec<Range<usize>> {
        let n = offsets.len();
        if n == 0 {
            return Vec::new();
        }
        if n <= self.window {
            return std::iter::once(0..text.len()).collect();
        }
        let step = self.window - self.overlap;
        let mut out = Vec::new();
        let mut start = 0;
        loop {
            let end = (start + self.window).min(n);
            // Fold a tail shorter than the step into a last full window.
            let begin = if end == n { n.saturating_sub(self.window) } else { start };
            out.push(byte_range(text, offsets[begin].0, offsets[end - 1].1));
            if end == n {
                break;
            }
            start += step;
        }
        out
    }
}

/// A byte range on character boundaries, widened if a tokenizer's offset falls inside a character.
fn byte_range(text: &str, mut start: usize, mut end: usize) -> Range<usize> {
    start = start.min(text.len());
    end = end.clamp(start, text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    while !text.is_char_boundary(end) {
        end += 1;
    }
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word_offsets(text: &str) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        let mut start = None;
        for (i, c) in text.char_indices() {
            match (c.is_whitespace(), start) {
                (false, None) => start = Some(i),
                (true, Some(s)) => {
                    v.push((s, i));
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(s) = start {
            v.push((s, text.len()));
        }
        v
    }

    #[test]
    fn rejects_overlap_not_below_window() {
        assert!(Splitter::new(4, 4).is_err());
        assert!(Splitter::new(0, 0).is_err());
        assert!(Splitter::new(4, 3).is_ok());
    }

    #[test]
    fn short_text_is_one_passage_and_empty_text_none() {
        let s = Splitter::new(4, 1).unwrap();
        let t = " a b c ";
        let whole = s.split_offsets(t, &word_offsets(t));
        assert_eq!(whole.len(), 1);
        assert_eq!(whole[0], 0..t.len());
        assert!(s.split_offsets("   ", &word_offsets("   ")).is_empty());
    }

    #[test]
    fn windows_overlap_and_cover_every_token() {
        let s = Splitter::new(4, 1).unwrap();
        let t = "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9";
        let got: Vec<&str> = s.split_offsets(t, &word_offsets(t)).into_iter().map(|r| &t[r]).collect();
        assert_eq!(got, vec!["w0 w1 w2 w3", "w3 w4 w5 w6", "w6 w7 w8 w9"]);
        // A tail shorter than a step is folded into a last full window.
        let t = "w0 w1 w2 w3 w4 w5 w6 w7 w8";
        let got: Vec<&str> = s.split_offsets(t, &word_offsets(t)).into_iter().map(|r| &t[r]).collect();
        assert_eq!(got, vec!["w0 w1 w2 w3", "w3 w4 w5 w6", "w5 w6 w7 w8"]);
    }

    #[test]
    fn ranges_stay_on_char_boundaries() {
        let t = "héllo wörld";
        // Offsets that cut through 'é' (bytes 1..3) and 'ö' (bytes 8..10).
        let r = byte_range(t, 2, 9);
        assert_eq!(&t[r], "éllo wö");
    }

    proptest::proptest! {
        #[test]
        fn every_token_is_in_some_passage(words in proptest::collection::vec("[a-zé]{1,5}", 0..60), window in 1usize..12, overlap_frac in 0usize..100) {
            let overlap = overlap_frac * window / 100;
            let s = Splitter::new(window, overlap.min(window - 1)).unwrap();
            let text = words.join(" ");
            let offsets = word_offsets(&text);
            let passages = s.split_offsets(&text, &offsets);
            for (a, b) in &offsets {
                proptest::prop_assert!(passages.iter().any(|r| r.start <= *a && *b <= r.end));
            }
            for r in &passages {
                let inside = offsets.iter().filter(|(a, b)| r.start <= *a && *b <= r.end).count();
                proptest::prop_assert!(inside <= window.max(offsets.len().min(window)));
                proptest::prop_assert!(text.is_char_boundary(r.start) && text.is_char_boundary(r.end));
            }
        }
    }
}
