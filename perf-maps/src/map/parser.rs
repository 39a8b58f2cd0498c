//! Line parser for both perf-map dialects.
//!
//! - perf's spec, perf-map-agent, CPython: `7f3c2a001000 1a0 py::f:/app/x.py`
//! - the JDK (`jcmd Compiler.perfmap`, `-XX:+DumpPerfMapAtExit`):
//!   `0x00007ff100ec7aa0 0x00000000000000d8 char java.lang.String.charAt(int)`
//!
//! The `0x` prefix is optional per number. Everything after the size (after
//! the separating whitespace) is the name, spaces included. We parse bytes,
//! not `str`, so that a stray non-UTF-8 byte in one name (the names come from
//! arbitrary user code) costs only that name's readability, via a lossy
//! conversion, and not the line.

use super::types::{LineError, ParsedMap, PerfMapEntry};

/// Parses one line (without its newline). Returns entries of size 0 too; the
/// file-level functions drop those and count them.
pub fn parse_line(line: &str) -> Result<PerfMapEntry, LineError> {
    parse_line_bytes(line.as_bytes())
}

/// Parses a whole map held in memory. A final line without a newline is
/// parsed too (a one-shot load of a finished file); the incremental reloader
/// in [`super::reload`] instead holds such a line back until it is complete.
pub fn parse_bytes(data: &[u8]) -> ParsedMap {
    let mut out = ParsedMap::default();
    parse_chunk(data, 1, &mut out);
    out
}

/// Parses every line of `data` into `out`, numbering lines from
/// `first_line_no`. Returns how many lines (blank ones included) were seen,
/// so that a caller parsing a file in chunks can keep line numbers right.
pub(crate) fn parse_chunk(data: &[u8], first_line_no: usize, out: &mut ParsedMap) -> usize {
    let mut line_no = first_line_no;
    let mut seen = 0;
    let mut rest = data;
    while !rest.is_empty() {
        let (line, next) = match memchr_newline(rest) {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &rest[rest.len()..]),
        };
        rest = next;
        seen += 1;
        let this_line = line_no;
        line_no += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        out.stats.lines += 1;
        match parse_line_bytes(line) {
            Ok(e) if e.size == 0 => out.stats.zero_size += 1,
            Ok(e) => {
                out.stats.entries += 1;
                out.entries.push(e);
            }
            Err(_) => out.stats.record_malformed(this_line),
        }
    }
    seen
}

fn memchr_newline(s: &[u8]) -> Option<usize> {
    s.iter().position(|&b| b == b'\n')
}

fn is_sep(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn parse_line_bytes(line: &[u8]) -> Result<PerfMapEntry, LineError> {
    let line = trim_start(line);
    let (start_tok, rest) = split_token(line);
    let start = parse_hex(start_tok).ok_or(LineError::BadStart)?;
    let (size_tok, rest) = split_token(trim_start(rest));
    let size = parse_hex(size_tok).ok_or(LineError::BadSize)?;
    let name = trim_end(trim_start(rest));
    if name.is_empty() {
        return Err(LineError::MissingName);
    }
    start.checked_add(size).ok_or(LineError::Overflow)?;
    let name = match std::str::from_utf8(name) {
        Ok(s) => s.to_owned(),
        Err(_) => String::from_utf8_lossy(name).into_owned(),
    };
    Ok(PerfMapEntry { start, size, name })
}

fn trim_start(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| is_sep(b)).count();
    &s[n..]
}

fn trim_end(s: &[u8]) -> &[u8] {
    let n = s
        .iter()
        .rev()
        .take_while(|b| b.is_ascii_whitespace())
        .count();
    &s[..s.len() - n]
}

fn split_token(s: &[u8]) -> (&[u8], &[u8]) {
    match s.iter().position(|&b| is_sep(b)) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, &s[s.len()..]),
    }
}

/// Hex with an optional `0x`/`0X`. Leading zeros are fine (the JDK pads to
/// 16 digits); a value above `u64::MAX` is rejected rather than wrapped.
fn parse_hex(tok: &[u8]) -> Option<u64> {
    let digits = tok
        .strip_prefix(b"0x")
        .or_else(|| tok.strip_prefix(b"0X"))
        .unwrap_or(tok);
    if digits.is_empty() {
        return None;
    }
    let mut v: u64 = 0;
    for &b in digits {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        v = v.checked_mul(16)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_spec_form() {
        let e = parse_line("7f3c2a001000 1a0 py::compute:/app/job.py").unwrap();
        assert_eq!(e.start, 0x7f3c_2a00_1000);
        assert_eq!(e.size, 0x1a0);
        assert_eq!(e.name, "py::compute:/app/job.py");
    }

    #[test]
    fn jdk_form_with_spaces_in_name() {
        let e = parse_line(
            "0x00007ff100ec7aa0 0x00000000000000d8 java.lang.String java.lang.String.substring(int, int)",
        )
        .unwrap();
        assert_eq!(e.start, 0x7ff1_00ec_7aa0);
        assert_eq!(e.size, 0xd8);
        assert_eq!(
            e.name,
            "java.lang.String java.lang.String.substring(int, int)"
        );
        assert_eq!(e.end(), 0x7ff1_00ec_7aa0 + 0xd8);
    }

    #[test]
    fn mixed_prefixes_tabs_and_crlf() {
        let e = parse_line("0X10\t20  StubRoutines (1)  \r").unwrap();
        assert_eq!((e.start, e.size), (0x10, 0x20));
        assert_eq!(e.name, "StubRoutines (1)");
        let e = parse_line("10 0x20 Interpreter").unwrap();
        assert_eq!((e.start, e.size), (0x10, 0x20));
    }

    #[test]
    fn line_errors() {
        assert_eq!(parse_line("zz 10 f"), Err(LineError::BadStart));
        assert_eq!(parse_line("0x 10 f"), Err(LineError::BadStart));
        assert_eq!(parse_line("10 g f"), Err(LineError::BadSize));
        assert_eq!(parse_line("10 20"), Err(LineError::MissingName));
        assert_eq!(parse_line("10 20   "), Err(LineError::MissingName));
        assert_eq!(parse_line("10"), Err(LineError::BadSize));
        assert_eq!(parse_line("ffffffffffffffff 2 f"), Err(LineError::Overflow));
        assert_eq!(
            parse_line("1ffffffffffffffff 2 f"),
            Err(LineError::BadStart)
        );
    }

    #[test]
    fn file_counts_garbage_and_zero_size() {
        let text = b"1000 10 a\n\
            garbage here\n\
            \n\
            0x2000 0x10 void Foo.bar()\n\
            3000 0 empty\n\
            4000 zz bad size\n\
            5000 10 b c d\n\
            6000 10 unterminated";
        let m = parse_bytes(text);
        let names: Vec<_> = m.entries.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a", "void Foo.bar()", "b c d", "unterminated"]);
        assert_eq!(m.stats.lines, 7);
        assert_eq!(m.stats.entries, 4);
        assert_eq!(m.stats.malformed, 2);
        assert_eq!(m.stats.first_malformed, vec![2, 6]);
        assert_eq!(m.stats.zero_size, 1);
    }

    #[test]
    fn first_malformed_is_bounded() {
        let text = "x\n".repeat(100);
        let m = parse_bytes(text.as_bytes());
        assert_eq!(m.stats.malformed, 100);
        assert_eq!(m.stats.first_malformed, vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn invalid_utf8_name_is_kept_lossily() {
        let m = parse_bytes(b"10 20 caf\xff\n");
        assert_eq!(m.entries.len(), 1);
        assert_eq!(m.entries[0].name, "caf\u{fffd}");
    }
}
