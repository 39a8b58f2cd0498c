//! The folded text format, and flame graphs drawn from it with inferno.

use std::{fmt::Write as _, io};

#[cfg(test)]
use crate::symbolize::SymbolizedSample;

/// Makes a name safe as one folded frame: `;` separates frames and a line
/// ends the record, so neither may appear inside a name.
pub fn sanitize(name: &str) -> String {
    let mut safe = String::with_capacity(name.len());
    push_sanitized(&mut safe, name);
    safe
}

/// Appends [`sanitize`]`(name)` to `line`. Every frame of every sample
/// passes here, and almost no name needs a change: those are copied whole.
pub(super) fn push_sanitized(line: &mut String, name: &str) {
    if !needs_sanitizing(name) {
        line.push_str(name);
        return;
    }
    line.extend(name.chars().map(|c| match c {
        ';' => ':',
        '\n' | '\r' | '\t' => ' ',
        c => c,
    }));
}

/// Whether `name` holds a byte [`sanitize`] changes.
pub(super) fn needs_sanitizing(name: &str) -> bool {
    reserved_bytes(name) != (0, false)
}

/// A process or file name reduced to `[A-Za-z0-9._-]` for use in a path.
pub fn file_stem(name: &str) -> String {
    let stem: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let stem = stem.trim_start_matches('.');
    if stem.is_empty() {
        "unnamed".to_owned()
    } else {
        stem.to_owned()
    }
}

/// The stack part of a folded line (without the count): process, thread
/// (as `thread` names it), then frames root first, kernel frames suffixed
/// `_[k]`, JIT frames `_[j]`, inlined ones `_[i]`; every name sanitized.
/// As the writer makes it ([`super::lines`]).
#[cfg(test)]
pub fn stack_line(sample: &SymbolizedSample, thread: &str) -> String {
    let mut pieces = super::lines::Pieces::default();
    let mut line = Vec::new();
    pieces.stack(sample, thread, &mut line);
    pieces.line(&line)
}

/// How many `;` `text` holds, and whether it holds a line break or a tab.
/// Every name of a folded line goes through it (once, when the writer
/// first meets it: see [`super::lines`]; it once went through every
/// sample's whole line, which the figures below are of). Counted in 32
/// byte-wide lanes, summed across lanes once per 255 blocks of 32 bytes
/// (what a lane's byte counter holds): the compiler turns each block into a
/// few vector compares and adds, with no branch per byte and no sum across
/// lanes per block. A sum across lanes per block was 3.4 % of sparkprof's
/// CPU over a Spark job (a 3.7 KB line of Java frames: 2,356 ns against 171
/// ns this way); a byte-at-a-time search with an early exit, before it,
/// 7.5 % with `--off-cpu`.
fn reserved_bytes(text: &str) -> (usize, bool) {
    const LANES: usize = 32;
    let reserved = |b: u8| {
        (
            u8::from(b == b';'),
            u8::from((b == b'\n') | (b == b'\r') | (b == b'\t')),
        )
    };
    let (blocks, rest) = text.as_bytes().as_chunks::<LANES>();
    let (mut semicolons, mut breaks) = (0, 0);
    for group in blocks.chunks(usize::from(u8::MAX)) {
        let (mut counts, mut found) = ([0u8; LANES], [0u8; LANES]);
        for block in group {
            for lane in 0..LANES {
                let (semicolon, line_break) = reserved(block[lane]);
                counts[lane] += semicolon;
                found[lane] |= line_break;
            }
        }
        semicolons += counts.iter().map(|&n| usize::from(n)).sum::<usize>();
        breaks |= found.iter().fold(0, |any, &f| any | f);
    }
    for &b in rest {
        let (semicolon, line_break) = reserved(b);
        semicolons += usize::from(semicolon);
        breaks |= line_break;
    }
    (semicolons, breaks != 0)
}

/// Renders aggregated stacks (each line once) as folded text, one line
/// per stack, sorted.
pub fn render<S: AsRef<str>>(stacks: impl IntoIterator<Item = (S, u64)>) -> String {
    let mut lines: Vec<(S, u64)> = stacks.into_iter().collect();
    lines.sort_unstable_by(|(a, _), (b, _)| a.as_ref().cmp(b.as_ref()));
    let mut text = String::new();
    for (stack, count) in lines {
        let _ = writeln!(text, "{} {count}", stack.as_ref());
    }
    text
}

/// What stands in for a flame graph not drawn yet (a recording's file that
/// still changes at a checkpoint): an SVG page that says so, so that every
/// graph the index lists is there. The end of the recording draws it.
pub fn stand_in_graph(title: &str) -> Vec<u8> {
    let mut escaped = String::with_capacity(title.len());
    for c in title.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            c => escaped.push(c),
        }
    }
    format!(
        "<?xml version=\"1.0\" standalone=\"no\"?>\n\
         <svg version=\"1.1\" width=\"1200\" height=\"80\" xmlns=\"http://www.w3.org/2000/svg\">\n\
         <text x=\"600\" y=\"30\" text-anchor=\"middle\" font-size=\"17\">{escaped}</text>\n\
         <text x=\"600\" y=\"60\" text-anchor=\"middle\" font-size=\"13\">\
         Still recording: this flame graph is drawn once its folded file stops changing, \
         and at the end of the recording.</text>\n</svg>\n"
    )
    .into_bytes()
}

/// An interactive SVG flame graph of folded text, its frames coloured by
/// kind (see [`super::colours`]).
pub fn flame_graph(folded: &str, title: &str, unit: &str) -> io::Result<Vec<u8>> {
    let mut palette = super::colours::palette(folded);
    let mut options = inferno::flamegraph::Options::default();
    options.title = title.to_owned();
    options.count_name = unit.to_owned();
    options.palette_map = Some(&mut palette);
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut options, folded.lines(), &mut svg)?;
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{
        enrich::ProcessInfo,
        symbolize::{Frame, FrameKind},
    };

    #[test]
    fn folds_root_first_with_kernel_suffix() {
        let sample = SymbolizedSample {
            process: Arc::new(ProcessInfo {
                pid: 42,
                start_ticks: 1,
                name: "my app".into(),
                kernel_thread: false,
                runtime: crate::enrich::Runtime::Native,
                spark: crate::enrich::spark::SparkProcess::other(),
            }),
            tid: 43,
            thread_name: "worker;1".into(),
            task: None,
            kind: crate::collect::SampleKind::OnCpu,
            frames: vec![
                Frame::new("[truncated]", FrameKind::Marker),
                Frame::new("main", FrameKind::User),
                Frame::new("std::vec::Vec<T>::push", FrameKind::User),
                Frame::new("asm_exc_page_fault", FrameKind::Kernel),
            ],
            count: 3,
        };
        assert_eq!(
            stack_line(&sample, &sample.thread_name),
            "my app [42];worker:1;[truncated];main;std::vec::Vec<T>::push;asm_exc_page_fault_[k]"
        );
        let stacks = std::collections::HashMap::from([
            (stack_line(&sample, &sample.thread_name), 3),
            ("b [1];t;x".to_owned(), 2),
        ]);
        let text = render(stacks);
        assert_eq!(text.lines().count(), 2);
        assert!(text.ends_with("asm_exc_page_fault_[k] 3\n"));
        let svg = String::from_utf8(flame_graph(&text, "test", "samples").unwrap()).unwrap();
        assert!(svg.contains("<svg") && svg.contains("asm_exc_page_fault"));
    }

    #[test]
    fn separators_are_found_anywhere_in_a_long_name() {
        let clean = "Lorg/apache/spark/SomeClass;".repeat(5).replace(';', ".");
        assert!(!needs_sanitizing(&clean));
        assert_eq!(sanitize(&clean), clean);
        // Each separator at every position, across the 32-byte blocks.
        for bad in [';', '\n', '\r', '\t'] {
            for at in 0..clean.len() {
                let mut name = clean.clone();
                name.replace_range(at..=at, &bad.to_string());
                assert!(needs_sanitizing(&name), "{bad:?} at {at}");
                let safe = sanitize(&name);
                assert!(!needs_sanitizing(&safe), "{safe}");
                assert_eq!(safe.len(), name.len());
            }
        }
    }

    #[test]
    fn a_line_is_sanitized_wherever_a_name_holds_a_separator() {
        let name = "org.apache.spark.scheduler.DAGScheduler.handleTaskCompletion";
        let sample = |middle: &str| SymbolizedSample {
            process: Arc::new(ProcessInfo {
                pid: 7,
                start_ticks: 1,
                name: "java".into(),
                kernel_thread: false,
                runtime: crate::enrich::Runtime::Native,
                spark: crate::enrich::spark::SparkProcess::other(),
            }),
            tid: 8,
            thread_name: "main".into(),
            task: None,
            kind: crate::collect::SampleKind::OnCpu,
            frames: [name, middle, name]
                .into_iter()
                .map(|n| Frame::new(n, FrameKind::Jit))
                .collect(),
            count: 1,
        };
        let clean = stack_line(&sample(name), "main");
        assert_eq!(
            clean,
            format!("java [7];main;{name}_[j];{name}_[j];{name}_[j]")
        );
        // Each reserved byte at every position of the middle frame, across
        // the whole line's 32-byte blocks.
        for bad in [';', '\n', '\r', '\t'] {
            for at in 0..name.len() {
                let mut middle = name.to_owned();
                middle.replace_range(at..=at, &bad.to_string());
                let line = stack_line(&sample(&middle), "main");
                let want = format!(
                    "java [7];main;{name}_[j];{}_[j];{name}_[j]",
                    sanitize(&middle)
                );
                assert_eq!(line, want, "{bad:?} at {at}");
                assert_eq!(reserved_bytes(&line), (4, false));
            }
        }
    }

    #[test]
    fn reserved_bytes_are_counted_past_what_a_lane_holds() {
        // Every byte a `;` for more than 255 blocks of 32 (a lane's
        // counter fills in each group), and a tail outside the blocks.
        for len in [0, 31, 32, 255 * 32, 255 * 32 + 1, 300 * 32 + 7] {
            let text = ";".repeat(len);
            assert_eq!(reserved_bytes(&text), (len, false), "{len}");
            // A break at the start, in the middle and at the end.
            for at in [0, len / 2, len.saturating_sub(1)]
                .into_iter()
                .filter(|&at| at < len)
            {
                let mut broken = text.clone();
                broken.replace_range(at..=at, "\t");
                assert_eq!(reserved_bytes(&broken), (len - 1, true), "{len} {at}");
            }
        }
        let mixed: String = "ab;c\nd;".repeat(2_000);
        let want = mixed.bytes().filter(|&b| b == b';').count();
        assert_eq!(reserved_bytes(&mixed), (want, true));
    }

    #[test]
    fn file_stems_are_safe() {
        assert_eq!(file_stem("../etc/passwd"), "_etc_passwd");
        assert_eq!(file_stem("kworker/0:1"), "kworker_0_1");
        assert_eq!(file_stem(""), "unnamed");
    }

    #[test]
    fn flame_graphs_colour_frames_by_kind() {
        use crate::write::colours::Kind;
        let folded = "java [7];worker;start_thread;java.lang.Thread.run_[j];do_syscall_64_[k] 5\n";
        let svg = String::from_utf8(flame_graph(folded, "t", "samples").unwrap()).unwrap();
        for (depth, name) in folded
            .trim_end()
            .trim_end_matches(" 5")
            .split(';')
            .enumerate()
        {
            let c = Kind::of(depth, name).colour(name);
            let fill = format!("fill=\"rgb({},{},{})\"", c.r, c.g, c.b);
            assert!(svg.contains(&fill), "{name}: {fill} not in the SVG");
        }
    }
}
