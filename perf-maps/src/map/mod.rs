//! Perf-map files: parsing, a later-wins symbol table, incremental reload and
//! readable names.
//!
//! The format is one `START SIZE name` per line, both numbers in hex. perf's
//! own spec (tools/perf/Documentation/jit-interface.txt) says "no `0x`", and
//! perf-map-agent and CPython follow it, but the JDK's `jcmd
//! Compiler.perfmap` writes `0x`-prefixed, zero-padded numbers. We accept
//! both, per line, because a single file can in principle be appended to by
//! different writers.

pub mod names;
pub mod parser;
pub mod reload;
pub mod resolver;
pub mod types;

pub use names::{NameStyle, python_trampoline, readable_name};
pub use parser::{parse_bytes, parse_line};
pub use reload::{MapError, PerfMapFile, Refresh, load_file};
pub use resolver::SymbolTable;
pub use types::{LineError, ParseStats, ParsedMap, PerfMapEntry, Symbol};
