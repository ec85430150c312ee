//! A JSON reader for the hook's body, written for its one shape.
//!
//! It reads the body in one pass without building a value: the strings
//! are borrowed (copied only when they hold escapes), a transaction's keys
//! are told apart by their bytes, and what the body holds beside them
//! (unknown keys, other top-level keys) is checked as JSON and skipped.
//! It replaced serde_json's typed reading, which cost about an eighth
//! more of the hook's CPU per transaction at 100 a request
//! (PERFORMANCE.md, issue 39).
//!
//! It accepts only JSON (RFC 8259): any whitespace between tokens, any
//! escape in a string (`\u` and four hex digits, surrogate pairs included), no raw control
//! character in a string, numbers in JSON's grammar (of any size: they are
//! only skipped), nothing but whitespace after the body. It is stricter
//! than serde_json's own skipping of unknown values in two ways, neither of
//! which proxyd or geth can produce: a lone surrogate escape is refused in
//! every string (serde_json refuses it only in the strings it reads), and
//! nesting stops at [`MAX_DEPTH`] containers everywhere. Access-list entries
//! and authorizations must be objects (serde's derive also took arrays).
//! The input is `&str`: its UTF-8 was checked once by the caller.

use std::borrow::Cow;

/// Containers open at once at most, as serde_json allows (its recursion
/// limit of 128 refuses the 128th).
pub(super) const MAX_DEPTH: usize = 127;

/// Why the reader stopped: the body is not JSON, or not the shape asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Bad;

/// A cursor over the body.
pub(super) struct Scanner<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Scanner<'a> {
    pub(super) fn new(text: &'a str) -> Self {
        Scanner { text, at: 0 }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte that is not whitespace, not consumed.
    pub(super) fn peek(&mut self) -> Option<u8> {
        let bytes = self.bytes();
        while let Some(&b) = bytes.get(self.at) {
            match b {
                b' ' | b'\n' | b'\r' | b'\t' => self.at += 1,
                _ => return Some(b),
            }
        }
        None
    }

    /// Consumes `byte`, after whitespace.
    pub(super) fn expect(&mut self, byte: u8) -> Result<(), Bad> {
        match self.peek() {
            Some(b) if b == byte => {
                self.at += 1;
                Ok(())
            }
            _ => Err(Bad),
        }
    }

    /// Only whitespace is left.
    pub(super) fn end(&mut self) -> Result<(), Bad> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(Bad),
        }
    }

    /// `null`, consumed if next (after whitespace).
    pub(super) fn null(&mut self) -> Result<bool, Bad> {
        if self.peek() != Some(b'n') {
            return Ok(false);
        }
        self.literal("null")?;
        Ok(true)
    }

    fn literal(&mut self, word: &str) -> Result<(), Bad> {
        if self.bytes()[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(())
        } else {
            Err(Bad)
        }
    }

    /// Opens an object or array (`open` is `{` or `[`) and tells, for
    /// each member, whether one follows: `first` is true for the first
    /// call after the opening. Consumes the comma between members and the
    /// closing bracket.
    pub(super) fn next_member(&mut self, close: u8, first: &mut bool) -> Result<bool, Bad> {
        let b = self.peek().ok_or(Bad)?;
        if b == close {
            self.at += 1;
            return Ok(false);
        }
        if *first {
            *first = false;
        } else if b == b',' {
            self.at += 1;
        } else {
            return Err(Bad);
        }
        Ok(true)
    }

    /// An object's key and its colon.
    pub(super) fn key(&mut self) -> Result<Cow<'a, str>, Bad> {
        let key = self.string()?;
        self.expect(b':')?;
        Ok(key)
    }

    /// A string (after whitespace), borrowed unless it holds escapes.
    pub(super) fn string(&mut self) -> Result<Cow<'a, str>, Bad> {
        self.expect(b'"')?;
        let bytes = self.bytes();
        let start = self.at;
        let mut i = plain_run(bytes, start);
        loop {
            match bytes.get(i) {
                Some(b'"') => {
                    self.at = i + 1;
                    return Ok(Cow::Borrowed(&self.text[start..i]));
                }
                Some(b'\\') => break,
                Some(0..0x20) | None => return Err(Bad),
                Some(_) => i += 1,
            }
        }
        // Escapes: decode from here on into an owned copy.
        let mut out = String::with_capacity(i - start + 16);
        out.push_str(&self.text[start..i]);
        let mut plain = i;
        loop {
            match bytes.get(i) {
                Some(b'"') => {
                    out.push_str(&self.text[plain..i]);
                    self.at = i + 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    out.push_str(&self.text[plain..i]);
                    i = escape(bytes, i + 1, &mut out)?;
                    plain = i;
                }
                Some(0..0x20) | None => return Err(Bad),
                Some(_) => i += 1,
            }
        }
    }

    /// Checks and skips one value of any kind at the top.
    #[cfg(test)]
    fn skip(&mut self) -> Result<(), Bad> {
        self.skip_at(0)
    }

    /// Checks and skips one value of any kind, found `depth` containers
    /// deep.
    pub(super) fn skip_at(&mut self, depth: usize) -> Result<(), Bad> {
        match self.peek().ok_or(Bad)? {
            b'"' => self.string().map(drop),
            b'{' | b'[' if depth >= MAX_DEPTH => Err(Bad),
            b'{' => {
                self.at += 1;
                let mut first = true;
                while self.next_member(b'}', &mut first)? {
                    self.key()?;
                    self.skip_at(depth + 1)?;
                }
                Ok(())
            }
            b'[' => {
                self.at += 1;
                let mut first = true;
                while self.next_member(b']', &mut first)? {
                    self.skip_at(depth + 1)?;
                }
                Ok(())
            }
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => Err(Bad),
        }
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Result<(), Bad> {
        let bytes = self.bytes();
        let mut i = self.at;
        if bytes.get(i) == Some(&b'-') {
            i += 1;
        }
        match bytes.get(i) {
            Some(b'0') => i += 1,
            Some(b'1'..=b'9') => i = digits(bytes, i),
            _ => return Err(Bad),
        }
        if bytes.get(i) == Some(&b'.') {
            let end = digits(bytes, i + 1);
            if end == i + 1 {
                return Err(Bad);
            }
            i = end;
        }
        if matches!(bytes.get(i), Some(b'e' | b'E')) {
            i += 1;
            if matches!(bytes.get(i), Some(b'+' | b'-')) {
                i += 1;
            }
            let end = digits(bytes, i);
            if end == i {
                return Err(Bad);
            }
            i = end;
        }
        self.at = i;
        Ok(())
    }
}

/// How far from `i` a string surely holds its bytes as they are: to the
/// first `"`, `\\` or control character, or to the last 8 bytes of the
/// input, from where the caller goes on a byte at a time. Eight bytes at
/// a time: the strings are mostly hex, and a byte at a time was a quarter
/// of the parse.
fn plain_run(bytes: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // A byte of `x` is zero (the lowest such byte is flagged exactly:
    // a borrow only ever flags bytes above it).
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word);
        let special = zero(word ^ (ONES * u64::from(b'"')))
            | zero(word ^ (ONES * u64::from(b'\\')))
            | (word.wrapping_sub(ONES * 0x20) & !word & HIGH);
        if special != 0 {
            return i + (special.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i
}

/// Where the run of ASCII digits from `i` ends.
fn digits(bytes: &[u8], mut i: usize) -> usize {
    while bytes.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
}

/// Decodes the escape after a backslash at `i` into `out`; returns where
/// the string goes on.
fn escape(bytes: &[u8], i: usize, out: &mut String) -> Result<usize, Bad> {
    let simple = match bytes.get(i).ok_or(Bad)? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let unit = hex4(bytes, i + 1)?;
            let (code, next) = match unit {
                0xd800..=0xdbff => {
                    // A high surrogate must be followed by `\u` and a low one.
                    if bytes.get(i + 5) != Some(&b'\\') || bytes.get(i + 6) != Some(&b'u') {
                        return Err(Bad);
                    }
                    let low = hex4(bytes, i + 7)?;
                    if !(0xdc00..=0xdfff).contains(&low) {
                        return Err(Bad);
                    }
                    (0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00), i + 11)
                }
                0xdc00..=0xdfff => return Err(Bad),
                _ => (unit, i + 5),
            };
            out.push(char::from_u32(code).ok_or(Bad)?);
            return Ok(next);
        }
        _ => return Err(Bad),
    };
    out.push(simple);
    Ok(i + 1)
}

/// Four hex digits at `i`.
fn hex4(bytes: &[u8], i: usize) -> Result<u32, Bad> {
    let digits = bytes.get(i..i + 4).ok_or(Bad)?;
    digits.iter().try_fold(0u32, |acc, &d| {
        let v = (d as char).to_digit(16).ok_or(Bad)?;
        Ok((acc << 4) | v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the scanner takes `text` as one JSON value and nothing
    /// else.
    fn skips(text: &str) -> bool {
        let mut s = Scanner::new(text);
        s.skip().and_then(|()| s.end()).is_ok()
    }

    /// The reader agrees with serde_json on what is JSON (read as a value:
    /// a lone surrogate is refused everywhere, as serde_json refuses it in
    /// every string it reads).
    #[test]
    fn skipping_accepts_what_serde_json_accepts() {
        let cases = [
            "0",
            "-0",
            "1",
            "-12",
            "1.5",
            "1e5",
            "1E+5",
            "1e-5",
            "-0.0e0",
            "01",
            "1.",
            ".5",
            "-",
            "+1",
            "1e",
            "1e+",
            "0x1",
            "true",
            "false",
            "null",
            "tru",
            "nul",
            "True",
            "\"\"",
            "\"a\"",
            "\"\\\"\"",
            "\"\\u0041\"",
            "\"\\ud83d\\ude00\"",
            "\"\\ud83d\"",
            "\"\\ude00\"",
            "\"\\ud83d\\u0041\"",
            "\"\\x\"",
            "\"\\u12\"",
            "\"\u{1}\"",
            "\"a",
            "[]",
            "[1,2]",
            "[1,]",
            "[,1]",
            "[1 2]",
            "{}",
            "{\"a\":1}",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{a:1}",
            "{\"a\":}",
            " [ 1 , { \"b\" : [ null ] } ] ",
            "[1]]",
            "",
            "  ",
            "\t\n\r[\r\n]\t",
            "[\"\\/\\b\\f\\n\\r\\t\"]",
            "1 2",
            "{\"a\":1}{",
        ];
        for case in cases {
            let serde = serde_json::from_str::<serde_json::Value>(case).is_ok();
            assert_eq!(skips(case), serde, "{case:?}");
        }
    }

    #[test]
    fn nesting_is_bounded_as_serde_json_bounds_it() {
        for depth in [126, 127, 128, 129, 5000] {
            let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let serde = serde_json::from_str::<serde_json::Value>(&text).is_ok();
            assert_eq!(skips(&text), serde, "depth {depth}");
        }
    }

    /// The word-at-a-time search finds the first special byte wherever
    /// it is, after any byte (high ones included).
    #[test]
    fn the_plain_run_ends_at_the_first_special_byte() {
        for len in 0..24 {
            for special in [b'"', b'\\', 0x00, 0x1f] {
                for filler in [b'a', b'0', 0x20, 0x7f, 0x80, 0xff, b'"' + 1, b'\\' - 1] {
                    let mut bytes = vec![filler; len];
                    bytes.push(special);
                    bytes.extend_from_slice(&[b'"'; 9]);
                    assert_eq!(plain_run(&bytes, 0), len, "{len} {special} {filler}");
                }
            }
            let end = plain_run(&vec![b'x'; len], 0);
            assert!(end <= len && end + 8 > len, "{len}: {end}");
        }
    }

    #[test]
    fn strings_are_borrowed_unless_escaped() {
        let mut s = Scanner::new(r#""0xabc" "a\"b\u00e9c""#);
        assert!(matches!(s.string(), Ok(Cow::Borrowed("0xabc"))));
        match s.string() {
            Ok(Cow::Owned(text)) => assert_eq!(text, "a\"béc"),
            other => panic!("{other:?}"),
        }
    }
}
