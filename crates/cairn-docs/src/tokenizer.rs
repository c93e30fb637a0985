//! The code-aware tokenizer: words are maximal runs of letters, digits and `_`; a word made of
//! parts (`snake_case`, `camelCase`, `HTTPServer`) is emitted whole *and* as its parts, the parts
//! at consecutive positions starting at the whole word's position, so `parse_query` matches the
//! query `parse_query`, `parse`, `query` and the phrase `"parse query"`. Lowercasing and
//! stemming are separate filters (see [`analyzer`]).

use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, Stemmer, TextAnalyzer, Token, TokenStream, Tokenizer,
};

/// Name the analyzer is registered under in the index.
pub const ANALYZER: &str = "cairn_code";

/// Words longer than this (bytes) are not indexed (hashes, base64, minified code).
pub const MAX_WORD: usize = 64;

/// The analyzer used for every text field: code-aware split, long-word removal, lowercase,
/// English (Porter2) stemming.
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(CodeTokenizer::default())
        .filter(RemoveLongFilter::limit(MAX_WORD + 1))
        .filter(LowerCaser)
        .filter(Stemmer::new(Language::English))
        .build()
}

/// Splits text into words and word parts (see the module docs).
#[derive(Clone, Default)]
pub struct CodeTokenizer {
    tokens: Vec<Token>,
}

/// The tokens of one text, computed up front.
pub struct CodeTokenStream<'a> {
    tokens: &'a mut Vec<Token>,
    next: usize,
}

impl Tokenizer for CodeTokenizer {
    type TokenStream<'a> = CodeTokenStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> CodeTokenStream<'a> {
        self.tokens.clear();
        tokenize(text, &mut self.tokens);
        CodeTokenStream { tokens: &mut self.tokens, next: 0 }
    }
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

/// Appends the tokens of `text` to `out`.
pub fn tokenize(text: &str, out: &mut Vec<Token>) {
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

fn token(text: &str, from: usize, to: usize, position: usize) -> Token {
    Token { offset_from: from, offset_to: to, position, text: text[from..to].to_string(), position_length: 1 }
}

/// Emits the word `text[start..end]` and its parts; returns the positions it used.
fn emit_word(text: &str, start: usize, end: usize, position: usize, out: &mut Vec<Token>) -> usize {
    let word = &text[start..end];
    let parts = split_parts(word);
    let whole_is_part = parts.len() == 1 && parts[0] == (0, word.len());
    if !word.trim_matches('_').is_empty() && !whole_is_part {
        out.push(token(text, start, end, position));
    }
    for (i, &(a, b)) in parts.iter().enumerate() {
        out.push(token(text, start + a, start + b, position + i));
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
