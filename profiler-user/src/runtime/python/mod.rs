//! The CPython runtime: finding the interpreter in a process, its threads,
//! and naming the (code object, instruction) pairs the kernel walker
//! records; [`follow::PythonRuntime`] holds every followed process through
//! its life (see [`crate::runtime`]).
//!
//! CPython (3.8 to 3.13) keeps its call stack in its own data structures,
//! not on the C stack's frame pointers (and its builds have none), so a
//! native unwind shows only the interpreter's C frames. sparkprof's kernel
//! program walks the interpreter's frame chain instead: starting from a
//! thread's `PyThreadState`, it records per frame the code object address
//! and the raw instruction (see [`profiler_common::PythonFrame`]). That
//! needs, per process, what only userspace can find, and this module
//! supplies it:
//!
//! - [`PythonProcess::probe`]: whether a process runs CPython, which
//!   version, and where its `_PyRuntime` is (the executable, static builds
//!   such as Debian's, or `libpython3.X.so`; also in containers).
//! - [`PythonProcess::kernel_offsets`]: the version's struct offsets the
//!   walker reads ([`profiler_common::PythonOffsets`]), from the checked-in
//!   table in [`types`] (a production host has no CPython headers).
//! - [`PythonProcess::threads`]: (Linux thread id, `PyThreadState`
//!   address) for every interpreter thread, for the walker's per-thread map.
//! - [`PythonProcess::frame_name`]: `function (file.py:line)` for a
//!   recorded frame, from the code object (cached, with an identity check
//!   against address reuse) and the version's line table.
//!
//! Shaped like the other symbol sources: [`types`] (versions, the offset
//! table, errors); reading a process, a concern per module: [`memory`]
//! (`process_vm_readv`), [`process`] (its /proc entry), [`module`] (the
//! interpreter's ELF file and version), [`objects`] (strings and code
//! objects), [`line_table`] (instruction to line), [`threads`] (interpreters,
//! thread states, and a userspace copy of the kernel's frame walk); and
//! [`resolver`] (one process: cache and public API).
//! All target memory is read with `process_vm_readv` and treated as
//! hostile (bounded walks and lengths, objects checked against their type).

pub mod follow;
pub mod line_table;
pub mod memory;
pub mod module;
pub mod objects;
pub mod process;
pub mod resolver;
pub mod threads;
pub mod types;

pub use follow::PythonRuntime;
pub use resolver::{FrameLocation, PythonProcess};
pub use types::{PythonError, PythonVersion, StructOffsets};
