//! The code-aware analyzer: words are maximal runs of letters, digits and `_`; a word made of
//! parts (`snake_case`, `camelCase`, `HTTPServer`) is emitted whole *and* as its parts, the parts
//! at consecutive positions starting at the whole word's position, so `parse_query` matches the
//! query `parse_query`, `parse`, `query` and the phrase `"parse query"`. Tokens longer than
//! [`MAX_WORD`] bytes are dropped; the rest are lowercased and stemmed (English, Porter2) in the
//! same pass, with a cache of stems shared by the process (source code repeats its words a lot,
//! and stemming was the largest cost of indexing and of snippets); an indexing analyzer has a
//! cache of its own in front of it.

use std::hash::BuildHasher;
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use rust_stemmers::{Algorithm, Stemmer};
use rustc_hash::FxHashMap;
use tantivy::tokenizer::{TextAnalyzer, Token, TokenStream, Tokenizer};

/// Name the analyzer is registered under in the index.
pub const ANALYZER: &str = "cairn_code";

/// Words longer than this (bytes) are not indexed (hashes, base64, minified code).
pub const MAX_WORD: usize = 64;

/// Stems an indexing analyzer caches, and the shared cache holds in all, before emptying.
const STEM_CACHE: usize = 100_000;

/// The analyzer of every text field, for queries, snippets and small indexes: stems come from
/// the process's shared cache.
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::from(CodeTokenizer::default())
}

/// [`analyzer`] with a cache of its own in front of the shared one, for indexing many documents
/// with one analyzer (no lock per word).
pub fn indexing_analyzer() -> TextAnalyzer {
    TextAnalyzer::from(CodeTokenizer { stems: Some(FxHashMap::default()), ..CodeTokenizer::default() })
}

/// Splits, lowercases and stems text (see the module docs).
#[derive(Clone)]
pub struct CodeTokenizer {
    tokens: Vec<Token>,
    len: usize,
    stemmer: Arc<Stemmer>,
    /// The analyzer's own cache (none: the shared one only).
    stems: Option<FxHashMap<String, String>>,
    lower: String,
}

impl Default for CodeTokenizer {
    fn default() -> Self {
        CodeTokenizer {
            tokens: Vec::new(),
            len: 0,
            stemmer: Arc::new(Stemmer::create(Algorithm::English)),
            stems: None,
            lower: String::new(),
        }
    }
}

/// The tokens of one text, computed up front.
pub struct CodeTokenStream<'a> {
    tokens: &'a mut [Token],
    next: usize,
}

impl Tokenizer for CodeTokenizer {
    type TokenStream<'a> = CodeTokenStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> CodeTokenStream<'a> {
        self.len = 0;
        let mut spans = Vec::new();
        word_spans(text, &mut spans);
        for (from, to, position) in spans {
            self.push(text, from, to, position);
        }
        CodeTokenStream { tokens: &mut self.tokens[..self.len], next: 0 }
    }
}

impl CodeTokenizer {
    /// Lowercases and stems `t` into the next token slot (reusing its buffer); drops long words.
    fn push(&mut self, text: &str, from: usize, to: usize, position: usize) {
        if to - from > MAX_WORD {
            return;
        }
        let word = &text[from..to];
        self.lower.clear();
        if word.is_ascii() {
            self.lower.push_str(word);
            self.lower.make_ascii_lowercase();
        } else {
            self.lower.extend(word.chars().flat_map(char::to_lowercase));
        }
        if self.len == self.tokens.len() {
            self.tokens.push(Token::default());
        }
        let slot = &mut self.tokens[self.len];
        slot.text.clear();
        match &mut self.stems {
            Some(stems) => {
                if !stems.contains_key(&self.lower) {
                    if stems.len() >= STEM_CACHE {
                        stems.clear();
                    }
                    let mut stem = String::new();
                    shared_stem(&self.stemmer, &self.lower, &mut stem);
                    stems.insert(self.lower.clone(), stem);
                }
                slot.text.push_str(&stems[&self.lower]);
            }
            None => shared_stem(&self.stemmer, &self.lower, &mut slot.text),
        }
        slot.offset_from = from;
        slot.offset_to = to;
        slot.position = position;
        slot.position_length = 1;
        self.len += 1;
    }
}

/// Shards of the stems shared by every analyzer of the process, behind each analyzer's own
/// cache: an analyzer is cloned for every search, snippet and in-memory index part, and a fresh
/// clone would otherwise stem every word again (the largest cost of a search with snippets).
const SHARDS: usize = 16;

fn shared_stems() -> &'static [RwLock<FxHashMap<String, String>>; SHARDS] {
    static STEMS: OnceLock<[RwLock<FxHashMap<String, String>>; SHARDS]> = OnceLock::new();
    STEMS.get_or_init(|| std::array::from_fn(|_| RwLock::default()))
}

/// Appends the stem of the lowercased word `lower` to `out`, from the shared cache or stemmed
/// (and cached).
fn shared_stem(stemmer: &Stemmer, lower: &str, out: &mut String) {
    let shard = &shared_stems()[rustc_hash::FxBuildHasher.hash_one(lower) as usize % SHARDS];
    if let Some(stem) = shard.read().get(lower) {
        out.push_str(stem);
        return;
    }
    let stem = stemmer.stem(lower).into_owned();
    out.push_str(&stem);
    let mut w = shard.write();
    if w.len() >= STEM_CACHE / SHARDS {
        w.clear();
    }
    w.insert(lower.to_string(), stem);
}

impl TokenStream for CodeTokenStream<'_> {
    fn advance(&mut self) -> bool {
        self.next += 1;
        self.next <= self.tokens.len()
    }

    fn token(&self) -> &Token {
        &self.tokens[self.next - 1]
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.next - 1]
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Appends the raw (not lowercased, not stemmed) tokens of `text` to `out`.
pub fn tokenize(text: &str, out: &mut Vec<Token>) {
    let mut spans = Vec::new();
    word_spans(text, &mut spans);
    out.extend(spans.into_iter().map(|(from, to, position)| Token {
        offset_from: from,
        offset_to: to,
        position,
        text: text[from..to].to_string(),
        position_length: 1,
    }));
}

/// Appends `(from, to, position)` of every raw token of `text` to `out`.
fn word_spans(text: &str, out: &mut Vec<(usize, usize, usize)>) {
    let mut position = 0usize;
    let mut chars = text.char_indices().peekable();
    while let Some(&(start, c)) = chars.peek() {
        if !is_word_char(c) {
            chars.next();
            continue;
        }
        let mut end = start;
        while let Some(&(i, c)) = chars.peek() {
            if !is_word_char(c) {
                break;
            }
            end = i + c.len_utf8();
            chars.next();
        }
        position += emit_word(text, start, end, position, out);
    }
}

/// Emits the word `text[start..end]` and its parts; returns the positions it used.
fn emit_word(text: &str, start: usize, end: usize, position: usize, out: &mut Vec<(usize, usize, usize)>) -> usize {
    let word = &text[start..end];
    // Fast path: a plain lowercase word or number is its own single part.
    if word.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
        out.push((start, end, position));
        return 1;
    }
    let parts = split_parts(word);
    let whole_is_part = parts.len() == 1 && parts[0] == (0, word.len());
    if !word.trim_matches('_').is_empty() && !whole_is_part {
        out.push((start, end, position));
    }
    for (i, &(a, b)) in parts.iter().enumerate() {
        out.push((start + a, start + b, position + i));
    }
    parts.len().max(1)
}

/// Byte ranges of the parts of a word: split at `_`, at a lower-to-upper case change
/// (`camel|Case`) and before the last capital of a capital run followed by lowercase
/// (`HTTP|Server`). Digits stay with their neighbours (`utf8`, `ALDH1`).
pub fn split_parts(word: &str) -> Vec<(usize, usize)> {
    let mut parts = Vec::new();
    let chars: Vec<(usize, char)> = word.char_indices().collect();
    let mut start: Option<usize> = None;
    for (k, &(i, c)) in chars.iter().enumerate() {
        if c == '_' {
            if let Some(s) = start.take() {
                parts.push((s, i));
            }
            continue;
        }
        if let Some(s) = start {
            let prev = chars[k - 1].1;
            let next_lower = chars.get(k + 1).is_some_and(|&(_, n)| n.is_lowercase());
            let boundary = (prev.is_lowercase() || prev.is_numeric()) && c.is_uppercase()
                || prev.is_uppercase() && c.is_uppercase() && next_lower;
            if boundary {
                parts.push((s, i));
                start = Some(i);
            }
        } else {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        parts.push((s, word.len()));
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(s: &str) -> Vec<(String, usize)> {
        let mut a = analyzer();
        let mut ts = a.token_stream(s);
        let mut v = Vec::new();
        ts.process(&mut |t| v.push((t.text.clone(), t.position)));
        v
    }

    fn parts(w: &str) -> Vec<&str> {
        split_parts(w).into_iter().map(|(a, b)| &w[a..b]).collect()
    }

    #[test]
    fn splits_identifiers() {
        assert_eq!(parts("snake_case_name"), ["snake", "case", "name"]);
        assert_eq!(parts("camelCaseName"), ["camel", "Case", "Name"]);
        assert_eq!(parts("HTTPServer"), ["HTTP", "Server"]);
        assert_eq!(parts("utf8"), ["utf8"]);
        assert_eq!(parts("ALDH1"), ["ALDH1"]);
        assert_eq!(parts("__init__"), ["init"]);
        assert_eq!(parts("word"), ["word"]);
        assert_eq!(parts("_"), Vec::<&str>::new());
        assert_eq!(parts("parseJSON2Value"), ["parse", "JSON2", "Value"]);
    }

    #[test]
    fn emits_whole_word_and_parts_with_positions() {
        assert_eq!(
            texts("fn parse_query(x)"),
            [("fn".into(), 0), ("parse_queri".into(), 1), ("pars".into(), 1), ("queri".into(), 2), ("x".into(), 3)]
        );
        assert_eq!(
            texts("getUserName"),
            [("getusernam".into(), 0), ("get".into(), 0), ("user".into(), 1), ("name".into(), 2)]
        );
        assert_eq!(texts("Running dogs ran."), [("run".into(), 0), ("dog".into(), 1), ("ran".into(), 2)]);
        assert!(texts("__ -- !!").is_empty());
        assert_eq!(texts("naïve café"), [("naïv".into(), 0), ("café".into(), 1)]);
    }

    #[test]
    fn offsets_point_into_the_text() {
        let s = "let fooBar = Ærø_x;";
        let mut v = Vec::new();
        tokenize(s, &mut v);
        for t in &v {
            assert_eq!(&s[t.offset_from..t.offset_to], t.text);
        }
        assert!(v.iter().any(|t| t.text == "fooBar"));
    }

    proptest::proptest! {
        #[test]
        fn any_text_tokenizes_with_valid_offsets(s in "\\PC{0,200}") {
            let mut v = Vec::new();
            tokenize(&s, &mut v);
            let mut last = 0;
            for t in &v {
                proptest::prop_assert_eq!(&s[t.offset_from..t.offset_to], t.text.as_str());
                proptest::prop_assert!(t.position >= last);
                last = t.position;
            }
        }
    }
}
