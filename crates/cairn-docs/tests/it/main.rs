//! Integration tests of the document memory.

mod crash;
mod grep;
mod memory;
mod search;

use cairn_docs::{AddOptions, Memory, NewDoc};

/// A document with text content.
pub fn doc(path: &str, content: &str) -> NewDoc {
    NewDoc { path: path.to_string(), content: content.as_bytes().to_vec() }
}

/// Adds one document with default options.
pub fn add(m: &Memory, path: &str, content: &str) -> cairn_docs::Added {
    m.add(vec![doc(path, content)], &AddOptions::default()).unwrap().pop().unwrap()
}

/// Add options with these tags.
pub fn tagged(tags: &[&str]) -> AddOptions {
    AddOptions { tags: tags.iter().map(|t| t.to_string()).collect(), meta: Vec::new() }
}
