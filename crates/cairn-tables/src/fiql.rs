//! FIQL filters (`name==foo*;(age=gt=30,tags=in=(a,b))`) parsed to an AST and evaluated
//! against JSON records.
//!
//! Grammar: `or := and (',' and)*`, `and := term (';' term)*`, `term := '(' or ')' |
//! selector op args`, `op := '==' | '!=' | '=' letters '='` (`lt le gt ge in out`), `args :=
//! value | '(' value (',' value)* ')'`. A selector is a dotted attribute path. A value is a
//! quoted string (`'...'` or `"..."`, backslash escapes the next character) or a run of
//! characters other than `( ) ; , = ! ' "`, typed against what it is compared with: a number
//! when the record holds a number, `true`/`false`, `null`, otherwise text. `*` in an
//! unquoted `==`/`!=` value matches any run of characters. `;` binds tighter than `,`.

use serde_json::Value;

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `=lt=`
    Lt,
    /// `=le=`
    Le,
    /// `=gt=`
    Gt,
    /// `=ge=`
    Ge,
    /// `=in=`
    In,
    /// `=out=`
    Out,
}

/// One argument of a comparison.
#[derive(Clone, Debug, PartialEq)]
pub struct Arg {
    /// The text as written (quotes removed, escapes applied).
    pub text: String,
    /// Quoted: only ever text.
    pub quoted: bool,
}

impl Arg {
    /// The number this argument reads as, if unquoted and numeric.
    pub fn number(&self) -> Option<f64> {
        if self.quoted {
            return None;
        }
        self.text.parse::<f64>().ok().filter(|n| n.is_finite())
    }

    /// Whether `*` here is a wildcard.
    pub fn has_wildcard(&self) -> bool {
        !self.quoted && self.text.contains('*')
    }

    /// The JSON values this argument can stand for (for index lookups).
    pub fn candidates(&self) -> Vec<Value> {
        let mut v = vec![Value::String(self.text.clone())];
        if !self.quoted {
            if let Some(n) = self.number().and_then(serde_json::Number::from_f64) {
                v.push(Value::Number(n));
            }
            match self.text.as_str() {
                "true" => v.push(Value::Bool(true)),
                "false" => v.push(Value::Bool(false)),
                "null" => v.push(Value::Null),
                _ => {}
            }
        }
        v
    }
}

/// A parsed filter.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// Every child holds.
    And(Vec<Expr>),
    /// Some child holds.
    Or(Vec<Expr>),
    /// `selector op args`.
    Cmp {
        /// Attribute path, split at dots.
        path: Vec<String>,
        /// Operator.
        op: Op,
        /// One argument, or several for `=in=` / `=out=`.
        args: Vec<Arg>,
    },
}

/// A filter that does not parse: what is wrong and the byte offset where.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad filter at byte {pos}: {msg}")]
pub struct ParseError {
    /// Byte offset into the filter text.
    pub pos: usize,
    /// What is wrong.
    pub msg: String,
}

/// Longest filter accepted, and deepest nesting (parsing is recursive).
const MAX_LEN: usize = 64 << 10;
const MAX_DEPTH: usize = 64;

/// Parses a FIQL filter.
pub fn parse(s: &str) -> Result<Expr, ParseError> {
    if s.len() > MAX_LEN {
        return Err(ParseError { pos: MAX_LEN, msg: format!("filter longer than {MAX_LEN} bytes") });
    }
    let mut p = Parser { s: s.as_bytes(), src: s, i: 0, depth: 0 };
    let e = p.or()?;
    if p.i < p.s.len() {
        return Err(p.err(format!("unexpected {:?}", p.s[p.i] as char)));
    }
    Ok(e)
}

struct Parser<'a> {
    s: &'a [u8],
    src: &'a str,
    i: usize,
    depth: usize,
}

fn reserved(c: u8) -> bool {
    matches!(c, b'(' | b')' | b';' | b',' | b'=' | b'!' | b'\'' | b'"')
}

impl Parser<'_> {
    fn err(&self, msg: impl Into<String>) -> ParseError {
        ParseError { pos: self.i, msg: msg.into() }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn or(&mut self) -> Result<Expr, ParseError> {
        let mut v = vec![self.and()?];
        while self.peek() == Some(b',') {
            self.i += 1;
            v.push(self.and()?);
        }
        Ok(if v.len() == 1 { v.pop().expect("one") } else { Expr::Or(v) })
    }

    fn and(&mut self) -> Result<Expr, ParseError> {
        let mut v = vec![self.term()?];
        while self.peek() == Some(b';') {
            self.i += 1;
            v.push(self.term()?);
        }
        Ok(if v.len() == 1 { v.pop().expect("one") } else { Expr::And(v) })
    }

    fn term(&mut self) -> Result<Expr, ParseError> {
        if self.peek() == Some(b'(') {
            self.depth += 1;
            if self.depth > MAX_DEPTH {
                return Err(self.err(format!("nested deeper than {MAX_DEPTH}")));
            }
            self.i += 1;
            let e = self.or()?;
            if self.peek() != Some(b')') {
                return Err(self.err("expected ')'"));
            }
            self.i += 1;
            self.depth -= 1;
            return Ok(e);
        }
        let start = self.i;
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b'$' | b'@') || c >= 0x80 {
                self.i += 1;
            } else {
                break;
            }
        }
        if self.i == start {
            return Err(self.err(match self.peek() {
                None => "expected an attribute name, found the end".to_string(),
                Some(c) => format!("expected an attribute name, found {:?}", c as char),
            }));
        }
        let sel = &self.src[start..self.i];
        let path: Vec<String> = sel.split('.').map(str::to_string).collect();
        if path.iter().any(String::is_empty) {
            return Err(ParseError { pos: start, msg: format!("empty part in attribute path {sel:?}") });
        }
        let op_at = self.i;
        let op = match (self.peek(), self.s.get(self.i + 1).copied()) {
            (Some(b'='), Some(b'=')) => {
                self.i += 2;
                Op::Eq
            }
            (Some(b'!'), Some(b'=')) => {
                self.i += 2;
                Op::Ne
            }
            (Some(b'='), _) => {
                self.i += 1;
                let w = self.i;
                while self.peek().is_some_and(|c| c.is_ascii_alphabetic()) {
                    self.i += 1;
                }
                let word = &self.src[w..self.i];
                if self.peek() != Some(b'=') {
                    return Err(ParseError { pos: op_at, msg: "expected an operator like ==, != or =gt=".into() });
                }
                self.i += 1;
                match word {
                    "lt" => Op::Lt,
                    "le" => Op::Le,
                    "gt" => Op::Gt,
                    "ge" => Op::Ge,
                    "in" => Op::In,
                    "out" => Op::Out,
                    _ => {
                        return Err(ParseError {
                            pos: op_at,
                            msg: format!("unknown operator ={word}= (use == != =lt= =le= =gt= =ge= =in= =out=)"),
                        });
                    }
                }
            }
            _ => return Err(self.err(format!("expected an operator after {sel:?}"))),
        };
        let args = if self.peek() == Some(b'(') {
            self.i += 1;
            let mut v = vec![self.value()?];
            while self.peek() == Some(b',') {
                self.i += 1;
                v.push(self.value()?);
            }
            if self.peek() != Some(b')') {
                return Err(self.err("expected ',' or ')' in the argument list"));
            }
            self.i += 1;
            v
        } else {
            vec![self.value()?]
        };
        if args.len() > 1 && !matches!(op, Op::In | Op::Out) {
            return Err(ParseError { pos: op_at, msg: "only =in= and =out= take a list".into() });
        }
        Ok(Expr::Cmp { path, op, args })
    }

    fn value(&mut self) -> Result<Arg, ParseError> {
        match self.peek() {
            Some(q @ (b'\'' | b'"')) => {
                let open = self.i;
                self.i += 1;
                let mut out = Vec::new();
                loop {
                    match self.peek() {
                        None => return Err(ParseError { pos: open, msg: "unterminated quoted value".into() }),
                        Some(b'\\') => {
                            self.i += 1;
                            match self.peek() {
                                Some(c) => out.push(c),
                                None => return Err(self.err("backslash at the end")),
                            }
                            self.i += 1;
                        }
                        Some(c) if c == q => {
                            self.i += 1;
                            break;
                        }
                        Some(c) => {
                            out.push(c);
                            self.i += 1;
                        }
                    }
                }
                let text = String::from_utf8(out).map_err(|_| ParseError { pos: open, msg: "invalid UTF-8".into() })?;
                Ok(Arg { text, quoted: true })
            }
            _ => {
                let start = self.i;
                while self.peek().is_some_and(|c| !reserved(c)) {
                    self.i += 1;
                }
                if self.i == start {
                    return Err(self.err("expected a value"));
                }
                Ok(Arg { text: self.src[start..self.i].to_string(), quoted: false })
            }
        }
    }
}

/// The values at `path` in `v` (an array along the way fans out to its elements; an array at
/// the end yields each element).
pub fn lookup<'a>(v: &'a Value, path: &[String], out: &mut Vec<&'a Value>) {
    match path.split_first() {
        None => match v {
            Value::Array(items) => out.extend(items.iter()),
            v => out.push(v),
        },
        Some((head, rest)) => match v {
            Value::Object(m) => {
                if let Some(c) = m.get(head) {
                    lookup(c, rest, out);
                }
            }
            Value::Array(items) => {
                for c in items {
                    lookup(c, path, out);
                }
            }
            _ => {}
        },
    }
}

/// Orders `v` against the argument when they are comparable (same kind of value).
pub fn compare(v: &Value, a: &Arg) -> Option<std::cmp::Ordering> {
    match v {
        Value::Number(n) => Some(n.as_f64()?.total_cmp(&a.number()?)),
        Value::String(s) => Some(s.as_str().cmp(a.text.as_str())),
        Value::Bool(b) => bool_order(*b, a),
        Value::Null => null_order(a),
        _ => None,
    }
}

fn bool_order(b: bool, a: &Arg) -> Option<std::cmp::Ordering> {
    match (a.quoted, a.text.as_str()) {
        (false, "true") => Some(b.cmp(&true)),
        (false, "false") => Some(b.cmp(&false)),
        _ => None,
    }
}

fn null_order(a: &Arg) -> Option<std::cmp::Ordering> {
    (!a.quoted && a.text == "null").then_some(std::cmp::Ordering::Equal)
}

/// Whether `v` equals the argument (with wildcards for unquoted text).
pub fn equals(v: &Value, a: &Arg) -> bool {
    if let (Value::String(s), true) = (v, a.has_wildcard()) {
        return wildcard(s, &a.text);
    }
    compare(v, a) == Some(std::cmp::Ordering::Equal)
}

/// `*` matches any run of characters.
fn wildcard(s: &str, pat: &str) -> bool {
    let parts: Vec<&str> = pat.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !s.starts_with(first) {
        return false;
    }
    let mut rest = &s[first.len()..];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

impl Expr {
    /// The top-level attributes the filter reads (sorted, without duplicates): a record
    /// holding only these matches exactly when the whole record does.
    pub fn roots(&self) -> Vec<String> {
        fn walk(e: &Expr, out: &mut Vec<String>) {
            match e {
                Expr::And(v) | Expr::Or(v) => v.iter().for_each(|e| walk(e, out)),
                Expr::Cmp { path, .. } => out.push(path[0].clone()),
            }
        }
        let mut out = Vec::new();
        walk(self, &mut out);
        out.sort();
        out.dedup();
        out
    }

    /// Whether the record matches.
    pub fn matches(&self, rec: &Value) -> bool {
        match self {
            Expr::And(v) => v.iter().all(|e| e.matches(rec)),
            Expr::Or(v) => v.iter().any(|e| e.matches(rec)),
            Expr::Cmp { path, op, args } => {
                let mut vals = Vec::new();
                lookup(rec, path, &mut vals);
                holds(*op, args, &vals)
            }
        }
    }

    /// Whether a record matches, given its top-level attributes by name (at least
    /// [`Expr::roots`]): answers as [`Expr::matches`] on the record built from them.
    pub fn matches_attrs<'a>(&self, attr: &impl Fn(&str) -> &'a Attr<'a>) -> bool {
        match self {
            Expr::And(v) => v.iter().all(|e| e.matches_attrs(attr)),
            Expr::Or(v) => v.iter().any(|e| e.matches_attrs(attr)),
            Expr::Cmp { path, op, args } => match attr(&path[0]) {
                Attr::Absent => holds::<&Value>(*op, args, &[]),
                Attr::Scalar(s) if path.len() == 1 => holds(*op, args, &[*s]),
                Attr::Scalar(_) => holds::<&Value>(*op, args, &[]),
                Attr::Value(v) => {
                    let mut vals = Vec::new();
                    lookup(v, &path[1..], &mut vals);
                    holds(*op, args, &vals)
                }
            },
        }
    }
}

/// A top-level attribute of a record for [`Expr::matches_attrs`].
#[derive(Clone, Debug)]
pub enum Attr<'a> {
    /// Not in the record.
    Absent,
    /// A number, text without escapes, `true`, `false` or `null`, read in place.
    Scalar(Scalar<'a>),
    /// Anything else, built.
    Value(Value),
}

/// A scalar attribute read from a record's text without building a [`Value`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar<'a> {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, as [`serde_json::Number::as_f64`] reads it.
    Number(f64),
    /// Text.
    Str(&'a str),
}

/// What a comparison can be made on: a built value or a scalar read in place (the same rules).
trait Operand {
    fn order(&self, a: &Arg) -> Option<std::cmp::Ordering>;
    fn equals(&self, a: &Arg) -> bool;
}

impl Operand for &Value {
    fn order(&self, a: &Arg) -> Option<std::cmp::Ordering> {
        compare(self, a)
    }
    fn equals(&self, a: &Arg) -> bool {
        equals(self, a)
    }
}

impl Operand for Scalar<'_> {
    fn order(&self, a: &Arg) -> Option<std::cmp::Ordering> {
        match *self {
            Scalar::Number(n) => Some(n.total_cmp(&a.number()?)),
            Scalar::Str(s) => Some(s.cmp(a.text.as_str())),
            Scalar::Bool(b) => bool_order(b, a),
            Scalar::Null => null_order(a),
        }
    }
    fn equals(&self, a: &Arg) -> bool {
        match self {
            Scalar::Str(s) if a.has_wildcard() => wildcard(s, &a.text),
            _ => self.order(a) == Some(std::cmp::Ordering::Equal),
        }
    }
}

/// Whether `op` with `args` holds for some of `vals` (none of them, for `!=` and `=out=`).
fn holds<T: Operand>(op: Op, args: &[Arg], vals: &[T]) -> bool {
    use std::cmp::Ordering::*;
    let any = |f: &dyn Fn(&T) -> bool| vals.iter().any(f);
    match op {
        Op::Eq => any(&|v| v.equals(&args[0])),
        Op::Ne => !any(&|v| v.equals(&args[0])),
        Op::In => any(&|v| args.iter().any(|a| v.equals(a))),
        Op::Out => !any(&|v| args.iter().any(|a| v.equals(a))),
        Op::Lt => any(&|v| v.order(&args[0]) == Some(Less)),
        Op::Le => any(&|v| matches!(v.order(&args[0]), Some(Less | Equal))),
        Op::Gt => any(&|v| v.order(&args[0]) == Some(Greater)),
        Op::Ge => any(&|v| matches!(v.order(&args[0]), Some(Greater | Equal))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn m(f: &str, v: Value) -> bool {
        parse(f).unwrap().matches(&v)
    }

    #[test]
    fn operators_types_and_nesting() {
        let r = json!({"name": "Ada Lovelace", "age": 36, "tags": ["math", "poet"], "addr": {"city": "London"}, "alive": false, "x": null});
        assert!(m("name==Ada*", r.clone()));
        assert!(m("name==*Love*", r.clone()));
        assert!(!m("name==Ada", r.clone()));
        assert!(m("name=='Ada Lovelace'", r.clone()));
        assert!(!m("name=='Ada*'", r.clone()), "quoted: no wildcard");
        assert!(m("age=gt=30;age=le=36", r.clone()));
        assert!(!m("age=lt=36", r.clone()));
        assert!(m("age==36.0", r.clone()));
        assert!(!m("age=='36'", r.clone()), "quoted 36 is text, the record holds a number");
        assert!(m("tags==poet", r.clone()), "arrays match any element");
        assert!(m("tags=in=(x,math)", r.clone()));
        assert!(m("tags=out=(x,y)", r.clone()));
        assert!(!m("tags!=poet", r.clone()));
        assert!(m("addr.city==London", r.clone()));
        assert!(m("alive==false;x==null", r.clone()));
        assert!(m("missing!=1", r.clone()), "absent attribute: != holds");
        assert!(!m("missing==1", r.clone()));
        assert!(m("age=lt=10,(name==Ada*;addr.city==Paris),tags==math", r.clone()));
        assert!(!m("age=lt=10,(name==Ada*;addr.city==Paris)", r.clone()));
        // ';' binds tighter than ','.
        assert_eq!(
            parse("a==1,b==2;c==3").unwrap(),
            Expr::Or(vec![parse("a==1").unwrap(), Expr::And(vec![parse("b==2").unwrap(), parse("c==3").unwrap()])])
        );
    }

    #[test]
    fn errors_point_at_the_offending_byte() {
        let cases = [
            ("", 0, "attribute"),
            ("age", 3, "operator"),
            ("age=foo=3", 3, "unknown operator"),
            ("age==", 5, "value"),
            ("(age==1", 7, "')'"),
            ("age==1;", 7, "attribute"),
            ("age==1)", 6, "unexpected"),
            ("name=='abc", 6, "unterminated"),
            ("a..b==1", 0, "empty part"),
            ("age==(1,2)", 3, "only =in="),
            ("age=in=(1,2", 11, "')'"),
        ];
        for (f, pos, msg) in cases {
            let e = parse(f).unwrap_err();
            assert_eq!(e.pos, pos, "{f}: {e}");
            assert!(e.msg.contains(msg), "{f}: {e}");
        }
        let deep = "(".repeat(100) + "a==1" + &")".repeat(100);
        assert!(parse(&deep).unwrap_err().msg.contains("nested"));
    }

    #[test]
    fn wildcards() {
        assert!(wildcard("abc", "*"));
        assert!(wildcard("abc", "a*c"));
        assert!(wildcard("abc", "*b*"));
        assert!(!wildcard("abc", "*d*"));
        assert!(!wildcard("ab", "ab*b"));
        assert!(wildcard("abab", "ab*b"));
    }

    proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,40}") {
            if let Ok(e) = parse(&s) {
                e.matches(&json!({"a": 1, "b": "x", "c": [1, "y"]}));
            }
        }

        #[test]
        fn fiql_shaped_input_never_panics(s in "[a-c.()=!;,'*0-9 ltgeinou]{0,30}") {
            let _ = parse(&s);
        }
    }
}
