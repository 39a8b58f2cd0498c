//! Fake CPython thread states and frame chains in this process's memory,
//! laid out as each supported CPython layout would have them, for the
//! sampler's Python walker to follow.

use profiler_common::{PY_MAX_FRAMES, PY_NO_OFFSET, PythonFrame, PythonOffsets, python_layout};
use sparkprof::collect::{PythonThread, RawPythonStack};

/// One frame: every layout's fields at fixed offsets (the offsets handed
/// to the kernel say where).
#[repr(C)]
struct FakeFrame {
    previous: u64,
    code: u64,
    instr: u64,
    owner: u64,
}

/// A `PyThreadState` or a `_PyCFrame`: the pointer the walker follows is
/// the second word.
#[repr(C)]
struct FakeIndirect {
    _pad: u64,
    target: u64,
}

const PREVIOUS: u32 = 0;
const CODE: u32 = 8;
const INSTR: u32 = 16;
const OWNER: u32 = 24;
const TARGET: u32 = 8;
/// CPython 3.12+'s `FRAME_OWNED_BY_CSTACK`.
const OWNED_BY_CSTACK: u64 = 3;

/// A fake thread whose frames the kernel should record as `expected`.
pub struct FakeThread {
    pub name: &'static str,
    pub offsets: PythonOffsets,
    pub expected: Vec<PythonFrame>,
    pub truncated: bool,
    // Kept alive, and never moved (boxed; the frames' vector is never
    // grown), while the kernel reads them.
    tstate: Box<FakeIndirect>,
    _cframe: Option<Box<FakeIndirect>>,
    _frames: Vec<FakeFrame>,
}

impl FakeThread {
    /// The address to register as the thread's `PyThreadState`.
    pub fn tstate(&self) -> u64 {
        &*self.tstate as *const FakeIndirect as u64
    }

    /// Thread `tid`, registered with this fake thread state.
    pub fn thread(&self, tid: u32) -> PythonThread {
        PythonThread {
            tid,
            tstate: self.tstate(),
        }
    }

    /// The Python stack the walker records for it.
    pub fn want(&self) -> RawPythonStack {
        RawPythonStack {
            frames: self.expected.clone(),
            truncated: self.truncated,
        }
    }

    /// The four layouts the walker knows, one case each.
    pub fn cases() -> Vec<FakeThread> {
        vec![
            // 3.13: current_frame, f_executable, instr_ptr, and a C-stack
            // shim frame in the chain that must be stepped over.
            Self::build(
                "python_3_13_frames",
                python_layout::CURRENT_FRAME,
                true,
                &[false, false, true, false, false],
            ),
            // 3.11: through cframe->current_frame, no owner field.
            Self::build(
                "python_3_11_frames",
                python_layout::CFRAME,
                false,
                &[false, false, false],
            ),
            // 3.8-3.10: frame objects, the instruction an int (f_lasti).
            Self::build(
                "python_3_8_frames",
                python_layout::FRAME_OBJECT,
                false,
                &[false, false, false],
            ),
            // A chain deeper than the kernel records: the innermost
            // PY_MAX_FRAMES, marked truncated.
            Self::build(
                "python_deep_chain_truncated",
                python_layout::CURRENT_FRAME,
                false,
                &[false; PY_MAX_FRAMES + 12],
            ),
        ]
    }

    /// A chain of frames, innermost first; `shims[i]` makes frame `i` a
    /// C-stack shim (3.12+), which the kernel must skip.
    fn build(name: &'static str, layout: u32, owner: bool, shims: &[bool]) -> Self {
        let mut frames: Vec<FakeFrame> = Vec::with_capacity(shims.len());
        let mut expected = Vec::new();
        for (index, &shim) in shims.iter().enumerate() {
            let index = index as u64;
            let code = 0x7f00_0000_1000 + index * 0x100;
            let (instr, expected_instr) = if layout == python_layout::FRAME_OBJECT {
                // Only the low 32 bits (the int f_lasti) are the instruction.
                let lasti = 10 + 2 * index;
                (0xdead_beef_0000_0000 | lasti, lasti)
            } else {
                let pointer = code + 0x40 + 2 * index;
                (pointer, pointer)
            };
            frames.push(FakeFrame {
                previous: 0,
                code,
                instr,
                owner: if shim { OWNED_BY_CSTACK } else { 0 },
            });
            if !shim {
                expected.push(PythonFrame {
                    code,
                    instr: expected_instr,
                });
            }
        }
        let addresses: Vec<u64> = frames
            .iter()
            .map(|frame| frame as *const FakeFrame as u64)
            .collect();
        for (index, frame) in frames.iter_mut().enumerate() {
            frame.previous = addresses.get(index + 1).copied().unwrap_or(0);
        }
        let innermost = addresses.first().copied().unwrap_or(0);
        let (tstate, cframe) = if layout == python_layout::CFRAME {
            let cframe = Box::new(FakeIndirect {
                _pad: 0,
                target: innermost,
            });
            let tstate = Box::new(FakeIndirect {
                _pad: 0,
                target: &*cframe as *const FakeIndirect as u64,
            });
            (tstate, Some(cframe))
        } else {
            (
                Box::new(FakeIndirect {
                    _pad: 0,
                    target: innermost,
                }),
                None,
            )
        };
        let truncated = expected.len() > PY_MAX_FRAMES;
        expected.truncate(PY_MAX_FRAMES);
        Self {
            name,
            offsets: PythonOffsets {
                layout,
                tstate_frame: TARGET,
                cframe_current_frame: if layout == python_layout::CFRAME {
                    TARGET
                } else {
                    PY_NO_OFFSET
                },
                frame_previous: PREVIOUS,
                frame_code: CODE,
                frame_instr: INSTR,
                frame_owner: if owner { OWNER } else { PY_NO_OFFSET },
                owner_cstack: OWNED_BY_CSTACK as u32,
            },
            expected,
            truncated,
            tstate,
            _cframe: cframe,
            _frames: frames,
        }
    }
}
