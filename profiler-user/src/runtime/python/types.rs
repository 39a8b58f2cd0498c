//! CPython versions, where each keeps what sparkprof reads, and the errors
//! of reading it.
//!
//! The offsets are a checked-in table, not read from headers at run time:
//! a production host has no CPython headers (and often no compiler). Each
//! number was derived from the real headers of the version with
//! `offsetof` (`gcc -DPy_BUILD_CORE -I include/python3.X -I
//! include/python3.X/internal`); the test `offsets_match_the_headers`
//! recompiles that program against every interpreter installed under
//! `/root/.pyenv/versions` and fails if a number drifted. The layouts are
//! those of the default x86-64 release build of each minor version (no
//! `Py_DEBUG`/`Py_TRACE_REFS`, which add object header fields, and no
//! free-threaded 3.13t, whose objects differ): CPython keeps these structs
//! stable within a minor version, so patch releases share one row.

use std::{fmt, io, path::PathBuf};

use profiler_common::{PY_NO_OFFSET, PythonOffsets, python_layout};
use thiserror::Error;

/// A CPython version as `(major, minor)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PythonVersion {
    pub major: u8,
    pub minor: u8,
}

impl PythonVersion {
    pub const fn new(major: u8, minor: u8) -> Self {
        Self { major, minor }
    }

    /// From a `PY_VERSION_HEX` / `Py_Version` value (`0x030B07F0` is 3.11.7).
    pub fn from_hex(hex: u64) -> Self {
        Self::new((hex >> 24) as u8, (hex >> 16) as u8)
    }

    /// The offsets of this version, if sparkprof supports it.
    pub fn offsets(self) -> Option<&'static StructOffsets> {
        if self.major != 3 {
            return None;
        }
        match self.minor {
            8 => Some(&PY38),
            9 => Some(&PY39),
            10 => Some(&PY310),
            11 => Some(&PY311),
            12 => Some(&PY312),
            13 => Some(&PY313),
            _ => None,
        }
    }
}

impl fmt::Display for PythonVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// How a version encodes the instruction-to-line mapping of a code object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineTableFormat {
    /// 3.8–3.9 `co_lnotab`: (byte offset increment, signed line increment)
    /// pairs.
    Lnotab,
    /// 3.10 `co_linetable`: (byte length, signed line delta, -128 = none)
    /// pairs, one per address range.
    Linetable310,
    /// 3.11+ location table: variable-length entries of code units with
    /// line (and column) deltas.
    Locations,
}

/// What the raw instruction the kernel records means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstrFormat {
    /// 3.8–3.9 `int f_lasti`: byte offset of the last instruction started
    /// (-1 before the first).
    LastiBytes,
    /// 3.10 `int f_lasti`: index of the last instruction started, in 2-byte
    /// code units (-1 before the first).
    LastiCodeUnits,
    /// 3.11+ `prev_instr` / `instr_ptr`: a pointer into the code object's
    /// own `co_code_adaptive` array of 2-byte code units.
    Pointer,
}

/// Byte offsets into one CPython version's structs: what the frame walkers
/// read (`walk`, handed to the kernel as it is) and what userspace reads to
/// list threads and name code objects. [`PY_NO_OFFSET`] marks a field the
/// version does not have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StructOffsets {
    pub version: PythonVersion,
    /// What the frame walkers read, the kernel's and `threads::walk_frames`:
    /// the kernel gets it as it is. Its own doc says which field is what,
    /// per version.
    pub walk: PythonOffsets,
    pub line_table: LineTableFormat,
    pub instr: InstrFormat,

    /// `_PyRuntimeState.interpreters.head`: the newest interpreter.
    pub runtime_interpreters_head: u32,
    /// `_PyRuntimeState.interpreters.main`: the main interpreter.
    pub runtime_interpreters_main: u32,
    /// `PyInterpreterState.next`.
    pub interp_next: u32,
    /// `PyInterpreterState.tstate_head` (3.8–3.10) or `.threads.head` (3.11+).
    pub interp_threads_head: u32,
    /// `PyThreadState.next`.
    pub tstate_next: u32,
    /// `PyThreadState.interp`: checked against the list being walked.
    pub tstate_interp: u32,
    /// `PyThreadState.thread_id`: the thread's `pthread_t`.
    pub tstate_thread_id: u32,
    /// `PyThreadState.native_thread_id` (3.11+). 3.8–3.10 do not record
    /// the Linux thread id; it is read from the `pthread_t` instead.
    pub tstate_native_thread_id: u32,
    /// `PyThreadState._status` (3.12+), a bitfield in one 32-bit word.
    pub tstate_status: u32,
    /// Bit of `_status.active`: the thread state is the one its thread runs
    /// now. A thread that runs code in a sub-interpreter has a thread state
    /// in each interpreter, and only the one it runs is active.
    pub tstate_active_bit: u32,
    /// `PyObject.ob_type`.
    pub object_type: u32,
    /// `PyCodeObject.co_firstlineno` (an `int`).
    pub code_firstlineno: u32,
    /// `co_name`.
    pub code_name: u32,
    /// `co_filename`.
    pub code_filename: u32,
    /// `co_qualname` (3.11+).
    pub code_qualname: u32,
    /// `ob_size` of the code object (3.11+): its length in code units.
    pub code_size: u32,
    /// `co_code`, a bytes object (3.8–3.10).
    pub code_code: u32,
    /// `co_code_adaptive`, the inline bytecode (3.11+).
    pub code_code_adaptive: u32,
    /// `co_lnotab` (3.8–3.9) or `co_linetable` (3.10+), a bytes object.
    pub code_linetable: u32,
    /// `PyBytesObject.ob_size`.
    pub bytes_size: u32,
    /// `PyBytesObject.ob_sval`.
    pub bytes_data: u32,
    /// `PyASCIIObject.length` (in code points).
    pub unicode_length: u32,
    /// `PyASCIIObject.state`, a bitfield in one 32-bit word.
    pub unicode_state: u32,
    /// `sizeof(PyASCIIObject)`: where a compact ASCII string's data starts.
    pub unicode_ascii_size: u32,
    /// `sizeof(PyCompactUnicodeObject)`: where other compact strings' data
    /// starts.
    pub unicode_compact_size: u32,
    /// Lowest bit of `state.kind` (3 bits: 1, 2 or 4 bytes per code point).
    pub unicode_kind_shift: u32,
    /// Bit of `state.compact`.
    pub unicode_compact_bit: u32,
    /// Bit of `state.ascii`.
    pub unicode_ascii_bit: u32,
}

const NO: u32 = PY_NO_OFFSET;

/// 3.8: frames are `PyFrameObject`s chained by `f_back`.
pub const PY38: StructOffsets = StructOffsets {
    version: PythonVersion::new(3, 8),
    walk: PythonOffsets {
        layout: python_layout::FRAME_OBJECT,
        tstate_frame: 24,
        cframe_current_frame: NO,
        frame_previous: 24,
        frame_code: 32,
        frame_instr: 104,
        frame_owner: NO,
        owner_cstack: NO,
    },
    line_table: LineTableFormat::Lnotab,
    instr: InstrFormat::LastiBytes,
    runtime_interpreters_head: 32,
    runtime_interpreters_main: 40,
    interp_next: 0,
    interp_threads_head: 8,
    tstate_next: 8,
    tstate_interp: 16,
    tstate_thread_id: 176,
    tstate_native_thread_id: NO,
    tstate_status: NO,
    tstate_active_bit: NO,
    object_type: 8,
    code_firstlineno: 40,
    code_name: 112,
    code_filename: 104,
    code_qualname: NO,
    code_size: NO,
    code_code: 48,
    code_code_adaptive: NO,
    code_linetable: 120,
    bytes_size: 16,
    bytes_data: 32,
    unicode_length: 16,
    unicode_state: 32,
    unicode_ascii_size: 48,
    unicode_compact_size: 72,
    unicode_kind_shift: 2,
    unicode_compact_bit: 5,
    unicode_ascii_bit: 6,
};

/// 3.9: as 3.8 (the runtime moved to its own header, same layout).
pub const PY39: StructOffsets = StructOffsets {
    version: PythonVersion::new(3, 9),
    ..PY38
};

/// 3.10: `f_lasti` moved and counts code units; `co_linetable` replaces
/// `co_lnotab`.
pub const PY310: StructOffsets = StructOffsets {
    version: PythonVersion::new(3, 10),
    line_table: LineTableFormat::Linetable310,
    instr: InstrFormat::LastiCodeUnits,
    walk: PythonOffsets {
        frame_instr: 96,
        ..PY38.walk
    },
    ..PY38
};

/// 3.11: `_PyInterpreterFrame`s reached through `cframe`; the thread
/// records its Linux thread id; code objects hold their bytecode inline.
pub const PY311: StructOffsets = StructOffsets {
    version: PythonVersion::new(3, 11),
    walk: PythonOffsets {
        layout: python_layout::CFRAME,
        tstate_frame: 56,
        cframe_current_frame: 8,
        frame_previous: 48,
        frame_code: 32,
        frame_instr: 56,
        frame_owner: NO,
        owner_cstack: NO,
    },
    line_table: LineTableFormat::Locations,
    instr: InstrFormat::Pointer,
    runtime_interpreters_head: 40,
    runtime_interpreters_main: 48,
    interp_next: 0,
    interp_threads_head: 16,
    tstate_next: 8,
    tstate_interp: 16,
    tstate_thread_id: 152,
    tstate_native_thread_id: 160,
    tstate_status: NO,
    tstate_active_bit: NO,
    object_type: 8,
    code_firstlineno: 72,
    code_name: 120,
    code_filename: 112,
    code_qualname: 128,
    code_size: 16,
    code_code: NO,
    code_code_adaptive: 184,
    code_linetable: 136,
    bytes_size: 16,
    bytes_data: 32,
    unicode_length: 16,
    unicode_state: 32,
    unicode_ascii_size: 48,
    unicode_compact_size: 72,
    unicode_kind_shift: 2,
    unicode_compact_bit: 5,
    unicode_ascii_bit: 6,
};

/// 3.12: the interpreter frame is reordered and gains C-stack shim frames
/// (`owner == FRAME_OWNED_BY_CSTACK`); strings lost `wstr`.
pub const PY312: StructOffsets = StructOffsets {
    version: PythonVersion::new(3, 12),
    interp_threads_head: 72,
    tstate_thread_id: 136,
    tstate_native_thread_id: 144,
    tstate_status: 24,
    tstate_active_bit: 4,
    walk: PythonOffsets {
        cframe_current_frame: 0,
        frame_previous: 8,
        frame_code: 0,
        frame_instr: 56,
        frame_owner: 70,
        owner_cstack: 3,
        ..PY311.walk
    },
    code_firstlineno: 68,
    code_code_adaptive: 192,
    unicode_ascii_size: 40,
    unicode_compact_size: 56,
    ..PY311
};

/// 3.13: no `_PyCFrame`; the thread points at its frame directly; the
/// runtime starts with `_Py_DebugOffsets`.
pub const PY313: StructOffsets = StructOffsets {
    version: PythonVersion::new(3, 13),
    walk: PythonOffsets {
        layout: python_layout::CURRENT_FRAME,
        tstate_frame: 72,
        cframe_current_frame: NO,
        ..PY312.walk
    },
    runtime_interpreters_head: 632,
    runtime_interpreters_main: 640,
    interp_next: 7264,
    interp_threads_head: 7344,
    tstate_thread_id: 152,
    tstate_native_thread_id: 160,
    tstate_status: 32,
    code_code_adaptive: 200,
    ..PY312
};

/// Every supported version's table.
pub const ALL: [&StructOffsets; 6] = [&PY38, &PY39, &PY310, &PY311, &PY312, &PY313];

impl StructOffsets {
    /// Every numeric field by the name the header test prints it under.
    pub fn fields(&self) -> [(&'static str, u32); 35] {
        [
            ("runtime_interpreters_head", self.runtime_interpreters_head),
            ("runtime_interpreters_main", self.runtime_interpreters_main),
            ("interp_next", self.interp_next),
            ("interp_threads_head", self.interp_threads_head),
            ("tstate_next", self.tstate_next),
            ("tstate_interp", self.tstate_interp),
            ("tstate_thread_id", self.tstate_thread_id),
            ("tstate_native_thread_id", self.tstate_native_thread_id),
            ("tstate_frame", self.walk.tstate_frame),
            ("tstate_status", self.tstate_status),
            ("tstate_active_bit", self.tstate_active_bit),
            ("cframe_current_frame", self.walk.cframe_current_frame),
            ("frame_previous", self.walk.frame_previous),
            ("frame_code", self.walk.frame_code),
            ("frame_instr", self.walk.frame_instr),
            ("frame_owner", self.walk.frame_owner),
            ("owner_cstack", self.walk.owner_cstack),
            ("object_type", self.object_type),
            ("code_firstlineno", self.code_firstlineno),
            ("code_name", self.code_name),
            ("code_filename", self.code_filename),
            ("code_qualname", self.code_qualname),
            ("code_size", self.code_size),
            ("code_code", self.code_code),
            ("code_code_adaptive", self.code_code_adaptive),
            ("code_linetable", self.code_linetable),
            ("bytes_size", self.bytes_size),
            ("bytes_data", self.bytes_data),
            ("unicode_length", self.unicode_length),
            ("unicode_state", self.unicode_state),
            ("unicode_ascii_size", self.unicode_ascii_size),
            ("unicode_compact_size", self.unicode_compact_size),
            ("unicode_kind_shift", self.unicode_kind_shift),
            ("unicode_compact_bit", self.unicode_compact_bit),
            ("unicode_ascii_bit", self.unicode_ascii_bit),
        ]
    }

    /// A field of [`fields`](Self::fields) by name.
    pub fn field(&self, name: &str) -> Option<u32> {
        self.fields()
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, value)| value)
    }

    /// Bytes of a `PyThreadState` that hold every field read from it.
    pub fn tstate_read_len(&self) -> usize {
        span(&[
            self.tstate_next,
            self.tstate_interp,
            self.tstate_thread_id,
            self.tstate_native_thread_id,
            self.walk.tstate_frame,
            self.tstate_status,
        ])
    }

    /// Bytes of a code object that hold every field read from it (the
    /// inline bytecode aside).
    pub fn code_read_len(&self) -> usize {
        span(&[
            self.object_type,
            self.code_firstlineno,
            self.code_name,
            self.code_filename,
            self.code_qualname,
            self.code_size,
            self.code_code,
            self.code_linetable,
        ])
    }
}

/// One past the last byte of the 8-byte fields at `offsets`.
fn span(offsets: &[u32]) -> usize {
    offsets
        .iter()
        .filter(|&&o| o != PY_NO_OFFSET)
        .map(|&o| o as usize + 8)
        .max()
        .unwrap_or(0)
}

/// One `uint64_t` of 3.13's `_Py_DebugOffsets` (at the start of
/// `_PyRuntime`) that sparkprof also has in its table.
#[derive(Debug, Clone, Copy)]
pub struct DebugOffset {
    /// Byte position of the value in `_Py_DebugOffsets`.
    pub position: u32,
    /// The [`StructOffsets`] field it must equal (by its
    /// [`fields`](StructOffsets::fields) name).
    pub field: &'static str,
    /// The member in the C struct, for the header test.
    pub member: &'static str,
}

const fn debug(position: u32, field: &'static str, member: &'static str) -> DebugOffset {
    DebugOffset {
        position,
        field,
        member,
    }
}

/// The values of 3.13's `_Py_DebugOffsets` that cross-check the table
/// against the running interpreter (a build whose layout differs from the
/// table's is refused rather than misread). The positions are checked
/// against the 3.13 header by the header test.
pub const DEBUG_OFFSETS_313: [DebugOffset; 18] = [
    debug(
        40,
        "runtime_interpreters_head",
        "runtime_state.interpreters_head",
    ),
    debug(64, "interp_next", "interpreter_state.next"),
    debug(72, "interp_threads_head", "interpreter_state.threads_head"),
    debug(168, "tstate_next", "thread_state.next"),
    debug(176, "tstate_interp", "thread_state.interp"),
    debug(184, "tstate_frame", "thread_state.current_frame"),
    debug(192, "tstate_thread_id", "thread_state.thread_id"),
    debug(
        200,
        "tstate_native_thread_id",
        "thread_state.native_thread_id",
    ),
    debug(232, "frame_previous", "interpreter_frame.previous"),
    debug(240, "frame_code", "interpreter_frame.executable"),
    debug(248, "frame_instr", "interpreter_frame.instr_ptr"),
    debug(264, "frame_owner", "interpreter_frame.owner"),
    debug(280, "code_filename", "code_object.filename"),
    debug(288, "code_name", "code_object.name"),
    debug(296, "code_qualname", "code_object.qualname"),
    debug(304, "code_linetable", "code_object.linetable"),
    debug(312, "code_firstlineno", "code_object.firstlineno"),
    debug(344, "code_code_adaptive", "code_object.co_code_adaptive"),
];

/// Position of `version` (a `PY_VERSION_HEX`) in `_Py_DebugOffsets`.
pub const DEBUG_OFFSETS_VERSION: u32 = 8;
/// Position of `free_threaded` (non-zero for a 3.13t build, whose layouts
/// differ) in `_Py_DebugOffsets`.
pub const DEBUG_OFFSETS_FREE_THREADED: u32 = 16;
/// Bytes of `_Py_DebugOffsets` read for the cross-check.
pub const DEBUG_OFFSETS_READ_LEN: usize = 352;
/// The cookie `_Py_DebugOffsets` starts with.
pub const DEBUG_COOKIE: &[u8; 8] = b"xdebugpy";

/// Why a CPython process could not be read.
#[derive(Debug, Error)]
pub enum PythonError {
    /// The process exited (or became a zombie, which has no memory).
    #[error("process {pid} has exited")]
    ProcessGone { pid: u32 },
    /// A read of the process's memory failed: an address that is not
    /// mapped, or a permission problem.
    #[error(transparent)]
    Read(crate::sys::memory::MemoryError),
    /// A file of /proc or a module could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A module that should be an ELF file could not be parsed.
    #[error("{}: {reason}", path.display())]
    Elf { path: PathBuf, reason: String },
    /// Memory that should hold a CPython object of some type does not.
    #[error("process {pid}: no valid {what} at {addr:#x}: {reason}")]
    BadObject {
        pid: u32,
        what: &'static str,
        addr: u64,
        reason: String,
    },
}

impl From<crate::sys::memory::MemoryError> for PythonError {
    fn from(err: crate::sys::memory::MemoryError) -> Self {
        use crate::sys::memory::MemoryError;
        match err {
            MemoryError::Gone { pid } => Self::ProcessGone { pid },
            read @ MemoryError::Read { .. } => Self::Read(read),
        }
    }
}

impl PythonError {
    /// Whether the error says the process is gone (rather than that one
    /// address was bad).
    pub fn is_process_gone(&self) -> bool {
        matches!(self, Self::ProcessGone { .. })
    }
}
