//! Flame-graph colours by what a frame is, in the mixed-mode convention
//! of Java flame graphs (inferno's `java` palette, async-profiler's
//! colours): Java green, inlined Java aqua, C++ yellow, other native user
//! code red, kernel orange. sparkprof adds Python blue, and grey for what
//! is not code: the process and thread frames at the root of every stack
//! and markers such as `[truncated]`.
//!
//! The kind is read from the folded line (see [`super`]'s format): its
//! first two frames are the process and the thread, kernel frames end in
//! `_[k]`, Java frames in `_[j]` (`_[i]` inlined), Python frames are
//! `function (file:line)`, markers are `[…]`. Shades vary within a kind
//! by a hash of the name, so neighbours stay apart and a name keeps its
//! colour in every graph.

use inferno::flamegraph::color::{Color, PaletteMap};

use crate::FastSet;

/// What a frame is, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The process and thread frames, and markers.
    Context,
    Kernel,
    Java,
    JavaInlined,
    Python,
    Cpp,
    Native,
}

impl Kind {
    /// The kind of the frame at `depth` (0: the process) named `name`.
    pub fn of(depth: usize, name: &str) -> Self {
        if depth < 2 || (name.starts_with('[') && name.ends_with(']')) {
            Self::Context
        } else if name.ends_with("_[k]") {
            Self::Kernel
        } else if name.ends_with("_[j]") {
            Self::Java
        } else if name.ends_with("_[i]") {
            Self::JavaInlined
        } else if is_python(name) {
            Self::Python
        } else if name.contains("::") {
            Self::Cpp
        } else {
            Self::Native
        }
    }

    /// Base colour and how far each channel may vary.
    fn range(self) -> ([u8; 3], [u8; 3]) {
        match self {
            Self::Context => ([160, 160, 160], [40, 40, 40]),
            Self::Kernel => ([190, 90, 0], [65, 65, 0]),
            Self::Java => ([50, 200, 50], [60, 55, 60]),
            Self::JavaInlined => ([50, 165, 165], [60, 55, 55]),
            Self::Python => ([80, 120, 205], [60, 60, 50]),
            Self::Cpp => ([175, 175, 50], [55, 55, 20]),
            Self::Native => ([200, 50, 50], [55, 80, 80]),
        }
    }

    /// The colour of a frame of this kind named `name`.
    pub fn colour(self, name: &str) -> Color {
        let (base, spread) = self.range();
        let hash = fnv(name);
        let shade = |channel: usize| {
            let v = ((hash >> (channel * 16)) & 0xffff) as u32;
            base[channel] + (u32::from(spread[channel]) * v / 0xffff) as u8
        };
        Color {
            r: shade(0),
            g: shade(1),
            b: shade(2),
        }
    }
}

/// `function (file:line)`, as the Python frames are named.
fn is_python(name: &str) -> bool {
    name.ends_with(')')
        && name.rfind(" (").is_some_and(|open| {
            let inside = &name[open + 2..name.len() - 1];
            inside
                .rsplit_once(':')
                .is_some_and(|(_, line)| line.parse::<u32>().is_ok())
        })
}

fn fnv(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3)
    })
}

/// A colour for every frame of `folded` (a name seen in several places
/// keeps the kind of its first).
///
/// A file's lines share most of their frames: names already coloured are
/// found in a set with a fast hash, and only new ones reach inferno's map,
/// which hashes with SipHash (building the palette with every frame looked
/// up there was a sixth of drawing a flame graph).
pub fn palette(folded: &str) -> PaletteMap {
    let mut map = PaletteMap::default();
    let mut seen: FastSet<&str> = FastSet::default();
    for line in folded.lines() {
        let stack = line.rsplit_once(' ').map_or(line, |(stack, _)| stack);
        for (depth, name) in stack.split(';').enumerate() {
            if seen.insert(name) {
                map.insert(name, Kind::of(depth, name).colour(name));
            }
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_told_apart_by_kind() {
        let kinds: Vec<Kind> = [
            "java [42]",
            "Executor task launch worker for task 1.0 in stage 2.0 (TID 3)",
            "[truncated]",
            "start_thread",
            "JavaThread::run()",
            "java.lang.Thread.run_[j]",
            "org.apache.spark.Foo.bar_[i]",
            "inner (/work/py_chain.py:24)",
            "do_syscall_64_[k]",
        ]
        .iter()
        .enumerate()
        .map(|(depth, name)| Kind::of(depth, name))
        .collect();
        assert_eq!(
            kinds,
            [
                Kind::Context,
                Kind::Context,
                Kind::Context,
                Kind::Native,
                Kind::Cpp,
                Kind::Java,
                Kind::JavaInlined,
                Kind::Python,
                Kind::Kernel,
            ]
        );
        // Not Python: a C function with parentheses, a marker-like name deep down.
        assert_eq!(Kind::of(3, "foo (bar)"), Kind::Native);
        assert_eq!(Kind::of(5, "[unknown]"), Kind::Context);
    }

    #[test]
    fn a_name_keeps_its_colour_within_its_kind() {
        let a = Kind::Java.colour("java.lang.Thread.run_[j]");
        assert_eq!(a, Kind::Java.colour("java.lang.Thread.run_[j]"));
        assert!(a.g > a.r && a.g > a.b, "green: {a:?}");
        let k = Kind::Kernel.colour("schedule_[k]");
        assert!(k.r > k.g && k.b == 0, "orange: {k:?}");
        let p = Kind::Python.colour("inner (x.py:1)");
        assert!(p.b > p.r && p.b > p.g, "blue: {p:?}");
    }
}
