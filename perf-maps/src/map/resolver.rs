//! The symbol table: sorted, non-overlapping address ranges with a
//! binary-search lookup.
//!
//! Perf maps are logs, not tables: a JIT that frees code and reuses the
//! address for another method appends a new line over the old range, and
//! perf's rule is that the later line wins. We resolve overlaps once, when
//! building, so that a lookup (done for every sampled frame) is a single
//! binary search over a flat, cache-friendly `Vec`.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::types::{PerfMapEntry, Symbol};

/// A piece of a symbol's range. When a later entry covers part of an earlier
/// one, the earlier one is trimmed or split; each remaining piece remembers the
/// original start and size so offsets stay relative to the real entry point.
#[derive(Debug, Clone)]
struct Fragment {
    start: u64,
    end: u64,
    sym_start: u64,
    sym_size: u64,
    /// Shared between the pieces of one split symbol.
    name: Arc<str>,
}

/// Non-overlapping address ranges, sorted by start, each naming a symbol.
#[derive(Debug, Clone, Default)]
pub struct SymbolTable {
    frags: Vec<Fragment>,
}

impl SymbolTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds a table from entries in file order: where ranges overlap, the
    /// entry that comes later in the iterator wins, and earlier entries are
    /// trimmed (or split in two) around it. Zero-size entries are ignored.
    pub fn from_entries<I>(entries: I) -> Self
    where
        I: IntoIterator<Item = PerfMapEntry>,
    {
        let mut entries: Vec<(usize, PerfMapEntry)> = entries
            .into_iter()
            .filter(|e| e.size > 0)
            .enumerate()
            .collect();
        // Fast path: with no overlaps at all (every `Compiler.perfmap`
        // snapshot), file order does not matter and a sort is all we need.
        entries.sort_by_key(|(_, e)| e.start);
        if entries
            .windows(2)
            .all(|w| w[0].1.start.saturating_add(w[0].1.size) <= w[1].1.start)
        {
            let frags = entries
                .into_iter()
                .map(|(_, e)| {
                    let end = e.start.saturating_add(e.size);
                    Fragment {
                        start: e.start,
                        end,
                        sym_start: e.start,
                        sym_size: e.size,
                        name: Arc::from(e.name),
                    }
                })
                .collect();
            return SymbolTable { frags };
        }
        entries.sort_unstable_by_key(|(i, _)| *i);

        // A BTreeMap keyed by start keeps the "current winner" ranges
        // disjoint while we insert, in file order; each insert touches only
        // the ranges it overlaps, so this stays O(n log n) for typical maps.
        let mut map: BTreeMap<u64, Fragment> = BTreeMap::new();
        for (_, e) in entries {
            let (s, end) = (e.start, e.start.saturating_add(e.size));
            // A range starting before `s` that reaches into [s, end): trim it,
            // and if it also extends past `end`, keep its tail.
            if let Some((_, prev)) = map.range_mut(..s).next_back()
                && prev.end > s
            {
                let old_end = prev.end;
                prev.end = s;
                if old_end > end {
                    let mut tail = prev.clone();
                    tail.start = end;
                    tail.end = old_end;
                    map.insert(end, tail);
                }
            }
            // Ranges starting inside [s, end) are covered; only the last one
            // can stick out past `end`, and its tail survives.
            while let Some((&k, _)) = map.range(s..end).next() {
                let mut f = map.remove(&k).expect("key just seen");
                if f.end > end {
                    f.start = end;
                    map.insert(end, f);
                    break;
                }
            }
            map.insert(
                s,
                Fragment {
                    start: s,
                    end,
                    sym_start: e.start,
                    sym_size: e.size,
                    name: Arc::from(e.name),
                },
            );
        }
        SymbolTable {
            frags: map.into_values().collect(),
        }
    }

    /// Lays `newer` over `self`: wherever they overlap, `newer` wins. This is
    /// how appended lines are merged without re-resolving the whole file;
    /// both inputs are already disjoint and sorted, so it is one linear pass.
    pub fn overlay(&mut self, newer: SymbolTable) {
        if newer.frags.is_empty() {
            return;
        }
        if self.frags.is_empty() {
            *self = newer;
            return;
        }
        let old = std::mem::take(&mut self.frags);
        let new = newer.frags;
        // The parts of old fragments not covered by any new fragment.
        let mut kept: Vec<Fragment> = Vec::with_capacity(old.len());
        let mut j = 0;
        for a in old {
            let a_end = a.end;
            let mut cur = a.start;
            let mut k = j;
            while k < new.len() && new[k].start < a.end {
                let b = &new[k];
                if b.end > cur {
                    if b.start > cur {
                        kept.push(Fragment {
                            start: cur,
                            end: b.start,
                            ..a.clone()
                        });
                    }
                    cur = cur.max(b.end);
                }
                k += 1;
            }
            if cur < a.end {
                kept.push(Fragment { start: cur, ..a });
            }
            // New fragments ending at or before this old one's end cannot
            // reach the next old fragment (which starts at or after it).
            while j < new.len() && new[j].end <= a_end {
                j += 1;
            }
        }
        // Merge two sorted, mutually disjoint lists.
        let mut out = Vec::with_capacity(kept.len() + new.len());
        let mut kept = kept.into_iter().peekable();
        let mut new = new.into_iter().peekable();
        loop {
            let take_kept = match (kept.peek(), new.peek()) {
                (Some(x), Some(y)) => x.start < y.start,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let f = if take_kept { kept.next() } else { new.next() };
            out.extend(f);
        }
        self.frags = out;
    }

    /// Adds entries that come after everything already in the table (e.g.
    /// lines appended to the file): they win where they overlap.
    pub fn extend<I>(&mut self, entries: I)
    where
        I: IntoIterator<Item = PerfMapEntry>,
    {
        self.overlay(SymbolTable::from_entries(entries));
    }

    /// The symbol covering `addr`, if any. Ranges are half-open:
    /// `start <= addr < start + size`.
    pub fn lookup(&self, addr: u64) -> Option<Symbol<'_>> {
        let i = self.frags.partition_point(|f| f.start <= addr);
        let f = self.frags.get(i.checked_sub(1)?)?;
        (addr < f.end).then(|| Symbol {
            name: &f.name,
            start: f.sym_start,
            size: f.sym_size,
            offset: addr - f.sym_start,
        })
    }

    /// Number of disjoint ranges (a split symbol counts once per piece).
    pub fn len(&self) -> usize {
        self.frags.len()
    }

    /// True if the table has no ranges.
    pub fn is_empty(&self) -> bool {
        self.frags.is_empty()
    }

    /// The disjoint ranges in address order, as `(range, symbol)` where the
    /// symbol's offset is that of the range's first byte.
    pub fn iter(&self) -> impl Iterator<Item = (std::ops::Range<u64>, Symbol<'_>)> + '_ {
        self.frags.iter().map(|f| {
            (
                f.start..f.end,
                Symbol {
                    name: &f.name,
                    start: f.sym_start,
                    size: f.sym_size,
                    offset: f.start - f.sym_start,
                },
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(start: u64, size: u64, name: &str) -> PerfMapEntry {
        PerfMapEntry {
            start,
            size,
            name: name.to_owned(),
        }
    }

    fn dump(t: &SymbolTable) -> Vec<(u64, u64, String)> {
        t.iter()
            .map(|(r, s)| (r.start, r.end, s.name.to_owned()))
            .collect()
    }

    #[test]
    fn lookup_boundaries() {
        let t = SymbolTable::from_entries([e(0x100, 0x10, "a"), e(0x110, 0x10, "b")]);
        assert_eq!(t.lookup(0xff), None);
        let s = t.lookup(0x100).unwrap();
        assert_eq!((s.name, s.offset, s.start, s.size), ("a", 0, 0x100, 0x10));
        assert_eq!(t.lookup(0x10f).unwrap().offset, 0xf);
        assert_eq!(t.lookup(0x10f).unwrap().name, "a");
        assert_eq!(t.lookup(0x110).unwrap().name, "b");
        assert_eq!(t.lookup(0x11f).unwrap().name, "b");
        assert_eq!(t.lookup(0x120), None);
        assert_eq!(t.lookup(0), None);
        assert_eq!(t.lookup(u64::MAX), None);
    }

    #[test]
    fn gap_between_symbols_is_unnamed() {
        let t = SymbolTable::from_entries([e(0x100, 0x10, "a"), e(0x200, 0x10, "b")]);
        assert_eq!(t.lookup(0x150), None);
        assert_eq!(t.lookup(0x1ff), None);
    }

    #[test]
    fn later_line_wins_and_splits_earlier() {
        // "big" is covered in the middle by "mid": split in two pieces that
        // keep big's start for offsets.
        let t = SymbolTable::from_entries([e(0x100, 0x100, "big"), e(0x140, 0x20, "mid")]);
        assert_eq!(
            dump(&t),
            vec![
                (0x100, 0x140, "big".into()),
                (0x140, 0x160, "mid".into()),
                (0x160, 0x200, "big".into()),
            ]
        );
        let s = t.lookup(0x170).unwrap();
        assert_eq!((s.name, s.start, s.offset), ("big", 0x100, 0x70));
    }

    #[test]
    fn later_line_trims_and_swallows() {
        let t = SymbolTable::from_entries([
            e(0x100, 0x20, "a"),
            e(0x120, 0x20, "b"),
            e(0x140, 0x20, "c"),
            // Covers the end of a, all of b, the start of c.
            e(0x110, 0x40, "z"),
        ]);
        assert_eq!(
            dump(&t),
            vec![
                (0x100, 0x110, "a".into()),
                (0x110, 0x150, "z".into()),
                (0x150, 0x160, "c".into()),
            ]
        );
        assert_eq!(t.lookup(0x155).unwrap().offset, 0x15);
    }

    #[test]
    fn identical_range_replaced() {
        let t = SymbolTable::from_entries([e(0x100, 0x20, "old"), e(0x100, 0x20, "new")]);
        assert_eq!(dump(&t), vec![(0x100, 0x120, "new".into())]);
    }

    #[test]
    fn earlier_smaller_range_is_swallowed_by_later_bigger() {
        let t = SymbolTable::from_entries([e(0x110, 0x8, "small"), e(0x100, 0x40, "big")]);
        assert_eq!(dump(&t), vec![(0x100, 0x140, "big".into())]);
    }

    #[test]
    fn zero_size_ignored() {
        let t = SymbolTable::from_entries([e(0x100, 0x20, "a"), e(0x110, 0, "zero")]);
        assert_eq!(dump(&t), vec![(0x100, 0x120, "a".into())]);
    }

    #[test]
    fn overlay_matches_building_in_one_go() {
        // Pseudo-random entries; splitting the list anywhere and overlaying
        // the tail must give the same table as building from the whole list.
        let mut x: u64 = 0x1234_5678;
        let mut entries = Vec::new();
        for i in 0..400 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let start = 0x1000 + (x % 0x4000);
            let size = 1 + (x >> 20) % 0x200;
            entries.push(e(start, size, &format!("f{i}")));
        }
        let whole = dump(&SymbolTable::from_entries(entries.clone()));
        for cut in [0, 1, 50, 200, 399, 400] {
            let mut t = SymbolTable::from_entries(entries[..cut].to_vec());
            t.extend(entries[cut..].to_vec());
            assert_eq!(dump(&t), whole, "cut at {cut}");
        }
        // And the result is disjoint and sorted.
        for w in whole.windows(2) {
            assert!(w[0].1 <= w[1].0);
        }
    }

    #[test]
    fn loads_10k_lines_quickly() {
        let mut text = String::new();
        for i in 0..10_000u64 {
            let start = 0x7f00_0000_0000 + i * 0x180;
            if i % 2 == 0 {
                text.push_str(&format!(
                    "0x{start:016x} 0x{:016x} void org.apache.spark.Gen{i}.method{i}(int, long)\n",
                    0x100 + (i % 0x80)
                ));
            } else {
                text.push_str(&format!("{start:x} {:x} Lorg/apache/Gen{i};::m\n", 0x100));
            }
        }
        let t0 = std::time::Instant::now();
        let parsed = super::super::parser::parse_bytes(text.as_bytes());
        let t1 = std::time::Instant::now();
        let table = SymbolTable::from_entries(parsed.entries);
        let t2 = std::time::Instant::now();
        eprintln!(
            "10k-line map: parse {:?}, build {:?}, total {:?}",
            t1 - t0,
            t2 - t1,
            t2 - t0
        );
        assert_eq!(table.len(), 10_000);
        assert_eq!(parsed.stats.malformed, 0);
        let s = table.lookup(0x7f00_0000_0000 + 5000 * 0x180 + 3).unwrap();
        assert_eq!(s.offset, 3);
        assert!(s.name.contains("Gen5000"));

        // The same with overlaps (an append log where code was reused), which
        // takes the later-wins path instead of the plain sort.
        let mut overlapping = super::super::parser::parse_bytes(text.as_bytes()).entries;
        for i in 0..10_000u64 {
            overlapping.push(e(0x7f00_0000_0000 + i * 0x180 + 0x80, 0x100, "reused"));
        }
        let t0 = std::time::Instant::now();
        let table = SymbolTable::from_entries(overlapping);
        eprintln!("20k entries with 10k overlaps: build {:?}", t0.elapsed());
        assert_eq!(table.len(), 20_000);
        assert_eq!(
            table.lookup(0x7f00_0000_0000 + 0x80).unwrap().name,
            "reused"
        );
    }
}
