//! A minimal RLP writer and the hex readers behind it.
//!
//! Only what re-encoding a transaction from its JSON needs: byte strings
//! of any length, lists (nested ones get their header once their payload
//! is written), and integers written straight from their `0x` hex digits
//! as minimal big-endian bytes of any length. No 256-bit cap: geth reads
//! the legacy, EIP-2930 and EIP-1559 quantities as `big.Int`s, so a value
//! wider than 256 bits is a transaction it hashes, and so must we.
//!
//! Encoding rules (the Ethereum yellow paper, appendix B):
//! - one byte below `0x80` is itself;
//! - a string of 0–55 bytes is `0x80 + len` then the bytes;
//! - a longer string is `0xb7 + len(len)`, `len` big-endian, the bytes;
//! - a list is the same with `0xc0` and `0xf7`, over its items' encodings;
//! - an integer is the string of its minimal big-endian bytes (zero is
//!   the empty string, `0x80`).

use std::ops::Range;

/// Why some text is not the hex it should be. The caller turns it into
/// [`super::Invalid::Malformed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BadHex;

/// An RLP encoding being written, reused from one transaction to the next.
#[derive(Debug, Default)]
pub(super) struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// Empties the buffer, keeping its allocation.
    pub(super) fn clear(&mut self) {
        self.buf.clear();
    }

    /// What has been written.
    pub(super) fn as_slice(&self) -> &[u8] {
        &self.buf
    }

    /// A byte string.
    pub(super) fn bytes(&mut self, bytes: &[u8]) {
        if let [single] = bytes
            && *single < 0x80
        {
            self.buf.push(*single);
            return;
        }
        header(&mut self.buf, 0x80, bytes.len());
        self.buf.extend_from_slice(bytes);
    }

    /// A string header for `len` bytes the caller appends itself.
    fn string_header(&mut self, len: usize) {
        header(&mut self.buf, 0x80, len);
    }

    /// An integer given as a JSON quantity (`0x` then hex digits without
    /// leading zeros, `"0x0"` for zero), of any width. Returns where its
    /// minimal big-endian bytes sit in [`Writer::as_slice`] (empty for
    /// zero), for callers that also need the number itself.
    pub(super) fn quantity(&mut self, text: &str) -> Result<Range<usize>, BadHex> {
        let digits = quantity_digits(text)?;
        if digits == b"0" {
            self.buf.push(0x80);
            let at = self.buf.len();
            return Ok(at..at);
        }
        let len = digits.len().div_ceil(2);
        if len == 1 {
            let byte = odd_nibbles(digits)?;
            if byte >= 0x80 {
                self.buf.push(0x81);
            }
            let at = self.buf.len();
            self.buf.push(byte);
            return Ok(at..at + 1);
        }
        self.string_header(len);
        let at = self.buf.len();
        append_quantity(&mut self.buf, digits)?;
        Ok(at..at + len)
    }

    /// Opens a list: its items follow, then [`Writer::end_list`] with the
    /// returned mark puts the header in front of them.
    pub(super) fn begin_list(&mut self) -> usize {
        self.buf.len()
    }

    /// Closes the list opened at `mark`, moving its payload behind the
    /// header (a few bytes' shift; the outermost list is not closed this
    /// way but hashed behind [`list_header`]).
    pub(super) fn end_list(&mut self, mark: usize) {
        let (head, n) = list_header(self.buf.len() - mark);
        self.buf.extend_from_slice(&head[..n]);
        self.buf[mark..].rotate_right(n);
    }
}

/// The header of a list whose payload is `len` bytes, and how many of
/// the nine bytes it takes.
pub(super) fn list_header(len: usize) -> ([u8; 9], usize) {
    header_bytes(0xc0, len)
}

/// `offset + len` for short payloads, `offset + 55 + len(len)` then `len`
/// big-endian for long ones (`offset` is `0x80` for strings, `0xc0` for
/// lists).
fn header_bytes(offset: u8, len: usize) -> ([u8; 9], usize) {
    let mut out = [0u8; 9];
    if len <= 55 {
        out[0] = offset + len as u8;
        return (out, 1);
    }
    let be = (len as u64).to_be_bytes();
    let size = 8 - be.iter().take_while(|b| **b == 0).count();
    out[0] = offset + 55 + size as u8;
    out[1..=size].copy_from_slice(&be[8 - size..]);
    (out, size + 1)
}

fn header(buf: &mut Vec<u8>, offset: u8, len: usize) {
    let (head, n) = header_bytes(offset, len);
    buf.extend_from_slice(&head[..n]);
}

/// The digits of a quantity: `0x`, then at least one hex digit, no leading
/// zero unless the number is zero (`hexutil.Big` refuses both, and so does
/// every geth quantity type).
fn quantity_digits(text: &str) -> Result<&[u8], BadHex> {
    let digits = text.strip_prefix("0x").ok_or(BadHex)?.as_bytes();
    match digits {
        [] => Err(BadHex),
        [b'0', _, ..] => Err(BadHex),
        _ => Ok(digits),
    }
}

/// A quantity that fits 64 bits.
pub(super) fn uint64(text: &str) -> Result<u64, BadHex> {
    let digits = quantity_digits(text)?;
    if digits.len() > 16 {
        return Err(BadHex);
    }
    digits
        .iter()
        .try_fold(0u64, |acc, d| Ok((acc << 4) | u64::from(nibble(*d)?)))
}

/// Checks that `text` is a quantity of any width.
pub(super) fn uint_check(text: &str) -> Result<(), BadHex> {
    quantity_digits(text)?
        .iter()
        .try_for_each(|d| nibble(*d).map(drop))
}

/// Appends the bytes of non-zero digits (an odd count starts with a lone
/// nibble).
fn append_quantity(out: &mut Vec<u8>, digits: &[u8]) -> Result<(), BadHex> {
    let (head, rest) = digits.split_at(digits.len() % 2);
    if !head.is_empty() {
        out.push(odd_nibbles(head)?);
    }
    let at = out.len();
    out.resize(at + rest.len() / 2, 0);
    decode_even(rest, &mut out[at..])
}

/// One or two digits as a byte.
fn odd_nibbles(digits: &[u8]) -> Result<u8, BadHex> {
    digits
        .iter()
        .try_fold(0u8, |acc, d| Ok((acc << 4) | nibble(*d)?))
}

fn nibble(digit: u8) -> Result<u8, BadHex> {
    match digit {
        b'0'..=b'9' => Ok(digit - b'0'),
        b'a'..=b'f' => Ok(digit - b'a' + 10),
        b'A'..=b'F' => Ok(digit - b'A' + 10),
        _ => Err(BadHex),
    }
}

/// Exactly `2 * out.len()` hex digits into `out`. A second `0x` among the
/// digits fails (const-hex would strip one, the lengths then differ).
fn decode_even(digits: &[u8], out: &mut [u8]) -> Result<(), BadHex> {
    if digits.len() != out.len() * 2 {
        return Err(BadHex);
    }
    alloy_primitives::hex::decode_to_slice(digits, out).map_err(|_| BadHex)
}

/// `0x` then exactly `2 * N` hex digits (any case): an address or a hash.
pub(super) fn fixed<const N: usize>(text: &str) -> Result<[u8; N], BadHex> {
    let digits = text.strip_prefix("0x").ok_or(BadHex)?.as_bytes();
    let mut out = [0u8; N];
    decode_even(digits, &mut out)?;
    Ok(out)
}

/// `0x` then an even number of hex digits (`"0x"` is empty), as bytes.
pub(super) fn data(text: &str) -> Result<Vec<u8>, BadHex> {
    let digits = text.strip_prefix("0x").ok_or(BadHex)?;
    // const-hex would strip a second `0x`.
    if digits.starts_with("0x") {
        return Err(BadHex);
    }
    // Odd lengths and non-hex digits are refused by the decoder, which
    // writes into the allocation without zeroing it first.
    alloy_primitives::hex::decode(digits).map_err(|_| BadHex)
}
