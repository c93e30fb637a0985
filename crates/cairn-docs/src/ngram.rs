//! The n-gram index of stored text that lets grep read only candidate documents
//! ([design](../../../docs/design/2026-12-07-ngram-grep.md), format in docs/format/docs.md).
//!
//! Each document's entry in the full-text index also holds the set of its content's *trigrams*:
//! every run of three bytes, ASCII letters folded to lower case, as the number
//! `b0 << 16 | b1 << 8 | b2`. A regex is analysed ([`plan`]) into a [`GramQuery`], an AND/OR of
//! trigrams that every document holding a match must have (the analysis of Russ Cox's
//! codesearch, over `regex-syntax`'s HIR); grep confirms each candidate with the regex itself,
//! so its output is exactly that of a full scan. A pattern with no usable trigram ([`GramQuery::All`])
//! scans every document.
//!
//! Folding is a function of each byte applied to both sides, so a literal in the content is a
//! literal in the folded content: the index never hides a match, whatever the case options.

use std::collections::BTreeSet;

use regex_syntax::hir::{Class, Hir, HirKind};

/// A trigram: three folded bytes as `b0 << 16 | b1 << 8 | b2`.
pub type Gram = u32;

/// The term an entry holds instead of its trigrams when it has more than [`MAX_GRAMS`] (a
/// document of diverse text, of which an entry of every trigram would cost tens of bytes each
/// in memory while indexing): such a document is a candidate for every pattern.
pub const SATURATED: Gram = 1 << 24;

/// Distinct trigrams beyond which an entry holds [`SATURATED`] instead.
pub const MAX_GRAMS: usize = 1 << 20;

/// What an entry holds for a document with these distinct trigrams (at most `cap` of them,
/// else [`SATURATED`]).
pub fn entry_grams(grams: Vec<Gram>, cap: usize) -> Vec<Gram> {
    if grams.len() > cap { vec![SATURATED] } else { grams }
}

/// How a byte is indexed: ASCII upper case as lower case, everything else as it is.
#[inline]
pub fn fold(b: u8) -> u8 {
    b.to_ascii_lowercase()
}

/// Content up to this long has its trigrams made distinct by sorting them, which needs no table
/// (a daemon adds small documents on many threads at once).
const SORT_MAX: usize = 4 << 10;

/// Bit tables (one bit per possible trigram, 2 MiB each) lent to [`grams`] for larger
/// content, all zero between uses. At most [`table_cap`] exist: a caller that finds none free
/// sorts instead, so memory stays bounded however many threads add at once.
static TABLES: parking_lot::Mutex<(Vec<Box<[u64]>>, usize)> = parking_lot::Mutex::new((Vec::new(), 0));

/// One table per core (asked of the system once: on Linux that reads cgroup files).
fn table_cap() -> usize {
    static CAP: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CAP.get_or_init(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
}

/// A free table, a new one if fewer than the cap exist, or none.
fn take_table() -> Option<Box<[u64]>> {
    let mut t = TABLES.lock();
    if let Some(b) = t.0.pop() {
        return Some(b);
    }
    if t.1 >= table_cap() {
        return None;
    }
    t.1 += 1;
    drop(t);
    Some(vec![0u64; 1 << 18].into_boxed_slice())
}

/// The distinct trigrams of `content` (in no particular order).
pub fn grams(content: &[u8]) -> Vec<Gram> {
    if content.len() <= SORT_MAX {
        return grams_sorted(content);
    }
    match take_table() {
        Some(mut bits) => {
            let out = grams_table(content, &mut bits);
            TABLES.lock().0.push(bits);
            out
        }
        None => grams_sorted(content),
    }
}

/// Every trigram of `content`, in order, repeats included.
fn all_grams(content: &[u8]) -> impl Iterator<Item = Gram> + '_ {
    let mut g = content.get(..2).map_or(0, |p| (u32::from(fold(p[0])) << 8) | u32::from(fold(p[1])));
    content.get(2..).unwrap_or_default().iter().map(move |&b| {
        g = ((g << 8) | u32::from(fold(b))) & 0xFF_FFFF;
        g
    })
}

/// [`grams`] by sorting: sorted.
fn grams_sorted(content: &[u8]) -> Vec<Gram> {
    let mut out: Vec<Gram> = all_grams(content).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// [`grams`] with a bit table, all zero before and after.
fn grams_table(content: &[u8], bits: &mut [u64]) -> Vec<Gram> {
    // Branch-free: every trigram is written to a scratch block, and the count advances only
    // for a new one (a branch per byte that cannot be predicted costs more than the stores);
    // the block bounds the memory whatever the content's size.
    let mut out = Vec::new();
    let mut scratch = vec![0; content.len().clamp(1, 1 << 16)];
    let mut all = all_grams(content).peekable();
    while all.peek().is_some() {
        let mut n = 0;
        for g in all.by_ref().take(scratch.len()) {
            let word = &mut bits[(g >> 6) as usize];
            let mask = 1u64 << (g & 63);
            let new = usize::from(*word & mask == 0);
            *word |= mask;
            scratch[n] = g;
            n += new;
        }
        out.extend_from_slice(&scratch[..n]);
    }
    for &g in &out {
        bits[(g >> 6) as usize] = 0;
    }
    out
}

/// What a document must contain to hold a match: evaluated against the index, it gives the
/// candidates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GramQuery {
    /// No condition: every document is a candidate.
    All,
    /// No document can match.
    None,
    /// The document has this trigram.
    Gram(Gram),
    /// Every one of these holds.
    And(Vec<GramQuery>),
    /// One of these holds.
    Or(Vec<GramQuery>),
}

impl GramQuery {
    fn and(self, other: GramQuery) -> GramQuery {
        match (self, other) {
            (GramQuery::All, q) | (q, GramQuery::All) => q,
            (GramQuery::None, _) | (_, GramQuery::None) => GramQuery::None,
            (a, b) => join(a, b, true),
        }
    }

    fn or(self, other: GramQuery) -> GramQuery {
        match (self, other) {
            (GramQuery::All, _) | (_, GramQuery::All) => GramQuery::All,
            (GramQuery::None, q) | (q, GramQuery::None) => q,
            (a, b) => join(a, b, false),
        }
    }

    /// AND of: one of `strings` occurs (each string: all of its trigrams). A string shorter
    /// than a trigram says nothing, so then the condition is [`GramQuery::All`].
    fn and_strings(self, strings: &BTreeSet<Vec<u8>>) -> GramQuery {
        if strings.iter().any(|s| s.len() < 3) {
            return self;
        }
        let mut any = GramQuery::None;
        for s in strings {
            let mut all = GramQuery::All;
            for w in s.windows(3) {
                all = all.and(GramQuery::Gram(gram_of(w)));
            }
            any = any.or(all);
        }
        self.and(any)
    }

    /// Whether a document with trigrams `has` satisfies the query.
    pub fn matches(&self, has: &impl Fn(Gram) -> bool) -> bool {
        match self {
            GramQuery::All => true,
            GramQuery::None => false,
            GramQuery::Gram(g) => has(*g),
            GramQuery::And(qs) => qs.iter().all(|q| q.matches(has)),
            GramQuery::Or(qs) => qs.iter().any(|q| q.matches(has)),
        }
    }

    /// The number of trigram terms in the query.
    pub fn terms(&self) -> usize {
        match self {
            GramQuery::All | GramQuery::None => 0,
            GramQuery::Gram(_) => 1,
            GramQuery::And(qs) | GramQuery::Or(qs) => qs.iter().map(GramQuery::terms).sum(),
        }
    }
}

/// `a AND b` (`and`) or `a OR b`, neither `All` nor `None`: nested nodes of the same kind
/// flattened, repeats dropped.
fn join(a: GramQuery, b: GramQuery, and: bool) -> GramQuery {
    let mut v = Vec::new();
    for q in [a, b] {
        match q {
            GramQuery::And(qs) if and => v.extend(qs),
            GramQuery::Or(qs) if !and => v.extend(qs),
            q => v.push(q),
        }
    }
    dedup(&mut v);
    match v.len() {
        1 => v.pop().unwrap_or(GramQuery::All),
        _ if and => GramQuery::And(v),
        _ => GramQuery::Or(v),
    }
}

fn dedup(v: &mut Vec<GramQuery>) {
    let mut out: Vec<GramQuery> = Vec::with_capacity(v.len());
    for q in v.drain(..) {
        if !out.contains(&q) {
            out.push(q);
        }
    }
    *v = out;
}

/// The trigram of three (unfolded) bytes.
pub fn gram_of(w: &[u8]) -> Gram {
    (u32::from(fold(w[0])) << 16) | (u32::from(fold(w[1])) << 8) | u32::from(fold(w[2]))
}

/// Exact sets larger than this become prefix and suffix sets.
const MAX_EXACT: usize = 16;
/// Prefix and suffix sets larger than this are cut to shorter strings.
const MAX_SET: usize = 32;
/// Character classes with more members than this match "any character" for the analysis.
const MAX_CLASS: usize = 16;

/// What the analysis knows of a sub-expression's matches (strings folded).
#[derive(Clone, Debug)]
struct Info {
    /// It can match the empty string.
    can_empty: bool,
    /// Every string it can match, when few enough to list.
    exact: Option<BTreeSet<Vec<u8>>>,
    /// When `exact` is unknown: every match starts with one of these.
    prefix: BTreeSet<Vec<u8>>,
    /// When `exact` is unknown: every match ends with one of these.
    suffix: BTreeSet<Vec<u8>>,
    /// A condition every document holding a match meets.
    query: GramQuery,
}

fn set_of(strings: impl IntoIterator<Item = Vec<u8>>) -> BTreeSet<Vec<u8>> {
    strings.into_iter().collect()
}

impl Info {
    fn exact(strings: BTreeSet<Vec<u8>>) -> Info {
        let can_empty = strings.contains(&Vec::new());
        let query = if strings.is_empty() { GramQuery::None } else { GramQuery::All };
        Info { can_empty, exact: Some(strings), prefix: BTreeSet::new(), suffix: BTreeSet::new(), query }
    }

    fn empty() -> Info {
        Info::exact(set_of([Vec::new()]))
    }

    /// Any one character: nothing known but that it is not empty.
    fn any_char() -> Info {
        Info {
            can_empty: false,
            exact: None,
            prefix: set_of([Vec::new()]),
            suffix: set_of([Vec::new()]),
            query: GramQuery::All,
        }
    }

    /// Anything at all, the empty string included.
    fn any_match() -> Info {
        Info { can_empty: true, ..Info::any_char() }
    }

    /// Moves the exact strings into the query (as an OR of their trigrams).
    fn add_exact(&mut self) {
        if let Some(exact) = &self.exact {
            self.query = std::mem::replace(&mut self.query, GramQuery::All).and_strings(exact);
        }
    }

    /// Keeps the sets small: too many exact strings become prefixes and suffixes (their
    /// trigrams into the query), and prefix and suffix sets are cut to two bytes once their
    /// trigrams are in the query.
    fn simplify(&mut self, force: bool) {
        if let Some(exact) = &self.exact {
            let min = exact.iter().map(Vec::len).min().unwrap_or(0);
            if exact.len() > MAX_EXACT || (force && min >= 3) || min >= 16 {
                self.add_exact();
                let exact = self.exact.take().unwrap_or_default();
                for s in exact {
                    let n = s.len();
                    if n < 3 {
                        self.prefix.insert(s.clone());
                        self.suffix.insert(s);
                    } else {
                        self.prefix.insert(s[..2].to_vec());
                        self.suffix.insert(s[n - 2..].to_vec());
                    }
                }
            }
        }
        if self.exact.is_none() {
            let prefix = std::mem::take(&mut self.prefix);
            self.prefix = self.simplify_set(prefix, false);
            let suffix = std::mem::take(&mut self.suffix);
            self.suffix = self.simplify_set(suffix, true);
        }
    }

    fn simplify_set(&mut self, set: BTreeSet<Vec<u8>>, suffix: bool) -> BTreeSet<Vec<u8>> {
        self.query = std::mem::replace(&mut self.query, GramQuery::All).and_strings(&set);
        let mut set = set;
        let mut n = 2;
        loop {
            set = set
                .into_iter()
                .map(|s| {
                    if s.len() <= n {
                        s
                    } else if suffix {
                        s[s.len() - n..].to_vec()
                    } else {
                        s[..n].to_vec()
                    }
                })
                .collect();
            if set.len() <= MAX_SET || n == 0 {
                break set;
            }
            n -= 1;
        }
    }
}

fn cross(a: &BTreeSet<Vec<u8>>, b: &BTreeSet<Vec<u8>>) -> BTreeSet<Vec<u8>> {
    let mut out = BTreeSet::new();
    for x in a {
        for y in b {
            out.insert([x.as_slice(), y].concat());
        }
    }
    out
}

fn concat(x: Info, y: Info) -> Info {
    let mut query = x.query.clone().and(y.query.clone());
    let mut out = Info {
        can_empty: x.can_empty && y.can_empty,
        exact: None,
        prefix: BTreeSet::new(),
        suffix: BTreeSet::new(),
        query: GramQuery::All,
    };
    match (&x.exact, &y.exact) {
        (Some(a), Some(b)) if a.len().saturating_mul(b.len()) <= MAX_EXACT * MAX_EXACT => {
            out.exact = Some(cross(a, b));
        }
        _ => {
            let (mut x, mut y) = (x, y);
            // Exact sets too large to cross: their trigrams go to the query, and they act as
            // prefixes and suffixes.
            for i in [&mut x, &mut y] {
                if let Some(e) = &i.exact
                    && e.len() > MAX_EXACT
                {
                    i.simplify(true);
                    query = query.and(i.query.clone());
                }
            }
            out.prefix = match &x.exact {
                Some(e) => cross(e, &y.prefix_or_exact()),
                None if x.can_empty => x.prefix.union(&y.prefix_or_exact()).cloned().collect(),
                None => x.prefix.clone(),
            };
            out.suffix = match &y.exact {
                Some(e) => cross(&x.suffix_or_exact(), e),
                None if y.can_empty => y.suffix.union(&x.suffix_or_exact()).cloned().collect(),
                None => y.suffix.clone(),
            };
            if x.exact.is_none() && y.exact.is_none() && x.suffix.len() <= MAX_SET && y.prefix.len() <= MAX_SET {
                // A match holds one of x's suffixes followed by one of y's prefixes: their
                // trigrams across the join are not in either side's sets.
                query = query.and_strings(&cross(&x.suffix, &y.prefix));
            }
        }
    }
    out.query = query;
    out.simplify(false);
    out
}

impl Info {
    fn prefix_or_exact(&self) -> BTreeSet<Vec<u8>> {
        self.exact.clone().unwrap_or_else(|| self.prefix.clone())
    }

    fn suffix_or_exact(&self) -> BTreeSet<Vec<u8>> {
        self.exact.clone().unwrap_or_else(|| self.suffix.clone())
    }
}

fn alternate(mut x: Info, mut y: Info) -> Info {
    let mut out = Info {
        can_empty: x.can_empty || y.can_empty,
        exact: None,
        prefix: BTreeSet::new(),
        suffix: BTreeSet::new(),
        query: GramQuery::All,
    };
    match (&x.exact, &y.exact) {
        (Some(a), Some(b)) => out.exact = Some(a.union(b).cloned().collect()),
        _ => {
            out.prefix = x.prefix_or_exact().union(&y.prefix_or_exact()).cloned().collect();
            out.suffix = x.suffix_or_exact().union(&y.suffix_or_exact()).cloned().collect();
            // A side known exactly keeps its condition in the query (the other side's
            // prefix/suffix sets say nothing of it once merged).
            x.add_exact();
            y.add_exact();
        }
    }
    out.query = x.query.or(y.query);
    out.simplify(false);
    out
}

/// `x+` (and `x{n,m}` with `n >= 1`): a match begins as `x`'s do and ends as `x`'s do.
fn plus(mut x: Info) -> Info {
    if let Some(exact) = x.exact.clone() {
        x.add_exact();
        x.prefix = exact.clone();
        x.suffix = exact;
        x.exact = None;
    }
    x.simplify(false);
    x
}

/// The UTF-8 (or byte) strings of a small class, folded; `None` when it is too large.
fn class_strings(c: &Class) -> Option<BTreeSet<Vec<u8>>> {
    let mut out = BTreeSet::new();
    match c {
        Class::Unicode(u) => {
            let mut n = 0usize;
            for r in u.iter() {
                n += (r.end() as usize).saturating_sub(r.start() as usize) + 1;
                if n > MAX_CLASS * 4 {
                    return None;
                }
                for ch in r.start()..=r.end() {
                    let mut buf = [0; 4];
                    out.insert(ch.encode_utf8(&mut buf).bytes().map(fold).collect());
                }
            }
        }
        Class::Bytes(b) => {
            let mut n = 0usize;
            for r in b.iter() {
                n += usize::from(r.end() - r.start()) + 1;
                if n > MAX_CLASS * 4 {
                    return None;
                }
                for byte in r.start()..=r.end() {
                    out.insert(vec![fold(byte)]);
                }
            }
        }
    }
    (out.len() <= MAX_CLASS).then_some(out)
}

fn analyze(h: &Hir) -> Info {
    let mut info = match h.kind() {
        HirKind::Empty | HirKind::Look(_) => Info::empty(),
        HirKind::Literal(lit) => Info::exact(set_of([lit.0.iter().copied().map(fold).collect()])),
        HirKind::Class(c) => match class_strings(c) {
            Some(s) => Info::exact(s),
            None => Info::any_char(),
        },
        HirKind::Capture(c) => analyze(&c.sub),
        HirKind::Repetition(r) => match (r.min, r.max) {
            (0, Some(1)) => alternate(analyze(&r.sub), Info::empty()),
            (0, _) => Info::any_match(),
            (1, Some(1)) => analyze(&r.sub),
            _ => plus(analyze(&r.sub)),
        },
        HirKind::Concat(hs) => {
            let mut it = hs.iter();
            let first = it.next().map_or_else(Info::empty, analyze);
            it.fold(first, |acc, h| concat(acc, analyze(h)))
        }
        HirKind::Alternation(hs) => {
            let mut it = hs.iter();
            let first = it.next().map_or_else(|| Info::exact(BTreeSet::new()), analyze);
            it.fold(first, |acc, h| alternate(acc, analyze(h)))
        }
    };
    info.simplify(false);
    info
}

/// The condition a document must meet to hold a match of `hir`.
pub fn plan_hir(hir: &Hir) -> GramQuery {
    let mut info = analyze(hir);
    info.simplify(true);
    if let Some(exact) = &info.exact {
        // Strings too short for a trigram: nothing to ask of the index.
        let exact = exact.clone();
        info.query = info.query.and_strings(&exact);
    }
    info.query
}

/// The condition a document must meet to hold a match of grep's `pattern` with these options
/// ([`GramQuery::All`] when the pattern cannot be analysed: every document is then read).
pub fn plan(pattern: &str, ignore_case: bool, fixed: bool) -> GramQuery {
    let escaped;
    let pattern = if fixed {
        escaped = regex_syntax::escape(pattern);
        escaped.as_str()
    } else {
        pattern
    };
    // As grep-regex reads it (its word option only wraps the pattern: a match of the wrapped
    // pattern holds a match of this one).
    match regex_syntax::ParserBuilder::new().case_insensitive(ignore_case).utf8(false).build().parse(pattern) {
        Ok(hir) => plan_hir(&hir),
        Err(_) => GramQuery::All,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;

    fn has(text: &[u8]) -> impl Fn(Gram) -> bool {
        let set: HashSet<Gram> = grams(text).into_iter().collect();
        move |g| set.contains(&g)
    }

    fn g(s: &str) -> GramQuery {
        GramQuery::Gram(gram_of(s.as_bytes()))
    }

    #[test]
    fn grams_are_distinct_and_folded() {
        let mut v = grams(b"ABCabcabc");
        v.sort_unstable();
        let mut want: Vec<Gram> = ["abc", "bca", "cab"].iter().map(|s| gram_of(s.as_bytes())).collect();
        want.sort_unstable();
        assert_eq!(v, want);
        assert!(grams(b"ab").is_empty());
        // The thread's table is clean for the next document.
        assert_eq!(grams(b"abc").len(), 1);
        // Across scratch blocks: every distinct trigram once.
        let long: Vec<u8> = (0..200_000u32).map(|i| b"abcdefghij"[(i * 7 % 10) as usize] ^ (i % 3) as u8).collect();
        let mut v = grams(&long);
        let n = v.len();
        v.sort_unstable();
        v.dedup();
        let want: std::collections::HashSet<Gram> = long.windows(3).map(gram_of).collect();
        assert_eq!((n, v.len()), (want.len(), want.len()));
    }

    #[test]
    fn tables_are_bounded_and_clean() {
        // More callers at once than tables may exist: those without one sort, and every one
        // gets every trigram once.
        let long: Vec<u8> = (0..50_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let want = grams_sorted(&long);
        std::thread::scope(|s| {
            for _ in 0..4 * table_cap() {
                s.spawn(|| {
                    for _ in 0..5 {
                        let mut v = grams(&long);
                        v.sort_unstable();
                        assert_eq!(v, want);
                    }
                });
            }
        });
        // (Other tests may hold tables now: only the free ones are looked at.)
        let t = TABLES.lock();
        assert!(t.1 <= table_cap(), "{} tables made", t.1);
        assert!(t.0.iter().all(|b| b.iter().all(|&w| w == 0)), "a table was returned dirty");
    }

    #[test]
    fn too_many_trigrams_make_a_saturated_entry() {
        assert_eq!(entry_grams(vec![1, 2, 3], 3), [1, 2, 3]);
        assert_eq!(entry_grams(vec![1, 2, 3, 4], 3), [SATURATED]);
        assert!(grams(&(0..=255u8).collect::<Vec<_>>()).iter().all(|&g| g < SATURATED));
    }

    #[test]
    fn plans_of_literals_alternations_and_classes() {
        assert_eq!(
            plan("spin_lock", false, false),
            GramQuery::And(["spi", "pin", "in_", "n_l", "_lo", "loc", "ock"].iter().map(|s| g(s)).collect())
        );
        assert_eq!(plan("ab", false, false), GramQuery::All);
        assert_eq!(plan(".*", false, false), GramQuery::All);
        assert_eq!(plan(r"\w+", false, false), GramQuery::All);
        let q = plan("copy_(to|from)_user", false, false);
        assert!(q.matches(&has(b"x copy_to_user(")));
        assert!(q.matches(&has(b"copy_from_user")));
        assert!(!q.matches(&has(b"copy_user to from")));
        let q = plan(r"EXPORT_SYMBOL_GPL\(\w+\)", false, false);
        assert!(q.matches(&has(b"EXPORT_SYMBOL_GPL(foo)")));
        assert!(!q.matches(&has(b"EXPORT_SYMBOL(foo)")));
        // Case: the index folds, so a case-sensitive pattern asks for folded trigrams too.
        assert_eq!(plan("TODO", false, false), plan("todo", true, false));
        assert!(plan("[ab]cd", false, false).matches(&has(b"xbcd")));
        assert_eq!(plan("a[^b]c", false, false), GramQuery::All);
        assert_eq!(plan("(", false, false), GramQuery::All, "a pattern that does not parse reads everything");
        assert_eq!(plan("a.b(", true, true), plan(r"a\.b\(", true, false));
    }

    /// A regex as a tree, to render and to sample matching text from.
    #[derive(Clone, Debug)]
    enum Re {
        Lit(String),
        Any,
        Class(Vec<char>),
        NotA,
        Word,
        Look(&'static str),
        Concat(Vec<Re>),
        Alt(Vec<Re>),
        Star(Box<Re>),
        Plus(Box<Re>),
        Quest(Box<Re>),
        Rep(Box<Re>),
    }

    impl Re {
        fn render(&self) -> String {
            match self {
                Re::Lit(s) => regex_syntax::escape(s),
                Re::Any => ".".into(),
                Re::Class(cs) => format!("[{}]", cs.iter().collect::<String>()),
                Re::NotA => "[^a]".into(),
                Re::Word => r"\w".into(),
                Re::Look(l) => l.to_string(),
                Re::Concat(v) => v.iter().map(|r| format!("(?:{})", r.render())).collect(),
                Re::Alt(v) => format!("(?:{})", v.iter().map(Re::render).collect::<Vec<_>>().join("|")),
                Re::Star(r) => format!("(?:{})*", r.render()),
                Re::Plus(r) => format!("(?:{})+", r.render()),
                Re::Quest(r) => format!("(?:{})?", r.render()),
                Re::Rep(r) => format!("(?:{}){{2,3}}", r.render()),
            }
        }

        /// A string the regex may match (look-arounds are ignored: the caller checks).
        fn sample(&self, rng: &mut u64, out: &mut String) {
            let mut next = |n: usize| {
                *rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((*rng >> 33) as usize) % n.max(1)
            };
            match self {
                Re::Lit(s) => out.push_str(s),
                Re::Any | Re::NotA => out.push(['b', 'x', ' ', 'é', '_'][next(5)]),
                Re::Class(cs) => out.push(cs[next(cs.len())]),
                Re::Word => out.push(['a', 'Z', '9', '_', 'é'][next(5)]),
                Re::Look(_) => {}
                Re::Concat(v) => v.iter().for_each(|r| r.sample(rng, out)),
                Re::Alt(v) => {
                    let i = next(v.len());
                    v[i].sample(rng, out)
                }
                Re::Star(r) => (0..next(3)).for_each(|_| r.sample(rng, out)),
                Re::Plus(r) => (0..1 + next(3)).for_each(|_| r.sample(rng, out)),
                Re::Quest(r) => {
                    if next(2) == 1 {
                        r.sample(rng, out)
                    }
                }
                Re::Rep(r) => (0..2 + next(2)).for_each(|_| r.sample(rng, out)),
            }
        }
    }

    fn regex_tree() -> impl Strategy<Value = Re> {
        let leaf = prop_oneof![
            4 => "[abcdAB_éK]{1,5}".prop_map(Re::Lit),
            1 => Just(Re::Any),
            1 => prop::collection::vec(prop::sample::select(vec!['a', 'b', 'C', 'é', 'k', '_']), 1..4).prop_map(Re::Class),
            1 => Just(Re::NotA),
            1 => Just(Re::Word),
            1 => prop::sample::select(vec![r"\b", "^", "$", r"\B"]).prop_map(Re::Look),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                3 => prop::collection::vec(inner.clone(), 2..5).prop_map(Re::Concat),
                2 => prop::collection::vec(inner.clone(), 2..4).prop_map(Re::Alt),
                1 => inner.clone().prop_map(|r| Re::Star(Box::new(r))),
                1 => inner.clone().prop_map(|r| Re::Plus(Box::new(r))),
                1 => inner.clone().prop_map(|r| Re::Quest(Box::new(r))),
                1 => inner.clone().prop_map(|r| Re::Rep(Box::new(r))),
            ]
        })
    }

    /// Changes the case of some letters (and writes some k as the Kelvin sign), as a
    /// case-insensitive match may.
    fn recase(s: &str, seed: u64) -> String {
        s.chars()
            .enumerate()
            .map(|(i, c)| match (seed >> (i % 64)) & 3 {
                1 => c.to_ascii_uppercase().to_string(),
                2 => c.to_ascii_lowercase().to_string(),
                3 if c.eq_ignore_ascii_case(&'k') => "\u{212A}".to_string(),
                _ => c.to_string(),
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// The analysis never drops a true match: whenever the regex finds a match in a text,
        /// the text's trigrams satisfy the plan. The text holds a sample of the regex, so most
        /// cases match.
        #[test]
        fn plan_never_drops_a_match(
            re in regex_tree(),
            ic in any::<bool>(),
            seed in any::<u64>(),
            before in "[a-c \n]{0,6}",
            after in "[a-c \n]{0,6}",
        ) {
            let p = re.render();
            let mut rng = seed;
            let mut sample = String::new();
            re.sample(&mut rng, &mut sample);
            if ic {
                sample = recase(&sample, seed);
            }
            let text = format!("{before}{sample}{after}");
            let Ok(m) = regex::bytes::RegexBuilder::new(&p).case_insensitive(ic).build() else {
                return Ok(());
            };
            if m.is_match(text.as_bytes()) {
                let q = plan(&p, ic, false);
                prop_assert!(q.matches(&has(text.as_bytes())), "pattern {p:?} ic {ic} text {text:?} plan {q:?}");
            }
        }

        /// Sorting and the bit table find the same trigrams.
        #[test]
        fn both_ways_find_the_same_grams(text in proptest::collection::vec(any::<u8>(), 0..3000)) {
            let mut bits = vec![0u64; 1 << 18];
            let mut v = grams_table(&text, &mut bits);
            v.sort_unstable();
            prop_assert_eq!(&v, &grams_sorted(&text));
            prop_assert!(bits.iter().all(|&w| w == 0));
            let want: std::collections::BTreeSet<Gram> = text.windows(3).map(gram_of).collect();
            prop_assert_eq!(v, want.into_iter().collect::<Vec<_>>());
        }

        /// The same for fixed strings, against plain substring search.
        #[test]
        fn fixed_plan_never_drops_a_match(p in "[abcAB.(*]{1,6}", text in "[abcAB.(*]{0,30}") {
            if text.contains(&p) {
                prop_assert!(plan(&p, false, true).matches(&has(text.as_bytes())));
            }
        }
    }
}
