//! Keeping a symbol table in step with a perf map that changes under us.
//!
//! Two writers behave very differently:
//! - perf-map-agent and CPython's trampolines *append* lines as code is
//!   compiled: re-parsing the whole file every time would be quadratic over
//!   a process's life, so we remember how far we read and parse only the new
//!   bytes.
//! - `jcmd Compiler.perfmap` *rewrites* the file (`fopen(..., "w")`: same
//!   inode, truncated, written again), and a map can also be replaced by a
//!   new file (new inode). Then the old contents are void and we reparse.
//!
//! Deciding which happened, from a cheap `lstat` first and the `fstat` of the
//! opened file after:
//! - same dev/inode/size/mtime: unchanged, no work (not even an open);
//! - different inode: replaced → reparse;
//! - same inode, smaller: truncated/rewritten → reparse;
//! - same inode, same size, different mtime: rewritten in place → reparse;
//! - same inode, larger: appended, *if* the bytes just before where we
//!   stopped are still the ones we read (a remembered tail of up to 64
//!   bytes). An in-place rewrite that ends up longer than before, as
//!   `Compiler.perfmap` does when more code was compiled, fails this check
//!   and is reparsed instead of being misread as an append.
//!
//! A last line without its newline is a write in progress: it is left
//! unparsed (we stop reading before it) and picked up once complete.
//!
//! Limitation: a same-size rewrite within one mtime tick (a few ms on most
//! file systems) looks unchanged. Runtimes don't rewrite maps that often.

use std::borrow::Cow;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::names::NameStyle;
use super::parser::{parse_bytes, parse_chunk};
use super::resolver::SymbolTable;
use super::types::{ParseStats, ParsedMap, PerfMapEntry, Symbol};
use crate::discovery::{self, DiscoveryError};
use crate::trust::{FileStamp, Refused, TrustPolicy, TrustedFile, open_trusted};

/// How many bytes before the read offset are remembered to recognise an
/// append (see module docs).
const TAIL_LEN: usize = 64;

/// Errors loading a map.
#[derive(Debug, thiserror::Error)]
pub enum MapError {
    /// The file failed a trust check or could not be opened.
    #[error(transparent)]
    Refused(#[from] Refused),
    /// The process could not be looked up.
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    /// Reading the opened file failed.
    #[error("reading {path}: {source}")]
    Io {
        /// The map.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

/// What a [`PerfMapFile::refresh`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// Nothing changed since the last refresh.
    Unchanged,
    /// The whole file was (re)parsed: first load, or it was rewritten.
    Loaded {
        /// Entries parsed.
        entries: usize,
    },
    /// Only appended lines were parsed and merged (they win over older ones).
    Appended {
        /// New entries parsed.
        entries: usize,
    },
}

#[derive(Debug, Clone)]
struct Tracked {
    stamp: FileStamp,
    /// Bytes consumed: just past the last complete line.
    offset: u64,
    /// Line number of the line starting at `offset` (1-based).
    next_line: usize,
    /// Up to TAIL_LEN bytes ending at `offset`.
    tail: Vec<u8>,
}

/// A perf map file followed over time: call [`refresh`](Self::refresh)
/// whenever fresh names are wanted (e.g. before symbolizing a batch of
/// samples); it does the least work the change allows.
#[derive(Debug)]
pub struct PerfMapFile {
    path: PathBuf,
    policy: TrustPolicy,
    style: NameStyle,
    tracked: Option<Tracked>,
    table: SymbolTable,
    stats: ParseStats,
}

impl PerfMapFile {
    /// Follows the map at `path`, trusted per `policy`. No I/O happens until
    /// the first refresh.
    pub fn new(path: impl Into<PathBuf>, policy: TrustPolicy) -> Self {
        PerfMapFile {
            path: path.into(),
            policy,
            style: NameStyle::default(),
            tracked: None,
            table: SymbolTable::new(),
            stats: ParseStats::default(),
        }
    }

    /// Follows process `pid`'s map (`/proc/PID/root/tmp/perf-<nspid>.map`),
    /// which must belong to the process owner or root.
    pub fn for_pid(pid: u32) -> Result<Self, MapError> {
        let loc = discovery::locate(pid)?;
        Ok(Self::new(loc.path, TrustPolicy::for_uid(loc.owner.uid)))
    }

    /// Chooses how names are stored (readable by default). Takes effect at the
    /// next full load, so set it before the first refresh.
    pub fn with_name_style(mut self, style: NameStyle) -> Self {
        self.style = style;
        self
    }

    /// The path followed.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current table.
    pub fn table(&self) -> &SymbolTable {
        &self.table
    }

    /// Looks `addr` up in the current table.
    pub fn lookup(&self, addr: u64) -> Option<Symbol<'_>> {
        self.table.lookup(addr)
    }

    /// Parse counters since the last full load.
    pub fn stats(&self) -> &ParseStats {
        &self.stats
    }

    /// Brings the table up to date with the file. On error (file gone,
    /// refused) the previous table is kept, so a map that briefly disappears
    /// while being replaced does not blank the names.
    pub fn refresh(&mut self) -> Result<Refresh, MapError> {
        if let Some(t) = &self.tracked {
            // Cheap check without opening: lstat of the same path.
            match std::fs::symlink_metadata(&self.path) {
                Ok(m) if FileStamp::from_metadata(&m) == t.stamp => return Ok(Refresh::Unchanged),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(Refused::NotFound {
                        path: self.path.clone(),
                    }
                    .into());
                }
                _ => {}
            }
        }
        let tf = open_trusted(&self.path, &self.policy)?;
        let new = tf.stamp;
        if let Some(t) = &self.tracked {
            let same_file = t.stamp.dev == new.dev && t.stamp.ino == new.ino;
            let same_mtime =
                (t.stamp.mtime_sec, t.stamp.mtime_nsec) == (new.mtime_sec, new.mtime_nsec);
            if same_file && new.size == t.stamp.size && same_mtime {
                return Ok(Refresh::Unchanged);
            }
            if same_file && new.size > t.stamp.size && self.tail_matches(&tf, t)? {
                return self.append(&tf);
            }
        }
        self.load_all(&tf)
    }

    fn tail_matches(&self, tf: &TrustedFile, t: &Tracked) -> Result<bool, MapError> {
        if t.tail.is_empty() {
            return Ok(true);
        }
        let at = t.offset - t.tail.len() as u64;
        let got = read_range(tf, at, t.tail.len() as u64).map_err(|e| self.io(e))?;
        Ok(got == t.tail)
    }

    fn append(&mut self, tf: &TrustedFile) -> Result<Refresh, MapError> {
        let t = self.tracked.as_ref().expect("append needs a tracked state");
        let (offset, next_line) = (t.offset, t.next_line);
        let data = read_range(tf, offset, tf.stamp.size - offset).map_err(|e| self.io(e))?;
        let complete = complete_lines(&data);
        let mut parsed = ParsedMap::default();
        let lines = parse_chunk(complete, next_line, &mut parsed);
        let n = parsed.entries.len();
        if parsed.stats.malformed > 0 {
            tracing::debug!(path = %self.path.display(), malformed = parsed.stats.malformed,
                first_lines = ?parsed.stats.first_malformed, "malformed lines in appended perf map data");
        }
        self.stats.merge(&parsed.stats);
        self.table.extend(self.styled(parsed.entries));
        let new_offset = offset + complete.len() as u64;
        let tail = self.new_tail(tf, complete, offset)?;
        self.tracked = Some(Tracked {
            stamp: tf.stamp,
            offset: new_offset,
            next_line: next_line + lines,
            tail,
        });
        Ok(Refresh::Appended { entries: n })
    }

    fn load_all(&mut self, tf: &TrustedFile) -> Result<Refresh, MapError> {
        let data = read_range(tf, 0, tf.stamp.size).map_err(|e| self.io(e))?;
        let complete = complete_lines(&data);
        let mut parsed = ParsedMap::default();
        let lines = parse_chunk(complete, 1, &mut parsed);
        if parsed.stats.malformed > 0 {
            tracing::warn!(path = %self.path.display(), malformed = parsed.stats.malformed,
                first_lines = ?parsed.stats.first_malformed, "skipped malformed perf map lines");
        }
        let n = parsed.entries.len();
        self.table = SymbolTable::from_entries(self.styled(parsed.entries));
        self.stats = parsed.stats;
        let tail = self.new_tail(tf, complete, 0)?;
        self.tracked = Some(Tracked {
            stamp: tf.stamp,
            offset: complete.len() as u64,
            next_line: 1 + lines,
            tail,
        });
        tracing::debug!(path = %self.path.display(), entries = n, "loaded perf map");
        Ok(Refresh::Loaded { entries: n })
    }

    /// The last TAIL_LEN bytes up to the end of `complete` (which starts at
    /// file offset `base`); reads before `base` if `complete` is short.
    fn new_tail(&self, tf: &TrustedFile, complete: &[u8], base: u64) -> Result<Vec<u8>, MapError> {
        if complete.len() >= TAIL_LEN || base == 0 {
            return Ok(complete[complete.len().saturating_sub(TAIL_LEN)..].to_vec());
        }
        let end = base + complete.len() as u64;
        let start = end.saturating_sub(TAIL_LEN as u64);
        read_range(tf, start, end - start).map_err(|e| self.io(e))
    }

    fn styled(&self, mut entries: Vec<PerfMapEntry>) -> Vec<PerfMapEntry> {
        if self.style != NameStyle::Full {
            for e in &mut entries {
                if let Cow::Borrowed(b) = self.style.apply(&e.name)
                    && b.len() == e.name.len()
                {
                    continue;
                }
                let s = self.style.apply(&e.name).into_owned();
                e.name = s;
            }
        }
        entries
    }

    fn io(&self, source: io::Error) -> MapError {
        MapError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

/// One-shot load of a finished map (e.g. one written by
/// `-XX:+DumpPerfMapAtExit`): unlike [`PerfMapFile`], an unterminated last
/// line is parsed too, since nobody is still writing it.
pub fn load_file(
    path: &Path,
    policy: &TrustPolicy,
    style: NameStyle,
) -> Result<(SymbolTable, ParseStats), MapError> {
    let tf = open_trusted(path, policy)?;
    let data = read_range(&tf, 0, tf.stamp.size).map_err(|source| MapError::Io {
        path: path.to_owned(),
        source,
    })?;
    let parsed = parse_bytes(&data);
    let entries = parsed.entries.into_iter().map(|mut e| {
        let s = style.apply(&e.name).into_owned();
        e.name = s;
        e
    });
    Ok((SymbolTable::from_entries(entries), parsed.stats))
}

/// `data` up to and including its last newline.
fn complete_lines(data: &[u8]) -> &[u8] {
    match data.iter().rposition(|&b| b == b'\n') {
        Some(i) => &data[..=i],
        None => &data[..0],
    }
}

/// Reads up to `len` bytes at `offset`; fewer if the file shrank meanwhile.
fn read_range(tf: &TrustedFile, offset: u64, len: u64) -> io::Result<Vec<u8>> {
    let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
    let mut buf = vec![0u8; len];
    let mut got = 0;
    while got < len {
        match tf.file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{File, OpenOptions};
    use std::io::Write;
    use std::time::{Duration, SystemTime};

    fn append(path: &Path, s: &str) {
        let mut f = OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(s.as_bytes()).unwrap();
    }

    fn name_at(m: &PerfMapFile, addr: u64) -> Option<String> {
        m.lookup(addr).map(|s| s.name.to_owned())
    }

    fn setup(content: &str) -> (tempfile::TempDir, PathBuf, PerfMapFile) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("perf-1.map");
        std::fs::write(&p, content).unwrap();
        let m = PerfMapFile::new(&p, TrustPolicy::for_uid(0));
        (d, p, m)
    }

    #[test]
    fn load_then_unchanged() {
        let (_d, _p, mut m) = setup("0x100 0x10 void a.B.c(int)\n200 10 Interpreter\n");
        assert_eq!(m.refresh().unwrap(), Refresh::Loaded { entries: 2 });
        assert_eq!(name_at(&m, 0x105).as_deref(), Some("a.B.c"));
        assert_eq!(name_at(&m, 0x205).as_deref(), Some("Interpreter"));
        assert_eq!(m.refresh().unwrap(), Refresh::Unchanged);
        assert_eq!(m.refresh().unwrap(), Refresh::Unchanged);
    }

    #[test]
    fn full_style_keeps_signature() {
        let (_d, _p, m) = setup("0x100 0x10 void a.B.c(int)\n");
        let mut m = m.with_name_style(NameStyle::Full);
        m.refresh().unwrap();
        assert_eq!(name_at(&m, 0x100).as_deref(), Some("void a.B.c(int)"));
    }

    #[test]
    fn append_with_partial_line_and_later_wins() {
        let (_d, p, mut m) = setup("100 10 first\n");
        assert_eq!(m.refresh().unwrap(), Refresh::Loaded { entries: 1 });
        // A complete line overlapping the first, plus half of another line.
        append(&p, "100 8 second\n300 1");
        assert_eq!(m.refresh().unwrap(), Refresh::Appended { entries: 1 });
        assert_eq!(name_at(&m, 0x100).as_deref(), Some("second"));
        assert_eq!(name_at(&m, 0x10c).as_deref(), Some("first"));
        assert_eq!(name_at(&m, 0x300), None, "partial line must not be parsed");
        // The writer finishes the line.
        append(&p, "0 third\n");
        assert_eq!(m.refresh().unwrap(), Refresh::Appended { entries: 1 });
        assert_eq!(name_at(&m, 0x30f).as_deref(), Some("third"));
        assert_eq!(name_at(&m, 0x310), None);
        // Garbage appended later is counted with the right line number.
        append(&p, "bogus\n");
        assert_eq!(m.refresh().unwrap(), Refresh::Appended { entries: 0 });
        assert_eq!(m.stats().malformed, 1);
        assert_eq!(m.stats().first_malformed, vec![4]);
        assert_eq!(m.stats().entries, 3);
    }

    #[test]
    fn partial_line_only_appended() {
        let (_d, p, mut m) = setup("");
        assert_eq!(m.refresh().unwrap(), Refresh::Loaded { entries: 0 });
        append(&p, "100 10 x");
        assert_eq!(m.refresh().unwrap(), Refresh::Appended { entries: 0 });
        append(&p, "yz\n");
        assert_eq!(m.refresh().unwrap(), Refresh::Appended { entries: 1 });
        assert_eq!(name_at(&m, 0x100).as_deref(), Some("xyz"));
    }

    #[test]
    fn rewrite_with_new_inode() {
        let (d, p, mut m) = setup("100 10 old\n");
        m.refresh().unwrap();
        let tmp = d.path().join("new");
        std::fs::write(&tmp, "100 10 old\n200 10 new\n").unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        // Grown, but a different inode: reparse, not append.
        assert_eq!(m.refresh().unwrap(), Refresh::Loaded { entries: 2 });
        assert_eq!(name_at(&m, 0x200).as_deref(), Some("new"));
    }

    #[test]
    fn truncate_reloads() {
        let (_d, p, mut m) = setup("100 10 a\n200 10 b\n");
        m.refresh().unwrap();
        File::create(&p).unwrap().write_all(b"300 10 c\n").unwrap();
        assert_eq!(m.refresh().unwrap(), Refresh::Loaded { entries: 1 });
        assert_eq!(name_at(&m, 0x100), None);
        assert_eq!(name_at(&m, 0x300).as_deref(), Some("c"));
    }

    #[test]
    fn in_place_rewrite_that_grows_is_not_an_append() {
        // What `Compiler.perfmap` does: truncate and write a new, longer
        // snapshot into the same inode.
        let (_d, p, mut m) = setup("0x100 0x10 A.a()\n");
        m.refresh().unwrap();
        let ino = std::fs::metadata(&p).unwrap().ino_for_test();
        File::create(&p)
            .unwrap()
            .write_all(b"0x200 0x10 B.b()\n0x300 0x10 C.c()\n")
            .unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().ino_for_test(), ino);
        assert_eq!(m.refresh().unwrap(), Refresh::Loaded { entries: 2 });
        assert_eq!(name_at(&m, 0x100), None);
    }

    #[test]
    fn same_size_new_mtime_reloads() {
        let (_d, p, mut m) = setup("100 10 aaa\n");
        m.refresh().unwrap();
        let f = OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(b"100 10 bbb\n", 0).unwrap();
        f.set_modified(SystemTime::now() + Duration::from_secs(10))
            .unwrap();
        drop(f);
        assert_eq!(m.refresh().unwrap(), Refresh::Loaded { entries: 1 });
        assert_eq!(name_at(&m, 0x100).as_deref(), Some("bbb"));
    }

    #[test]
    fn vanished_file_keeps_table() {
        let (_d, p, mut m) = setup("100 10 a\n");
        m.refresh().unwrap();
        std::fs::remove_file(&p).unwrap();
        let err = m.refresh().unwrap_err();
        assert!(
            matches!(err, MapError::Refused(Refused::NotFound { .. })),
            "{err}"
        );
        assert_eq!(name_at(&m, 0x100).as_deref(), Some("a"));
    }

    #[test]
    fn one_shot_load_includes_unterminated_line() {
        let (_d, p, _m) = setup("100 10 a\n200 10 void x.Y.z()");
        let (t, stats) = load_file(&p, &TrustPolicy::for_uid(0), NameStyle::Readable).unwrap();
        assert_eq!(stats.entries, 2);
        assert_eq!(t.lookup(0x200).unwrap().name, "x.Y.z");
    }

    trait InoForTest {
        fn ino_for_test(&self) -> u64;
    }
    impl InoForTest for std::fs::Metadata {
        fn ino_for_test(&self) -> u64 {
            std::os::unix::fs::MetadataExt::ino(self)
        }
    }
}
