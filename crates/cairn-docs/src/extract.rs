//! Content kinds and text extraction: plain text, Markdown and source code are indexed as they
//! are; HTML loses its tags, comments, scripts and styles (entities decoded); JSON contributes its
//! keys and scalar values. Anything else, or content that is not UTF-8 text, is stored but not
//! indexed.

use std::path::Path;

/// What kind of content a document holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Plain text.
    Text,
    /// Markdown.
    Markdown,
    /// Program source code or configuration.
    Code,
    /// HTML.
    Html,
    /// JSON.
    Json,
    /// Anything else: stored, not indexed.
    Binary,
}

const CODE_EXTS: &[&str] = &[
    "rs", "c", "h", "cc", "cpp", "cxx", "hpp", "hh", "py", "pyi", "js", "mjs", "cjs", "jsx", "ts", "tsx", "go", "java",
    "kt", "kts", "scala", "rb", "php", "cs", "swift", "m", "mm", "sh", "bash", "zsh", "fish", "pl", "pm", "lua", "r",
    "sql", "toml", "yaml", "yml", "ini", "cfg", "conf", "xml", "css", "scss", "less", "vue", "svelte", "zig", "nim",
    "hs", "ml", "mli", "ex", "exs", "erl", "clj", "dart", "jl", "proto", "cmake", "mk", "s", "asm", "dts", "dtsi",
    "lds", "awk", "tex", "rst", "adoc", "gradle", "tf", "nix", "el", "vim", "bat", "ps1",
];

const CODE_NAMES: &[&str] =
    &["Makefile", "Kconfig", "Dockerfile", "CMakeLists.txt", "Cargo.lock", "Gemfile", "Rakefile", "Kbuild"];

impl Kind {
    /// The MIME type recorded for this kind.
    pub fn mime(self) -> &'static str {
        match self {
            Kind::Text => "text/plain",
            Kind::Markdown => "text/markdown",
            Kind::Code => "text/x-source",
            Kind::Html => "text/html",
            Kind::Json => "application/json",
            Kind::Binary => "application/octet-stream",
        }
    }

    /// The kind a recorded MIME type names.
    pub fn from_mime(m: &str) -> Kind {
        match m {
            "text/plain" => Kind::Text,
            "text/markdown" => Kind::Markdown,
            "text/x-source" => Kind::Code,
            "text/html" => Kind::Html,
            "application/json" => Kind::Json,
            _ => Kind::Binary,
        }
    }

    /// Whether the kind is indexed for search.
    pub fn is_text(self) -> bool {
        self != Kind::Binary
    }
}

/// Decides the kind from the name and the first bytes: a NUL byte or invalid UTF-8 in the
/// first 8 KiB makes it binary whatever the extension says.
pub fn detect(name: &str, content: &[u8]) -> Kind {
    let head = &content[..content.len().min(8192)];
    if head.contains(&0) || !utf8_prefix_ok(head, content.len() > head.len()) {
        return Kind::Binary;
    }
    let p = Path::new(name);
    let file = p.file_name().and_then(|f| f.to_str()).unwrap_or("");
    let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    match ext.as_str() {
        "md" | "markdown" | "mdx" => Kind::Markdown,
        "html" | "htm" | "xhtml" => Kind::Html,
        "json" | "jsonl" | "ndjson" | "geojson" => Kind::Json,
        "txt" | "text" | "log" | "csv" | "tsv" => Kind::Text,
        e if CODE_EXTS.contains(&e) => Kind::Code,
        _ if CODE_NAMES.contains(&file) => Kind::Code,
        _ => {
            let t = String::from_utf8_lossy(&head[..head.len().min(512)]);
            let t = t.trim_start();
            if t.starts_with("<!DOCTYPE html") || t.starts_with("<html") {
                Kind::Html
            } else if t.starts_with("#!") {
                Kind::Code
            } else {
                Kind::Text
            }
        }
    }
}

/// Whether `head` is UTF-8, allowing a character cut at the end when more content follows.
fn utf8_prefix_ok(head: &[u8], truncated: bool) -> bool {
    match std::str::from_utf8(head) {
        Ok(_) => true,
        Err(e) => truncated && e.error_len().is_none(),
    }
}

/// Text prepared for indexing.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Extracted {
    /// A title (Markdown's first heading, HTML's `<title>`), if the content has one.
    pub title: Option<String>,
    /// The searchable text.
    pub body: String,
}

/// Extracts the searchable text of `content`; `None` for binary content or invalid UTF-8.
pub fn extract(kind: Kind, content: &[u8]) -> Option<Extracted> {
    if !kind.is_text() {
        return None;
    }
    let text = std::str::from_utf8(content).ok()?;
    Some(match kind {
        Kind::Markdown => Extracted { title: markdown_title(text), body: text.to_string() },
        Kind::Html => html_text(text),
        Kind::Json => Extracted { title: None, body: json_text(text) },
        _ => Extracted { title: None, body: text.to_string() },
    })
}

fn markdown_title(text: &str) -> Option<String> {
    text.lines().take(50).find_map(|l| l.strip_prefix("# ").map(|t| t.trim().to_string())).filter(|t| !t.is_empty())
}

/// Keys and scalar values of a JSON document (or of each line of JSON lines); text that does not
/// parse is indexed as it is.
fn json_text(text: &str) -> String {
    fn walk(v: &serde_json::Value, out: &mut String) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    out.push_str(k);
                    out.push(' ');
                    walk(v, out);
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            serde_json::Value::String(s) => {
                out.push_str(s);
                out.push('\n');
            }
            serde_json::Value::Null => {}
            other => {
                out.push_str(&other.to_string());
                out.push('\n');
            }
        }
    }
    let mut out = String::new();
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(v) => walk(&v, &mut out),
        Err(_) => {
            for line in text.lines() {
                match serde_json::from_str::<serde_json::Value>(line) {
                    Ok(v) => walk(&v, &mut out),
                    Err(_) => {
                        out.push_str(line);
                        out.push('\n');
                    }
                }
            }
        }
    }
    out
}

/// The visible text of an HTML page: tags, comments, `<script>` and `<style>` removed, block
/// tags turned into line breaks, entities decoded.
fn html_text(html: &str) -> Extracted {
    let mut out = String::with_capacity(html.len() / 2);
    let mut title = None;
    let lower = html.to_ascii_lowercase();
    let mut i = 0;
    while i < html.len() {
        let rest = &html[i..];
        let Some(lt) = rest.find('<') else {
            decode_entities(rest, &mut out);
            break;
        };
        decode_entities(&rest[..lt], &mut out);
        i += lt;
        let lrest = &lower[i..];
        if lrest.starts_with("<!--") {
            i = lrest.find("-->").map_or(html.len(), |e| i + e + 3);
            continue;
        }
        let name: String =
            lrest[1..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '/' || *c == '!').collect();
        let Some(gt) = lrest.find('>') else { break };
        let tag_end = i + gt + 1;
        match name.as_str() {
            "script" | "style" | "title" => {
                let close = format!("</{name}");
                let end = lower[tag_end..].find(&close).map_or(html.len(), |e| tag_end + e);
                if name == "title" {
                    let mut t = String::new();
                    decode_entities(&html[tag_end..end], &mut t);
                    let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
                    if !t.is_empty() {
                        out.push_str(&t);
                        out.push('\n');
                        title.get_or_insert(t);
                    }
                }
                i = lower[end..].find('>').map_or(html.len(), |e| end + e + 1);
            }
            _ => {
                let n = name.trim_start_matches('/');
                if matches!(n, "p" | "br" | "div" | "li" | "tr" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6" | "pre") {
                    out.push('\n');
                } else {
                    out.push(' ');
                }
                i = tag_end;
            }
        }
    }
    Extracted { title, body: out }
}

fn decode_entities(s: &str, out: &mut String) {
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let end = rest.as_bytes()[..rest.len().min(12)].iter().position(|&b| b == b';');
        let decoded = end.and_then(|e| {
            let ent = &rest[1..e];
            let c = match ent {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                "nbsp" => Some(' '),
                _ => ent
                    .strip_prefix("#x")
                    .or_else(|| ent.strip_prefix("#X"))
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .or_else(|| ent.strip_prefix('#').and_then(|d| d.parse().ok()))
                    .and_then(char::from_u32),
            };
            c.map(|c| (c, e + 1))
        });
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_kinds() {
        assert_eq!(detect("a/b.rs", b"fn main() {}"), Kind::Code);
        assert_eq!(detect("notes.md", b"# Hi"), Kind::Markdown);
        assert_eq!(detect("x.json", b"{}"), Kind::Json);
        assert_eq!(detect("page", b"<!DOCTYPE html><p>x"), Kind::Html);
        assert_eq!(detect("Makefile", b"all:\n"), Kind::Code);
        assert_eq!(detect("README", b"plain words"), Kind::Text);
        assert_eq!(detect("x.txt", b"a\0b"), Kind::Binary);
        assert_eq!(detect("x.txt", &[0xff, 0xfe, 0x41]), Kind::Binary);
        // A multi-byte character cut by the 8 KiB sniff window is still text.
        let mut big = vec![b'a'; 8191];
        big.extend_from_slice("é and more".as_bytes());
        assert_eq!(detect("x.txt", &big), Kind::Text);
    }

    #[test]
    fn html_loses_markup_keeps_text() {
        let e = extract(
            Kind::Html,
            b"<html><head><title>The &amp; Title</title><style>p{color:red}</style></head>\
              <body><!-- hidden --><p>Hello&nbsp;<b>world</b> &#65;&#x42;</p><script>var secret=1;</script></body></html>",
        )
        .unwrap();
        assert_eq!(e.title.as_deref(), Some("The & Title"));
        assert!(e.body.contains("Hello  world  AB"), "{:?}", e.body);
        assert!(!e.body.contains("secret") && !e.body.contains("color") && !e.body.contains("hidden"));
    }

    #[test]
    fn json_keys_and_values() {
        let e = extract(Kind::Json, br#"{"name":"cairn","tags":["kv","blob"],"n":3,"nested":{"deep":true}}"#).unwrap();
        for w in ["name", "cairn", "kv", "blob", "3", "deep", "true"] {
            assert!(e.body.contains(w), "{w} in {:?}", e.body);
        }
        let lines = extract(Kind::Json, b"{\"a\":\"x\"}\n{\"b\":\"y\"}\n").unwrap();
        assert!(lines.body.contains('x') && lines.body.contains('y'));
    }

    #[test]
    fn markdown_title_and_binary() {
        let e = extract(Kind::Markdown, b"intro\n# Big Title\ntext").unwrap();
        assert_eq!(e.title.as_deref(), Some("Big Title"));
        assert_eq!(extract(Kind::Binary, b"abc"), None);
        assert_eq!(extract(Kind::Text, &[0xff]), None);
    }

    proptest::proptest! {
        #[test]
        fn html_extraction_never_panics(s in "[<>a-zé/!&#;x0-9 -]{0,200}") {
            let _ = extract(Kind::Html, s.as_bytes());
        }
    }
}
