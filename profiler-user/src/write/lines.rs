//! The folded lines a writer holds, kept as numbers: each piece of a line
//! (the process frame, the thread frame, each frame with its suffix) is
//! kept once, as the text it has in the folded file, and a line is the
//! numbers of its pieces, process first.
//!
//! Why: a Spark executor's lines are long (2.2 KB on average over a
//! testbed job, 5,700 of them on-CPU and 6,300 off-CPU), and they were
//! kept as text. Building each sample's line to look it up (copying every
//! name, scanning it for separators, hashing it whole) was about a twentieth
//! of sparkprof's CPU on a Spark host, and the lines most of the memory its
//! recording grew by. As numbers, a line is a tenth of that, and a sample's
//! frames are mostly names the symbolizer hands out again and again, found
//! here by their allocation without reading them.
//!
//! Texts are made only when a file is written: a folded file's by
//! [`Pieces::render_to`], a line at a time by [`Pieces::line`] where each
//! line's text is wanted (the samples table, wall-clock files).

use std::{fmt::Write as _, io, sync::Arc};

use super::folded::{push_sanitized, sanitize};
use crate::{
    FastMap,
    symbolize::{Frame, FrameKind, SymbolizedSample},
};

/// A folded line: the numbers of its pieces, process first.
pub type Line = Box<[u32]>;

/// Frame names kept by their allocation, then started over (a name made
/// afresh for every sample, such as a marker, would add one each time).
const MAX_NAMES: usize = 65_536;

/// Every piece of the lines of one writer, each once.
#[derive(Debug, Default)]
pub struct Pieces {
    /// A piece's text by its number.
    texts: Vec<Arc<str>>,
    numbers: FastMap<Arc<str>, u32>,
    /// Frames by the allocation of their name, and kind. The names are
    /// held (`names`), so no other name is ever at one of these addresses.
    by_name: FastMap<(usize, FrameKind), u32>,
    names: Vec<Arc<str>>,
    /// Room for the text of a process frame, or of a frame not found by
    /// its name's allocation.
    scratch: String,
}

impl Pieces {
    /// Pieces held.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    /// The line of `sample`, its thread named `thread`, into `line`.
    pub fn stack(&mut self, sample: &SymbolizedSample, thread: &str, line: &mut Vec<u32>) {
        line.clear();
        let mut process = std::mem::take(&mut self.scratch);
        process.clear();
        push_sanitized(&mut process, &sample.process.name);
        let _ = write!(process, " [{}]", sample.process.pid);
        line.push(self.number(&process));
        self.scratch = process;
        line.push(self.sanitized(thread));
        line.extend(sample.frames.iter().map(|frame| self.frame(frame)));
    }

    /// The number of a piece `text`, which needs no sanitizing.
    pub fn number(&mut self, text: &str) -> u32 {
        if let Some(&number) = self.numbers.get(text) {
            return number;
        }
        let number = u32::try_from(self.texts.len()).expect("fewer than 2^32 pieces");
        let text: Arc<str> = Arc::from(text);
        self.texts.push(text.clone());
        self.numbers.insert(text, number);
        number
    }

    fn sanitized(&mut self, name: &str) -> u32 {
        match super::folded::needs_sanitizing(name) {
            false => self.number(name),
            true => self.number(&sanitize(name)),
        }
    }

    fn frame(&mut self, frame: &Frame) -> u32 {
        // Markers are short, and often made afresh: by their text.
        if frame.kind == FrameKind::Marker {
            return self.sanitized(&frame.name);
        }
        let key = (Arc::as_ptr(&frame.name).cast::<u8>() as usize, frame.kind);
        if let Some(&number) = self.by_name.get(&key) {
            return number;
        }
        // A name not seen by its allocation is most often a text seen
        // already (each JVM names its methods afresh, and executors share
        // most of theirs): made in the room kept for it, it costs no
        // allocation then (two, once per name, were a tenth of sparkprof's
        // allocations over a testbed job).
        let mut text = std::mem::take(&mut self.scratch);
        text.clear();
        push_sanitized(&mut text, &frame.name);
        text.push_str(match frame.kind {
            FrameKind::Kernel => "_[k]",
            FrameKind::Jit => "_[j]",
            FrameKind::Inlined => "_[i]",
            FrameKind::User | FrameKind::Python | FrameKind::Marker => "",
        });
        let number = self.number(&text);
        self.scratch = text;
        if self.names.len() >= MAX_NAMES {
            self.by_name.clear();
            self.names.clear();
        }
        self.by_name.insert(key, number);
        self.names.push(frame.name.clone());
        number
    }

    /// Writes lines as [`super::folded::render`] renders their texts (one
    /// per line with its count, sorted by text) to `out`, a piece at a
    /// time. Why not through `render`: at a checkpoint a Spark executor's
    /// file made a text of each of its thousands of lines only to sort them
    /// and copy them again (with the growing result, a twentieth of
    /// sparkprof's CPU on a testbed job, half of it faulting in fresh
    /// pages). Here the lines are sorted by their pieces, and a file whose
    /// graph is not drawn goes to its file through a small buffer, never
    /// held whole (a driver's file was 8 MB after a minute).
    pub fn render_to<'a>(
        &self,
        lines: impl IntoIterator<Item = (&'a [u32], u64)>,
        out: &mut dyn io::Write,
    ) -> io::Result<()> {
        let mut lines: Vec<(&[u32], u64)> = lines.into_iter().collect();
        lines.sort_unstable_by(|(a, _), (b, _)| self.cmp_lines(a, b));
        for (line, count) in lines {
            for (index, &number) in line.iter().enumerate() {
                if index > 0 {
                    out.write_all(b";")?;
                }
                out.write_all(self.texts[number as usize].as_bytes())?;
            }
            writeln!(out, " {count}")?;
        }
        Ok(())
    }

    /// How the texts of two lines compare, without making them: at the
    /// first piece that differs, by the first byte that differs in the
    /// joined text (a piece's next byte, else the `;` before the next
    /// piece, else the end of the line, which comes first).
    fn cmp_lines(&self, a: &[u32], b: &[u32]) -> std::cmp::Ordering {
        for (index, (&x, &y)) in a.iter().zip(b).enumerate() {
            if x == y {
                continue;
            }
            // Each text is one piece: these two differ.
            let (x, y) = (
                self.texts[x as usize].as_bytes(),
                self.texts[y as usize].as_bytes(),
            );
            let common = x.iter().zip(y).take_while(|(p, q)| p == q).count();
            let next = |piece: &[u8], line: &[u32]| {
                piece
                    .get(common)
                    .copied()
                    .or_else(|| (index + 1 < line.len()).then_some(b';'))
            };
            return match next(x, a).cmp(&next(y, b)) {
                // A piece holding `;` (none does: pieces are sanitized).
                std::cmp::Ordering::Equal => self.line(a).cmp(&self.line(b)),
                order => order,
            };
        }
        a.len().cmp(&b.len())
    }

    /// A line's text: its pieces separated by `;`.
    pub fn line(&self, line: &[u32]) -> String {
        let len: usize = line.iter().map(|&n| self.texts[n as usize].len() + 1).sum();
        let mut text = String::with_capacity(len);
        for (index, &number) in line.iter().enumerate() {
            if index > 0 {
                text.push(';');
            }
            text.push_str(&self.texts[number as usize]);
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enrich::{ProcessInfo, Runtime, spark::SparkProcess};

    fn sample(frames: Vec<Frame>) -> SymbolizedSample {
        SymbolizedSample {
            process: Arc::new(ProcessInfo {
                pid: 9,
                start_ticks: 1,
                name: "py;thon".into(),
                kernel_thread: false,
                runtime: Runtime::Native,
                spark: SparkProcess::other(),
            }),
            tid: 10,
            thread_name: "main".into(),
            task: None,
            kind: crate::collect::SampleKind::OnCpu,
            frames,
            count: 1,
        }
    }

    #[test]
    fn the_same_text_is_one_piece_whatever_allocation_its_name_has() {
        let mut pieces = Pieces::default();
        let shared: Arc<str> = "work".into();
        let frame = |name: &Arc<str>, kind| Frame {
            name: name.clone(),
            kind,
        };
        let first = sample(vec![
            frame(&shared, FrameKind::Jit),
            frame(&shared, FrameKind::Inlined),
            frame(&"a;b".into(), FrameKind::User),
            Frame::marker("[off-cpu: sleep]"),
        ]);
        // The same texts, from names allocated anew.
        let again = sample(vec![
            frame(&"work".into(), FrameKind::Jit),
            frame(&shared, FrameKind::Inlined),
            frame(&"a;b".into(), FrameKind::User),
            Frame::marker("[off-cpu: sleep]"),
        ]);
        let (mut one, mut two) = (Vec::new(), Vec::new());
        pieces.stack(&first, "pool;1", &mut one);
        pieces.stack(&again, "pool;1", &mut two);
        assert_eq!(one, two);
        assert_eq!(
            pieces.line(&one),
            "py:thon [9];pool:1;work_[j];work_[i];a:b;[off-cpu: sleep]"
        );
        // A kind is part of the piece: the same name twice, two pieces.
        assert_eq!(pieces.len(), 6);
        assert_eq!(pieces.number("pool:1"), one[1]);
    }

    #[test]
    fn lines_render_as_their_texts_render() {
        // Texts that share beginnings, with bytes either side of `;` (0x3B)
        // after them: "a" < "a0" < "a;" < "a<", so a line "a;b" sorts
        // after "a0" though its first piece is the lesser.
        let texts = ["a", "a0", "a<", "a:", "ab", "b", "", "a b"];
        let mut pieces = Pieces::default();
        let mut lines: Vec<(Vec<u32>, u64)> = Vec::new();
        for (n, x) in texts.iter().enumerate() {
            for (m, y) in texts.iter().enumerate() {
                let line = vec![pieces.number(x), pieces.number(y)];
                lines.push((line, (n * 10 + m) as u64));
                if m % 3 == 0 {
                    lines.push((vec![pieces.number(x)], n as u64));
                    lines.push((
                        vec![pieces.number(y), pieces.number(x), pieces.number("z")],
                        7,
                    ));
                }
            }
        }
        lines.sort();
        lines.dedup_by(|a, b| a.0 == b.0);
        let mut text = Vec::new();
        pieces
            .render_to(lines.iter().map(|(line, n)| (&line[..], *n)), &mut text)
            .unwrap();
        let text = String::from_utf8(text).unwrap();
        let expected =
            super::super::folded::render(lines.iter().map(|(line, n)| (pieces.line(line), *n)));
        assert_eq!(text, expected);
        assert_eq!(text.lines().count(), lines.len());
    }

    #[test]
    fn names_held_by_allocation_are_bounded() {
        let mut pieces = Pieces::default();
        let mut line = Vec::new();
        for n in 0..MAX_NAMES + 10 {
            let name: Arc<str> = format!("f{}", n % 3).into();
            pieces.stack(
                &sample(vec![Frame {
                    name,
                    kind: FrameKind::User,
                }]),
                "t",
                &mut line,
            );
            assert!(pieces.names.len() <= MAX_NAMES);
        }
        // Process, thread, three frames.
        assert_eq!(pieces.len(), 5);
    }
}
