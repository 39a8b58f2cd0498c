//! The CPython runtime (`sparkprof::runtime::python`) against the
//! real interpreters installed under `/root/.pyenv/versions` (3.8 to 3.13)
//! and the real headers they ship: an integration suite. It runs as root
//! (reading another process's memory) and fails, never skips, when an
//! interpreter or gcc is missing.

use std::{
    collections::{BTreeSet, HashMap},
    fs,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::mpsc,
    thread,
    time::{Duration, Instant},
};

use profiler_common::{
    PY_FRAME_WINDOW_BYTES, PY_MAX_FRAMES, PY_NO_OFFSET, PythonFrame, PythonOffsets, python_layout,
};

use rstest::rstest;
use sparkprof::collect::PythonThread;
use sparkprof::runtime::python::{
    PythonError, PythonProcess, PythonRuntime, PythonVersion, StructOffsets,
    memory::Memory,
    module, threads,
    types::{ALL, DEBUG_OFFSETS_313, DEBUG_OFFSETS_FREE_THREADED, DEBUG_OFFSETS_VERSION},
};

const PYENV: &str = "/root/.pyenv/versions";

/// The installation of CPython 3.`minor`: its `bin/python3.X`.
fn interpreter(minor: u8) -> PathBuf {
    let install = installations()
        .into_iter()
        .find(|(m, _)| *m == minor)
        .unwrap_or_else(|| {
            panic!("no CPython 3.{minor} under {PYENV} (the tests need 3.8 to 3.13)")
        })
        .1;
    let python = install.join(format!("bin/python3.{minor}"));
    assert!(python.exists(), "{} is missing", python.display());
    python
}

/// Every `3.X.Y` directory under [`PYENV`] as (X, path).
fn installations() -> Vec<(u8, PathBuf)> {
    let entries = fs::read_dir(PYENV).unwrap_or_else(|e| panic!("{PYENV}: {e}"));
    let mut found: Vec<(u8, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let mut parts = name.split('.');
            (parts.next()? == "3").then_some(())?;
            let minor: u8 = parts.next()?.parse().ok()?;
            parts.next()?.parse::<u32>().ok()?;
            Some((minor, entry.path()))
        })
        .collect();
    found.sort();
    found
}

// ---------------------------------------------------------------------------
// The offset table against the headers
// ---------------------------------------------------------------------------

/// Prints `name value` (or `name none`) for every field of the table,
/// computed by the compiler from the version's own headers.
const OFFSETS_C: &str = r#"
#include <Python.h>
#include <frameobject.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#if PY_MINOR_VERSION == 8
#include <internal/pycore_pystate.h>
#else
#include <internal/pycore_interp.h>
#include <internal/pycore_runtime.h>
#endif
#if PY_MINOR_VERSION >= 11
#include <internal/pycore_frame.h>
#endif

#define P(name, value) printf("%s %lld\n", name, (long long)(value))
#define NONE(name) printf("%s none\n", name)

/* The lowest bit a bitfield of PyASCIIObject.state occupies. */
static int state_bit(void (*set)(PyASCIIObject *)) {
    PyASCIIObject o;
    unsigned int w;
    memset(&o, 0, sizeof o);
    set(&o);
    memcpy(&w, (char *)&o + offsetof(PyASCIIObject, state), sizeof w);
    return __builtin_ctz(w);
}
static void set_kind(PyASCIIObject *o) { o->state.kind = 7; }
static void set_compact(PyASCIIObject *o) { o->state.compact = 1; }
static void set_ascii(PyASCIIObject *o) { o->state.ascii = 1; }
#if PY_MINOR_VERSION >= 12
/* The bit PyThreadState._status.active occupies. */
static int active_bit(void) {
    PyThreadState t;
    unsigned int w;
    memset(&t, 0, sizeof t);
    t._status.active = 1;
    memcpy(&w, (char *)&t + offsetof(PyThreadState, _status), sizeof w);
    return sizeof t._status == 4 ? __builtin_ctz(w) : -1;
}
#endif

int main(void) {
    P("version_hex", PY_VERSION_HEX);
    P("runtime_interpreters_head", offsetof(_PyRuntimeState, interpreters.head));
    P("runtime_interpreters_main", offsetof(_PyRuntimeState, interpreters.main));
    P("interp_next", offsetof(PyInterpreterState, next));
#if PY_MINOR_VERSION <= 10
    P("interp_threads_head", offsetof(PyInterpreterState, tstate_head));
#else
    P("interp_threads_head", offsetof(PyInterpreterState, threads.head));
#endif
    P("tstate_next", offsetof(PyThreadState, next));
    P("tstate_interp", offsetof(PyThreadState, interp));
    P("tstate_thread_id", offsetof(PyThreadState, thread_id));
#if PY_MINOR_VERSION >= 11
    P("tstate_native_thread_id", offsetof(PyThreadState, native_thread_id));
#else
    NONE("tstate_native_thread_id");
#endif
#if PY_MINOR_VERSION >= 12
    P("tstate_status", offsetof(PyThreadState, _status));
    P("tstate_active_bit", active_bit());
#else
    NONE("tstate_status");
    NONE("tstate_active_bit");
#endif
#if PY_MINOR_VERSION <= 10
    P("tstate_frame", offsetof(PyThreadState, frame));
    NONE("cframe_current_frame");
    P("frame_previous", offsetof(PyFrameObject, f_back));
    P("frame_code", offsetof(PyFrameObject, f_code));
    P("frame_instr", offsetof(PyFrameObject, f_lasti));
    if (sizeof(((PyFrameObject *)0)->f_lasti) != 4) return 1;
    NONE("frame_owner");
    NONE("owner_cstack");
#else
#if PY_MINOR_VERSION <= 12
    P("tstate_frame", offsetof(PyThreadState, cframe));
    P("cframe_current_frame", offsetof(_PyCFrame, current_frame));
    P("frame_code", offsetof(_PyInterpreterFrame, f_code));
    P("frame_instr", offsetof(_PyInterpreterFrame, prev_instr));
#else
    P("tstate_frame", offsetof(PyThreadState, current_frame));
    NONE("cframe_current_frame");
    P("frame_code", offsetof(_PyInterpreterFrame, f_executable));
    P("frame_instr", offsetof(_PyInterpreterFrame, instr_ptr));
#endif
    P("frame_previous", offsetof(_PyInterpreterFrame, previous));
#if PY_MINOR_VERSION >= 12
    P("frame_owner", offsetof(_PyInterpreterFrame, owner));
    P("owner_cstack", FRAME_OWNED_BY_CSTACK);
#else
    NONE("frame_owner");
    NONE("owner_cstack");
#endif
#endif
    P("object_type", offsetof(PyObject, ob_type));
    P("code_firstlineno", offsetof(PyCodeObject, co_firstlineno));
    P("code_name", offsetof(PyCodeObject, co_name));
    P("code_filename", offsetof(PyCodeObject, co_filename));
#if PY_MINOR_VERSION >= 11
    P("code_qualname", offsetof(PyCodeObject, co_qualname));
    P("code_size", offsetof(PyCodeObject, ob_base.ob_size));
    NONE("code_code");
    P("code_code_adaptive", offsetof(PyCodeObject, co_code_adaptive));
    if (sizeof(_Py_CODEUNIT) != 2) return 1;
#else
    NONE("code_qualname");
    NONE("code_size");
    P("code_code", offsetof(PyCodeObject, co_code));
    NONE("code_code_adaptive");
#endif
#if PY_MINOR_VERSION <= 9
    P("code_linetable", offsetof(PyCodeObject, co_lnotab));
#else
    P("code_linetable", offsetof(PyCodeObject, co_linetable));
#endif
    P("bytes_size", offsetof(PyBytesObject, ob_base.ob_size));
    P("bytes_data", offsetof(PyBytesObject, ob_sval));
    P("unicode_length", offsetof(PyASCIIObject, length));
    P("unicode_state", offsetof(PyASCIIObject, state));
    P("unicode_ascii_size", sizeof(PyASCIIObject));
    P("unicode_compact_size", sizeof(PyCompactUnicodeObject));
    P("unicode_kind_shift", state_bit(set_kind));
    P("unicode_compact_bit", state_bit(set_compact));
    P("unicode_ascii_bit", state_bit(set_ascii));
#if PY_MINOR_VERSION == 13
DEBUG_OFFSET_LINES
#endif
    return 0;
}
"#;

/// The table in `types.rs` equals what gcc computes from each installed
/// version's headers (3.8 to 3.13 must all be installed).
#[test]
fn offsets_match_the_headers() {
    let dir = tempfile::tempdir().unwrap();
    let mut debug_lines: Vec<String> = DEBUG_OFFSETS_313
        .iter()
        .map(|d| {
            format!(
                "    P(\"debug:{}\", offsetof(_Py_DebugOffsets, {}));",
                d.field, d.member
            )
        })
        .collect();
    debug_lines.push("    P(\"debug:version\", offsetof(_Py_DebugOffsets, version));".into());
    debug_lines
        .push("    P(\"debug:free_threaded\", offsetof(_Py_DebugOffsets, free_threaded));".into());
    let source = dir.path().join("offsets.c");
    fs::write(
        &source,
        OFFSETS_C.replace("DEBUG_OFFSET_LINES", &debug_lines.join("\n")),
    )
    .unwrap();

    let installs = installations();
    let mut checked = BTreeSet::new();
    for (minor, install) in &installs {
        let Some(table) = ALL.iter().find(|t| t.version.minor == *minor) else {
            continue; // 2.7, 3.6, 3.7: not supported
        };
        let include = install.join(format!("include/python3.{minor}"));
        assert!(include.is_dir(), "{} is missing", include.display());
        let binary = dir.path().join(format!("offsets3{minor}"));
        let output = Command::new("gcc")
            .arg("-DPy_BUILD_CORE")
            .arg("-I")
            .arg(&include)
            .arg("-I")
            .arg(include.join("internal"))
            .arg(&source)
            .arg("-o")
            .arg(&binary)
            .output()
            .expect("gcc must be installed for this test");
        assert!(
            output.status.success(),
            "gcc failed for {}:\n{}",
            install.display(),
            String::from_utf8_lossy(&output.stderr)
        );
        let output = Command::new(&binary).output().unwrap();
        assert!(output.status.success(), "{} failed", binary.display());
        let printed: HashMap<String, String> = String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();

        let hex: u64 = printed["version_hex"].parse().unwrap();
        assert_eq!(
            ((hex >> 24) as u8, (hex >> 16) as u8),
            (3, *minor),
            "{}",
            install.display()
        );
        for (name, ours) in table.fields() {
            let theirs = printed
                .get(name)
                .unwrap_or_else(|| panic!("the C program does not print {name}"));
            let theirs = if theirs == "none" {
                PY_NO_OFFSET
            } else {
                theirs.parse().unwrap()
            };
            assert_eq!(
                ours,
                theirs,
                "3.{minor} {name}: table says {ours}, headers of {} say {theirs}",
                install.display()
            );
        }
        if *minor == 13 {
            for d in DEBUG_OFFSETS_313 {
                assert_eq!(
                    printed[&format!("debug:{}", d.field)],
                    d.position.to_string(),
                    "_Py_DebugOffsets.{}",
                    d.member
                );
            }
            assert_eq!(printed["debug:version"], DEBUG_OFFSETS_VERSION.to_string());
            assert_eq!(
                printed["debug:free_threaded"],
                DEBUG_OFFSETS_FREE_THREADED.to_string()
            );
        }
        checked.insert(*minor);
    }
    assert_eq!(
        checked,
        (8..=13).collect::<BTreeSet<u8>>(),
        "every supported version must be installed under {PYENV}"
    );
}

#[test]
fn kernel_offsets_per_layout() {
    for table in ALL {
        let k = table.walk;
        match table.version.minor {
            8..=10 => {
                assert_eq!(k.layout, python_layout::FRAME_OBJECT);
                assert_eq!(k.cframe_current_frame, PY_NO_OFFSET);
                assert_eq!(k.frame_owner, PY_NO_OFFSET);
            }
            11 | 12 => {
                assert_eq!(k.layout, python_layout::CFRAME);
                assert_ne!(k.cframe_current_frame, PY_NO_OFFSET);
            }
            _ => {
                assert_eq!(k.layout, python_layout::CURRENT_FRAME);
                assert_eq!(k.cframe_current_frame, PY_NO_OFFSET);
            }
        }
        if table.version.minor >= 12 {
            assert_ne!(k.frame_owner, PY_NO_OFFSET);
            assert_eq!(k.owner_cstack, 3);
        }
        // The kernel reads a frame's fields from one copy of its first
        // PY_FRAME_WINDOW_BYTES (8-byte loads; `owner` is a byte), and
        // walks no version whose fields lie beyond.
        for (name, offset, size) in [
            ("frame_previous", k.frame_previous, 8),
            ("frame_code", k.frame_code, 8),
            ("frame_instr", k.frame_instr, 8),
            ("frame_owner", k.frame_owner, 1),
        ] {
            if offset != PY_NO_OFFSET {
                assert!(
                    offset + size <= PY_FRAME_WINDOW_BYTES,
                    "{}: {name} at {offset} is beyond the kernel's frame window",
                    table.version
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Real interpreters
// ---------------------------------------------------------------------------

/// The script: a known call chain on three threads, each ending in
/// `time.sleep`; "ready" once all three are in the innermost function.
/// Names exercise every string kind: `entry_é` (1 byte per character, not
/// ASCII), `level_three_λ` (2 bytes), and the file name has an emoji (4
/// bytes). `fork` mode: a child forked from a process with a second thread
/// runs the chain on its only thread.
const SCRIPT: &str = r#"import os
import sys
import threading
import time

lock = threading.Lock()
arrived = 0
EXPECTED = 3


def level_three_λ():
    global arrived
    with lock:
        arrived += 1
        if arrived == EXPECTED:
            print("ready", flush=True)
    time.sleep(3600)  # MARK sleep


class Worker:
    def level_two(self):
        level_three_λ()  # MARK call level_three


def level_one():
    Worker().level_two()  # MARK call level_two


def entry_é():
    level_one()  # MARK call level_one


def main():
    global EXPECTED
    if sys.argv[1:] == ["fork"]:
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
        EXPECTED = 1
        pid = os.fork()
        if pid == 0:
            entry_é()  # MARK call entry in child
        print("child", pid, flush=True)
        time.sleep(3600)
    for _ in range(2):
        threading.Thread(target=entry_é, daemon=True).start()
    entry_é()  # MARK call entry


main()  # MARK call main
"#;

/// The line of the `# MARK what` comment.
fn mark(what: &str) -> u32 {
    let marker = format!("# MARK {what}");
    SCRIPT
        .lines()
        .position(|l| l.trim_end().ends_with(&marker))
        .unwrap_or_else(|| panic!("no {marker}")) as u32
        + 1
}

/// A process started by a test, killed (and reaped) when dropped, with its
/// stdout lines on a channel.
struct Started {
    child: Option<Child>,
    /// Other processes it started that the test must end (a forked child).
    extra: Vec<u32>,
    lines: mpsc::Receiver<String>,
}

impl Started {
    fn python(python: &Path, script: &Path, args: &[&str]) -> Self {
        let mut command = Command::new(python);
        command.arg("-I").arg(script).args(args);
        Self::spawn(command)
    }

    fn spawn(mut command: Command) -> Self {
        let mut child = command
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{command:?}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child: Some(child),
            extra: Vec::new(),
            lines,
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// `code` run by Python 3.`minor` (`python -I -c code`).
    fn python_code(minor: u8, code: &str) -> Self {
        let mut command = Command::new(interpreter(minor));
        command.args(["-I", "-c", code]);
        Self::spawn(command)
    }

    /// The number the next line gives after `prefix` (a thread's id).
    fn id_after(&self, prefix: &str) -> u32 {
        let line = self.line();
        line.strip_prefix(prefix)
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("unexpected line {line:?}"))
    }

    fn line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the script printed nothing within 30 s")
    }

    /// Kills and reaps the process: its pid is gone afterwards.
    fn kill(&mut self) {
        for &pid in &self.extra {
            // SAFETY: plain system call; `pid` is a process this test
            // started (a fork of its own Python).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        self.extra.clear();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The thread ids of a process, from /proc/PID/task.
fn tasks(pid: u32) -> BTreeSet<u32> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Waits until every thread of `pid` sits in a sleeping system call
/// (`select`, `nanosleep`, `clock_nanosleep`, `pselect6`, `poll`, `ppoll`
/// on x86-64): then no thread is between "ready" and its `time.sleep`.
fn wait_until_asleep(pid: u32, threads: usize) {
    const SLEEPS: [u32; 6] = [23, 35, 230, 270, 7, 271];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let tids = tasks(pid);
        let asleep = tids
            .iter()
            .filter(|tid| {
                fs::read_to_string(format!("/proc/{pid}/task/{tid}/syscall"))
                    .ok()
                    .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
                    .is_some_and(|nr| SLEEPS.contains(&nr))
            })
            .count();
        if tids.len() == threads && asleep == threads {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "process {pid}: {asleep} of {} threads asleep after 20 s",
            tids.len()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// What one frame must be called: a function name and a line.
struct Expected {
    function: String,
    line: Option<u32>,
}

fn expect(function: &str, line: u32) -> Expected {
    Expected {
        function: function.into(),
        line: Some(line),
    }
}

/// The chain every thread runs, innermost first.
fn chain(minor: u8) -> Vec<Expected> {
    let level_two = if minor >= 11 {
        "Worker.level_two"
    } else {
        "level_two"
    };
    vec![
        expect("level_three_λ", mark("sleep")),
        expect(level_two, mark("call level_three")),
        expect("level_one", mark("call level_two")),
        expect("entry_é", mark("call level_one")),
    ]
}

/// Reads a thread's frames as the kernel would and names them: as
/// (function, file, line, the raw frame).
fn named_stack(
    process: &mut PythonProcess,
    tstate: u64,
) -> Vec<(String, String, Option<u32>, PythonFrame)> {
    let (frames, truncated) = process.read_stack(tstate, PY_MAX_FRAMES).unwrap();
    assert!(!truncated, "a short stack was truncated");
    frames
        .iter()
        .map(|frame| {
            let location = process
                .frame_location(frame)
                .unwrap_or_else(|e| panic!("frame {frame:?}: {e}"));
            let name = process.frame_name(frame).unwrap();
            let expected_name = match location.line {
                Some(line) => format!("{} ({}:{line})", location.function, location.file),
                None => format!("{} ({})", location.function, location.file),
            };
            assert_eq!(name, expected_name);
            eprintln!("  {name}");
            (
                location.function.to_string(),
                location.file.to_string(),
                location.line,
                *frame,
            )
        })
        .collect()
}

fn assert_frames(
    stack: &[(String, String, Option<u32>, PythonFrame)],
    expected: &[Expected],
    script: &str,
    context: &str,
) {
    assert!(
        stack.len() >= expected.len(),
        "{context}: {} frames, expected at least {}: {stack:#?}",
        stack.len(),
        expected.len()
    );
    for (i, (want, got)) in expected.iter().zip(stack).enumerate() {
        assert_eq!(
            (want.function.as_str(), script, want.line),
            (got.0.as_str(), got.1.as_str(), got.2),
            "{context}: frame {i} of {stack:#?}"
        );
    }
}

/// The whole path on one interpreter version: probe, threads, the kernel's
/// walk, names and lines, a forked child, garbage addresses, and the
/// process exiting.
fn check_version(minor: u8) {
    let python = interpreter(minor);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("chain_😀.py");
    fs::write(&script, SCRIPT).unwrap();
    let script_name = script.to_str().unwrap().to_owned();

    let mut started = Started::python(&python, &script, &[]);
    assert_eq!(started.line(), "ready");
    let pid = started.pid();
    wait_until_asleep(pid, 3);

    let mut process = PythonProcess::probe(pid)
        .unwrap()
        .unwrap_or_else(|| panic!("3.{minor} (pid {pid}) not recognized"));
    assert_eq!(process.version(), (3, minor));
    assert_eq!(process.pid(), pid);
    let module = process.module().file_name().unwrap().to_str().unwrap();
    assert!(
        module.starts_with(&format!("libpython3.{minor}.so")),
        "module {module}"
    );
    let kernel = process.kernel_offsets();
    assert_eq!(kernel, process.struct_offsets().walk);

    let threads = process.threads().unwrap();
    let tids: BTreeSet<u32> = threads.iter().map(|t| t.tid).collect();
    assert_eq!(threads.len(), 3, "{threads:?}");
    assert_eq!(tids, tasks(pid), "thread ids");

    let mut main_chain = chain(minor);
    main_chain.push(expect("main", mark("call entry")));
    main_chain.push(expect("<module>", mark("call main")));
    for &PythonThread { tid, tstate } in &threads {
        eprintln!("3.{minor} thread {tid}:");
        let stack = named_stack(&mut process, tstate);
        let context = format!("3.{minor} thread {tid}");
        if tid == pid {
            assert_frames(&stack, &main_chain, &script_name, &context);
            assert_eq!(stack.len(), main_chain.len(), "{context}: {stack:#?}");
            // 3.12+ have C-stack shim frames in the chain (at least the
            // one below <module>): the walk does step over them.
            if minor >= 12 {
                let offsets = process.struct_offsets();
                let unchecked = StructOffsets {
                    walk: PythonOffsets {
                        frame_owner: PY_NO_OFFSET,
                        ..offsets.walk
                    },
                    ..*offsets
                };
                let (all, _) =
                    threads::walk_frames(&Memory::new(pid), &unchecked, tstate, PY_MAX_FRAMES)
                        .unwrap();
                assert!(all.len() > stack.len(), "{context}: no shim frame seen");
            }
        } else {
            assert_frames(&stack, &chain(minor), &script_name, &context);
            // Then threading.py's run, _bootstrap_inner, _bootstrap.
            let rest: Vec<&str> = stack[4..].iter().map(|f| f.0.as_str()).collect();
            assert_eq!(rest.len(), 3, "{context}: {stack:#?}");
            for (got, want) in rest.iter().zip(["run", "_bootstrap_inner", "_bootstrap"]) {
                assert!(got.ends_with(want), "{context}: {got} is not {want}");
            }
            assert!(
                stack[4..]
                    .iter()
                    .all(|f| f.1.ends_with("/threading.py") && f.2.is_some()),
                "{context}: {stack:#?}"
            );
        }
    }
    let cached = process.cached_code_objects();
    assert!(cached >= 7, "{cached} code objects cached");

    // Garbage instead of a code object: an error, never a panic or a name.
    let main_tstate = threads.iter().find(|t| t.tid == pid).unwrap().tstate;
    let real = process.read_stack(main_tstate, 1).unwrap().0[0];
    for code in [
        0,
        1,
        0xdead_beef,
        u64::MAX - 7,
        main_tstate,
        process.runtime_address(),
        real.code + 8,
        real.code + 1,
    ] {
        let frame = PythonFrame {
            code,
            instr: real.instr,
        };
        assert!(
            process.frame_name(&frame).is_err(),
            "3.{minor}: code {code:#x} was named"
        );
    }
    // A garbage instruction in a real code object: the name without a line.
    let name = process
        .frame_name(&PythonFrame {
            code: real.code,
            instr: 0x7fff_ffff,
        })
        .unwrap();
    assert_eq!(name, format!("level_three_λ ({script_name})"));

    // A forked child: its one thread is found under its own id.
    let mut forked = Started::python(&python, &script, &["fork"]);
    let mut child = None;
    let mut ready = false;
    while child.is_none() || !ready {
        let line = forked.line();
        if let Some(pid) = line.strip_prefix("child ") {
            child = Some(pid.parse::<u32>().unwrap());
        } else {
            assert_eq!(line, "ready");
            ready = true;
        }
    }
    let child = child.unwrap();
    forked.extra.push(child);
    wait_until_asleep(child, 1);
    let mut child_process = PythonProcess::probe(child).unwrap().unwrap();
    let child_threads = child_process.threads().unwrap();
    assert_eq!(
        child_threads.iter().map(|t| t.tid).collect::<Vec<_>>(),
        vec![child],
        "3.{minor} forked child"
    );
    let stack = named_stack(&mut child_process, child_threads[0].tstate);
    let mut fork_chain = chain(minor);
    fork_chain.push(expect("main", mark("call entry in child")));
    fork_chain.push(expect("<module>", mark("call main")));
    assert_frames(
        &stack,
        &fork_chain,
        &script_name,
        &format!("3.{minor} fork"),
    );
    drop(forked);

    // The process exits: errors, no panics; names already read stay.
    let before = process.frame_name(&real).unwrap();
    started.kill();
    assert!(process.threads().unwrap_err().is_process_gone());
    assert!(process.read_stack(main_tstate, 8).is_err());
    assert_eq!(process.frame_name(&real).unwrap(), before);
    assert!(
        process
            .frame_name(&PythonFrame {
                code: real.code + 64,
                instr: 0
            })
            .is_err()
    );
    assert!(PythonProcess::probe(pid).is_err());
}

#[rstest]
fn every_version_end_to_end(#[values(8, 9, 10, 11, 12, 13)] minor: u8) {
    check_version(minor);
}

/// The symbols and version of every installed libpython, as a probe
/// reads them: `Py_Version` from 3.11, the exported API before.
#[test]
fn installed_libraries_have_symbols_and_versions() {
    for minor in 8..=13u8 {
        let install = interpreter(minor);
        let lib = install
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join(format!("lib/libpython3.{minor}.so.1.0"));
        let file = fs::File::open(&lib).unwrap_or_else(|e| panic!("{}: {e}", lib.display()));
        let symbols = module::ModuleSymbols::load(file, &lib).unwrap();
        assert!(symbols.runtime.is_some(), "{}", lib.display());
        assert!(symbols.code_type.is_some() && symbols.unicode_type.is_some());
        assert!(symbols.bytes_type.is_some());
        assert!(!symbols.segments.0.is_empty());
        if minor >= 11 {
            assert!(symbols.py_version.is_some(), "{}", lib.display());
        } else {
            assert_eq!(
                symbols.marker_version,
                Some(PythonVersion::new(3, minor)),
                "{}",
                lib.display()
            );
        }
    }
}

/// A libpython whose file name does not tell the version (and no
/// `Py_Version`, 3.8–3.10): the version comes from its exported API.
#[test]
fn version_from_exported_api() {
    for minor in 8..=10u8 {
        let python = interpreter(minor);
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("chain_😀.py");
        fs::write(&script, SCRIPT).unwrap();
        let lib = python
            .parent()
            .unwrap()
            .parent()
            .unwrap()
            .join(format!("lib/libpython3.{minor}.so.1.0"));
        let renamed = dir.path().join("libpython-custom.so");
        fs::copy(&lib, &renamed).unwrap();
        // The loader finds the soname through the link; the process maps
        // (and /proc shows) the file it points to.
        std::os::unix::fs::symlink(&renamed, dir.path().join(lib.file_name().unwrap())).unwrap();
        let mut command = Command::new(&python);
        command
            .arg("-I")
            .arg(&script)
            .env("LD_LIBRARY_PATH", dir.path());
        let started = Started::spawn(command);
        assert_eq!(started.line(), "ready");
        let pid = started.pid();
        wait_until_asleep(pid, 3);
        let mut process = PythonProcess::probe(pid).unwrap().unwrap();
        assert_eq!(process.module(), renamed, "3.{minor}");
        assert_eq!(process.version(), (3, minor));
        let threads = process.threads().unwrap();
        let tstate = threads.iter().find(|t| t.tid == pid).unwrap().tstate;
        let stack = named_stack(&mut process, tstate);
        assert_frames(
            &stack,
            &chain(minor),
            script.to_str().unwrap(),
            &format!("3.{minor} renamed"),
        );
    }
}

/// A process in its own PID namespace (as in a container): the thread
/// ids CPython and the C library record are the namespace's; the list
impl Started {
    /// Starts `unshare ... -- python SCRIPT` and returns it with the pid of
    /// the interpreter (unshare's child) once the script is ready and its
    /// 3 threads are asleep.
    fn unshared(command: Command) -> (Self, u32) {
        let mut started = Self::spawn(command);
        let unshare = started.pid();
        assert_eq!(started.line(), "ready");
        let children =
            fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children")).unwrap();
        let pid: u32 = children
            .split_whitespace()
            .next()
            .expect("unshare's child")
            .parse()
            .unwrap();
        started.extra.push(pid);
        wait_until_asleep(pid, 3);
        (started, pid)
    }
}

/// Every thread of `pid` is listed once, with the host's ids, and the main
/// thread's frames are [`SCRIPT`]'s chain up to `<module>`, in `script`.
fn assert_main_thread_chain(
    process: &mut PythonProcess,
    pid: u32,
    minor: u8,
    script: &str,
    context: &str,
) {
    let threads = process.threads().unwrap();
    assert_eq!(
        threads.iter().map(|t| t.tid).collect::<BTreeSet<_>>(),
        tasks(pid),
        "3.{minor} {context}"
    );
    let tstate = threads.iter().find(|t| t.tid == pid).unwrap().tstate;
    let stack = named_stack(process, tstate);
    let mut main_chain = chain(minor);
    main_chain.push(expect("main", mark("call entry")));
    main_chain.push(expect("<module>", mark("call main")));
    assert_frames(&stack, &main_chain, script, &format!("3.{minor} {context}"));
}

/// gives this host's.
fn check_pid_namespace(minor: u8) {
    let python = interpreter(minor);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("chain_😀.py");
    fs::write(&script, SCRIPT).unwrap();
    let mut command = Command::new("unshare");
    command
        .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(&python)
        .arg("-I")
        .arg(&script);
    let (_started, pid) = Started::unshared(command);
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("NSpid:") && l.ends_with("\t1")),
        "not pid 1 of a namespace: {status}"
    );

    let mut process = PythonProcess::probe(pid).unwrap().unwrap();
    assert_eq!(process.version(), (3, minor));
    assert_main_thread_chain(
        &mut process,
        pid,
        minor,
        script.to_str().unwrap(),
        "in a PID namespace",
    );
}

#[rstest]
fn in_a_pid_namespace(#[values(9, 12)] minor: u8) {
    check_pid_namespace(minor);
}

/// A container's view: CPython 3.`minor` runs in its own mount and PID
/// namespaces from a path that exists only there (its installation bound
/// onto a tmpfs the host does not see, the original hidden), with its
/// script there too. The interpreter must be found through
/// /proc/PID/map_files or /proc/PID/root, and its frames read as usual.
fn check_mount_namespace(minor: u8) {
    let python = interpreter(minor);
    let install = python.parent().unwrap().parent().unwrap().to_owned();
    let host_dir = tempfile::tempdir().unwrap();
    let script = host_dir.path().join("script.py");
    fs::write(&script, SCRIPT).unwrap();
    let root = host_dir.path().join("container");
    fs::create_dir(&root).unwrap();
    let inside = root.join("opt");
    let setup = format!(
        "set -e; mount -t tmpfs container {root}; mkdir {inside} {inside}/python {inside}/app; \
         mount --bind {install} {inside}/python; mount -t tmpfs hidden {pyenv}; \
         cp {script} {inside}/app/chain_😀.py; \
         LD_LIBRARY_PATH={inside}/python/lib exec {inside}/python/bin/python3.{minor} -I {inside}/app/chain_😀.py",
        root = root.display(),
        inside = inside.display(),
        install = install.display(),
        pyenv = PYENV,
        script = script.display(),
    );
    let mut command = Command::new("unshare");
    command
        .args([
            "--mount",
            "--propagation",
            "private",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
        ])
        .args(["sh", "-c", &setup]);
    let (_started, pid) = Started::unshared(command);
    // The container's paths are not the host's.
    let maps = fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let container_python = inside.join("python");
    assert!(
        maps.contains(&*container_python.to_string_lossy()),
        "3.{minor} not run from {}:\n{maps}",
        container_python.display()
    );
    assert!(
        !container_python.exists(),
        "{} is visible on the host",
        container_python.display()
    );

    let mut process = PythonProcess::probe(pid)
        .unwrap()
        .expect("the container's CPython found");
    assert_eq!(process.version(), (3, minor));
    assert!(
        process.module().starts_with(&container_python),
        "{}",
        process.module().display()
    );
    assert_main_thread_chain(
        &mut process,
        pid,
        minor,
        inside.join("app/chain_😀.py").to_str().unwrap(),
        "in a container",
    );
}

#[rstest]
fn in_a_container(#[values(9, 12)] minor: u8) {
    check_mount_namespace(minor);
}

/// A thread that runs code in a sub-interpreter (3.12's
/// `_xxsubinterpreters`, 3.13's `_interpreters`), and so has a thread state
/// in each interpreter, says ready with its native id.
const SUB_INTERPRETER_SCRIPT: &str = r#"
import sys, threading, time
try:
    import _xxsubinterpreters as interpreters
except ImportError:
    import _interpreters as interpreters
code = """
def sub_leaf():
    while True:
        pass
def sub_outer():
    sub_leaf()
sub_outer()
"""
interp = interpreters.create()
run = getattr(interpreters, "run_string", None) or getattr(interpreters, "exec")
worker = threading.Thread(target=run, args=(interp, code), daemon=True)
worker.start()
time.sleep(0.2)
print("ready", worker.native_id, flush=True)
time.sleep(600)
"#;

/// On 3.13, the sub-interpreter's thread state is the one read for the
/// thread that runs it (its main-interpreter one is parked in the call that
/// switched). 3.12 runs the code on the interpreter's first thread state,
/// which names the main thread that created it (CPython gh-109860): there
/// the worker keeps its main-interpreter frames, and the main thread, asleep,
/// keeps its own rather than taking code it does not run.
fn check_sub_interpreter(minor: u8) {
    let started = Started::python_code(minor, SUB_INTERPRETER_SCRIPT);
    let worker = started.id_after("ready ");
    let pid = started.pid();
    let mut process = PythonProcess::probe(pid).unwrap().unwrap();
    let threads = process.threads().unwrap();
    assert_eq!(
        threads.iter().map(|t| t.tid).collect::<BTreeSet<_>>(),
        tasks(pid),
        "3.{minor}: every thread once"
    );
    let mut functions = |tid: u32| -> Vec<(String, String)> {
        let tstate = threads.iter().find(|t| t.tid == tid).unwrap().tstate;
        named_stack(&mut process, tstate)
            .into_iter()
            .map(|(function, file, ..)| (function, file))
            .collect()
    };
    let owned = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|&(f, file)| (f.to_owned(), file.to_owned()))
            .collect()
    };
    assert_eq!(
        functions(pid),
        owned(&[("<module>", "<string>")]),
        "3.{minor}: the main thread's frames"
    );
    let worker_frames = functions(worker);
    if minor >= 13 {
        assert_eq!(
            worker_frames,
            owned(&[
                ("sub_leaf", "<string>"),
                ("sub_outer", "<string>"),
                ("<module>", "<string>")
            ]),
            "3.{minor}: the worker's frames"
        );
    } else {
        assert_eq!(
            worker_frames.first().map(|f| f.0.as_str()),
            Some("Thread.run"),
            "3.{minor}: the worker's frames {worker_frames:?}"
        );
    }
}

#[rstest]
fn in_a_sub_interpreter(#[values(12, 13)] minor: u8) {
    check_sub_interpreter(minor);
}

/// A thread that starts after the script says "ready", then ends.
const THREAD_COMES_AND_GOES_SCRIPT: &str = r#"
import threading, time
print("ready", flush=True)
time.sleep(3)
stop = threading.Event()
def worker():
    print("started", threading.get_native_id(), flush=True)
    while not stop.is_set():
        time.sleep(0.05)
thread = threading.Thread(target=worker)
thread.start()
time.sleep(3)
stop.set()
thread.join()
print("ended", flush=True)
time.sleep(60)
"#;

/// The threads read at every drain follow a thread that starts and one
/// that ends, though the process's thread list is read only when the
/// interpreter's thread states changed.
fn check_threads_come_and_go(minor: u8) {
    let started = Started::python_code(minor, THREAD_COMES_AND_GOES_SCRIPT);
    assert_eq!(started.line(), "ready");
    let pid = started.pid();
    wait_until_asleep(pid, 1);
    let process = PythonProcess::probe(pid).unwrap().unwrap();
    let tids = |threads: Vec<PythonThread>| threads.iter().map(|t| t.tid).collect::<BTreeSet<_>>();
    let alone = process.threads().unwrap();
    assert_eq!(
        tids(alone.clone()),
        BTreeSet::from([pid]),
        "3.{minor} before"
    );
    assert_eq!(process.threads().unwrap(), alone, "3.{minor} again");
    let worker = started.id_after("started ");
    wait_until_asleep(pid, 2);
    let both = process.threads().unwrap();
    assert_eq!(
        tids(both.clone()),
        BTreeSet::from([pid, worker]),
        "3.{minor} started"
    );
    assert_eq!(
        both.iter().find(|t| t.tid == pid),
        alone.first(),
        "3.{minor}: the main thread's state"
    );
    assert_eq!(started.line(), "ended");
    wait_until_asleep(pid, 1);
    assert_eq!(process.threads().unwrap(), alone, "3.{minor} ended");
}

#[rstest]
fn threads_come_and_go(#[values(8, 13)] minor: u8) {
    check_threads_come_and_go(minor);
}

/// Debian's own `/usr/bin/python3.11` links libpython statically: the
/// interpreter is found in the executable.
#[test]
fn static_executable() {
    let python = Path::new("/usr/bin/python3.11");
    assert!(
        python.exists(),
        "{} is missing (Debian 12's python3.11)",
        python.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("chain_😀.py");
    fs::write(&script, SCRIPT).unwrap();
    let started = Started::python(python, &script, &[]);
    assert_eq!(started.line(), "ready");
    let pid = started.pid();
    wait_until_asleep(pid, 3);
    let mut process = PythonProcess::probe(pid)
        .unwrap()
        .expect("python3.11 found");
    assert_eq!(process.version(), (3, 11));
    assert_eq!(process.module(), python);
    let threads = process.threads().unwrap();
    assert_eq!(
        threads.iter().map(|t| t.tid).collect::<BTreeSet<_>>(),
        tasks(pid)
    );
    let tstate = threads.iter().find(|t| t.tid == pid).unwrap().tstate;
    let stack = named_stack(&mut process, tstate);
    assert_frames(&stack, &chain(11), script.to_str().unwrap(), "static 3.11");
}

#[test]
fn other_processes_are_not_python() {
    // This test binary.
    assert!(PythonProcess::probe(std::process::id()).unwrap().is_none());
    // A C program (coreutils' sleep).
    let mut sleep = Command::new("sleep").arg("60").spawn().unwrap();
    // Wait for the exec to replace the forked test binary.
    let deadline = Instant::now() + Duration::from_secs(10);
    while fs::read_to_string(format!("/proc/{}/comm", sleep.id())).unwrap() != "sleep\n" {
        assert!(Instant::now() < deadline);
        thread::sleep(Duration::from_millis(5));
    }
    let result = PythonProcess::probe(sleep.id());
    let _ = sleep.kill();
    let _ = sleep.wait();
    assert!(result.unwrap().is_none());
    // A kernel thread (kthreadd).
    let status = fs::read_to_string("/proc/2/status").unwrap();
    assert!(status.contains("kthreadd"), "pid 2 is not kthreadd");
    assert!(PythonProcess::probe(2).unwrap().is_none());
}

#[test]
fn exited_process_is_an_error() {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let error = PythonProcess::probe(pid).unwrap_err();
    assert!(error.is_process_gone(), "{error}");
}

/// Every process on the host probes without a panic, and only a process
/// that exited meanwhile (or that this root may not read) is an error;
/// among them, a Python process started for the test is found, with its
/// thread and its sleeping function named.
#[test]
fn every_process_on_the_host_probes() {
    let mut command = Command::new(interpreter(12));
    command.args([
        "-I",
        "-c",
        "import time\ndef host_probe_nap():\n    print('ready', flush=True)\n    while True:\n        time.sleep(0.05)\nhost_probe_nap()\n",
    ]);
    let ours = Started::spawn(command);
    assert_eq!(ours.line(), "ready");
    let start = Instant::now();
    let (mut found, mut probed, mut denied) = (0, 0, 0);
    let mut our_names: Vec<String> = Vec::new();
    for pid in sparkprof::sys::proc::pids() {
        probed += 1;
        match PythonProcess::probe(pid) {
            Ok(Some(mut process)) => {
                found += 1;
                // Whatever these Pythons run, listing and naming do not
                // fail short of the process exiting.
                let Ok(threads) = process.threads() else {
                    continue;
                };
                for PythonThread { tstate, .. } in threads {
                    let Ok((frames, _)) = process.read_stack(tstate, PY_MAX_FRAMES) else {
                        continue;
                    };
                    for frame in frames {
                        let name = process.frame_name(&frame);
                        if pid == ours.pid()
                            && let Ok(name) = name
                        {
                            our_names.push(name);
                        }
                    }
                }
            }
            Ok(None) => assert_ne!(pid, ours.pid(), "the test's own Python was not found"),
            Err(e) if e.is_process_gone() => {}
            // Processes this root may not read (here: pid 1, outside
            // this machine's user namespace) are an error too, not a
            // panic and not "not Python".
            Err(PythonError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::PermissionDenied =>
            {
                denied += 1;
            }
            Err(e) => panic!("pid {pid}: {e}"),
        }
    }
    eprintln!(
        "{probed} processes probed ({found} Python, {denied} unreadable) in {:?}",
        start.elapsed()
    );
    assert!(probed > 10 && found >= 1, "{probed} probed, {found} Python");
    assert!(
        our_names
            .iter()
            .any(|name| name.starts_with("host_probe_nap (")),
        "the test's own Python named {our_names:?}"
    );
}

// ---------------------------------------------------------------------------
// `-X perf` trampolines (3.12+), named through the trusted perf-map reader

/// A function that runs forever once it has said so, under `-X perf`.
const TRAMPOLINE_SCRIPT: &str = "\
def trampoline_leaf():
    print('ready', flush=True)
    while True:
        pass

trampoline_leaf()
";

/// Waits until CPython's perf map lists `function`'s trampoline and returns
/// its (start, size, name), read from the file as the test's own truth.
fn trampoline_entry(pid: u32, function: &str) -> (u64, u64, String) {
    let path = format!("/tmp/perf-{pid}.map");
    let wanted = format!(" py::{function}:");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = fs::read_to_string(&path).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains(&wanted)) {
            let mut fields = line.splitn(3, ' ');
            let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
            let start = hex(fields.next().unwrap());
            let size = hex(fields.next().unwrap());
            return (start, size, fields.next().unwrap().to_owned());
        }
        assert!(
            Instant::now() < deadline,
            "{path} has no{wanted} line within 30 s:\n{text}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn perf_trampolines_are_named_from_a_trusted_map_only() {
    let python = interpreter(12);
    let mut command = Command::new(&python);
    command.args(["-I", "-X", "perf", "-c", TRAMPOLINE_SCRIPT]);
    let started = Started::spawn(command);
    assert_eq!(started.line(), "ready");
    let pid = started.pid();
    let (start, size, name) = trampoline_entry(pid, "trampoline_leaf");
    assert!(name.ends_with(":<string>"), "{name}");
    let inside = start + size / 2;
    // Address 1 is mapped nowhere: it goes on to the native symbolizer.
    let mut python = PythonRuntime::default();
    assert_eq!(python.name_trampolines(pid, vec![inside, 1]), vec![1]);
    assert_eq!(python.trampoline_name(pid, inside), Some(name.as_str()));

    // The same map handed to another user is not trusted: the address is
    // left unnamed rather than named from a file its process did not own.
    let map = std::ffi::CString::new(format!("/tmp/perf-{pid}.map")).unwrap();
    // SAFETY: a NUL-terminated path; the test runs as root.
    assert_eq!(unsafe { libc::chown(map.as_ptr(), 65534, 65534) }, 0);
    let mut python = PythonRuntime::default();
    let mut left = python.name_trampolines(pid, vec![inside, 1]);
    left.sort_unstable();
    assert_eq!(left, vec![1, inside]);
    assert_eq!(python.trampoline_name(pid, inside), None);
    let _ = fs::remove_file(format!("/tmp/perf-{pid}.map"));
}
