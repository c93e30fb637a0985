//! A Hugging Face `tokenizer.json` (pure-Rust `tokenizers`), set up the way this crate needs it:
//! no padding (batches are padded to their longest text here), truncation at the model's limit,
//! and byte offsets for the passage splitter.

use std::path::Path;

use tokenizers::{PaddingParams, Tokenizer, TruncationParams};

use crate::error::{Error, Result};

fn tk(e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(e.to_string())
}

/// A model's tokenizer. Some `tokenizer.json` files (all-MiniLM-L6-v2's) fix padding and
/// truncation at 128 tokens; both are overridden here.
#[derive(Clone)]
pub struct TextTokenizer {
    /// Truncates to `max_tokens` (special tokens included), for embedding.
    truncating: Tokenizer,
    /// Does not truncate, for splitting.
    whole: Tokenizer,
    max_tokens: usize,
    pad_id: u32,
}

/// One text's tokens, as the model takes them.
pub(crate) struct Tokens {
    pub ids: Vec<u32>,
    pub type_ids: Vec<u32>,
}

impl TextTokenizer {
    /// Loads `tokenizer.json`; texts are cut to `max_tokens` tokens, special tokens included.
    pub fn from_file(path: &Path, max_tokens: usize) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        Self::from_bytes(&bytes, max_tokens)
    }

    /// Loads a `tokenizer.json` held in memory.
    pub fn from_bytes(json: &[u8], max_tokens: usize) -> Result<Self> {
        if max_tokens < 8 {
            return Err(Error::InvalidArgument(format!("max_tokens {max_tokens} is below 8")));
        }
        let mut whole = Tokenizer::from_bytes(json).map_err(tk)?;
        let pad_id =
            whole.get_padding().map(|p: &PaddingParams| p.pad_id).or_else(|| whole.token_to_id("[PAD]")).unwrap_or(0);
        whole.with_padding(None);
        whole.with_truncation(None).map_err(tk)?;
        let mut truncating = whole.clone();
        truncating
            .with_truncation(Some(TruncationParams { max_length: max_tokens, ..TruncationParams::default() }))
            .map_err(tk)?;
        Ok(TextTokenizer { truncating, whole, max_tokens, pad_id })
    }

    /// The most tokens of one text given to the model.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// The id padding positions get (masked out, so it does not change results).
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// The number of tokens of `text` without special tokens and without truncation.
    pub fn count_tokens(&self, text: &str) -> Result<usize> {
        Ok(self.whole.encode(text, false).map_err(tk)?.len())
    }

    /// The byte range in `text` of each token (special tokens left out), in order.
    pub fn token_offsets(&self, text: &str) -> Result<Vec<(usize, usize)>> {
        let enc = self.whole.encode(text, false).map_err(tk)?;
        Ok(enc.get_offsets().to_vec())
    }

    /// Tokenizes a text for the model: special tokens added, cut at `max_tokens`.
    pub(crate) fn encode(&self, text: &str) -> Result<Tokens> {
        let enc = self.truncating.encode(text, true).map_err(tk)?;
        Ok(Tokens { ids: enc.get_ids().to_vec(), type_ids: enc.get_type_ids().to_vec() })
    }
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("max_tokens", &self.max_tokens)
            .field("pad_id", &self.pad_id)
            .finish_non_exhaustive()
    }
}
