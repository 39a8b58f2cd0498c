//! Java thread names from `jcmd Thread.print`, keyed by Linux thread id.
//!
//! The kernel only keeps the first 15 bytes of a thread's name (`comm`), and
//! every Spark task thread starts with the same 15 (`Executor task l`); the
//! stage and task are only in the full Java name. `Thread.print` lists every
//! thread with its full name and its `nid`, which is the Linux TID, so it
//! fills the gaps the rename uprobe cannot (threads named before sparkprof
//! started). It costs the JVM a safepoint: call it rarely.
//!
//! One entry starts with a header line such as
//!
//! ```text
//! "Executor task launch worker for task 0.0 in stage 12.0 (TID 102)" #54 daemon prio=5 os_prio=0 cpu=2563.57ms elapsed=14.05s tid=0x00007ff111616430 nid=0x2abd runnable  [0x00007ff0c8ffe000]
//! "VM Thread" os_prio=0 cpu=0.37ms elapsed=2.29s tid=0x00007fbd600f4400 nid=0x1666 runnable
//! "main" #1 [9074] prio=5 os_prio=0 cpu=158,35ms elapsed=29,56s tid=0x0000750ee40285f0 nid=9074 waiting on condition  [0x0000750eec5fe000]
//! ```
//!
//! (JDK 17, a VM-internal thread with no `#N`, JDK 21). HotSpot prints the
//! name verbatim, without escaping: it may contain `"`, ` #5 daemon` and even
//! line breaks. The attributes after the name never contain a `"`, so the
//! name ends at the *last* `"` of the header, and a header whose tail has no
//! `nid=` yet continues on the next line (a name with a line break).
//!
//! Limits: a name that itself contains a complete header line (a closing
//! quote followed by `nid=...`, then a line break) cannot be told apart from
//! a real one; an application can name its threads anything anyway.

/// One Java thread: its full name and its Linux thread id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JavaThread {
    /// The full name, as `Thread.getName()` returns it.
    pub name: String,
    /// The Linux TID (`nid`; a `/proc/PID/task/` entry of the JVM).
    pub nid: u32,
}

/// How many lines a header may span (names with line breaks). A header that
/// is still open after this many is dropped rather than swallowing the dump.
const MAX_HEADER_LINES: usize = 64;

/// Parses the output of `jcmd Thread.print` (also `jstack`, and the dump a
/// JVM prints on SIGQUIT): every thread that has a `nid`, in dump order.
/// Lines that are not thread headers (stacks, lock lists, the SMR summary)
/// are skipped; malformed headers are dropped, never an error.
pub fn parse_thread_dump(text: &str) -> Vec<JavaThread> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut threads = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !lines[i].starts_with('"') {
            i += 1;
            continue;
        }
        // Find the line that closes this header, joining continuation lines.
        let mut header = lines[i].trim_end_matches('\r').to_owned();
        let mut end = i;
        let mut parsed = parse_header(&header);
        while parsed.is_none() && end + 1 < lines.len() && end + 1 - i < MAX_HEADER_LINES {
            let next = lines[end + 1].trim_end_matches('\r');
            // A complete header on its own starts the next thread: the open
            // one was malformed, not a name with a line break.
            if next.starts_with('"') && parse_header(next).is_some() {
                break;
            }
            header.push('\n');
            header.push_str(next);
            end += 1;
            parsed = parse_header(&header);
        }
        match parsed {
            Some(thread) => {
                threads.push(thread);
                i = end + 1;
            }
            None => i += 1,
        }
    }
    threads
}

/// One header (possibly spanning lines, joined with `\n`): the name between
/// the first and the last `"`, and the `nid` among the attributes after it.
fn parse_header(header: &str) -> Option<JavaThread> {
    let body = header.strip_prefix('"')?;
    let close = body.rfind('"')?;
    let (name, attributes) = (&body[..close], &body[close + 1..]);
    // Attributes follow the name after a space (`" #12 ...`, `" os_prio=...`).
    if !attributes.starts_with(' ') {
        return None;
    }
    let nid = attributes
        .split_ascii_whitespace()
        .find_map(|word| word.strip_prefix("nid="))?;
    Some(JavaThread {
        name: name.to_owned(),
        nid: parse_nid(nid)?,
    })
}

/// `nid` is hexadecimal with `0x` up to JDK 17 and decimal from JDK 18 on.
fn parse_nid(text: &str) -> Option<u32> {
    let (digits, radix) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None => (text, 10),
    };
    // `from_str_radix` would accept a sign; a nid never has one.
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u32::from_str_radix(digits, radix).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(name: &str, nid: u32) -> JavaThread {
        JavaThread {
            name: name.into(),
            nid,
        }
    }

    /// Trimmed from a real JDK 17.0.15 dump on this machine, threads named
    /// by the test program with quotes, a leading space and a line break.
    const JDK17: &str = r#"5722:
2026-11-22 15:19:54
Full thread dump OpenJDK 64-Bit Server VM (17.0.15+6-Debian-1deb12u1 mixed mode, sharing):

Threads class SMR info:
_java_thread_list=0x00007fbcd0002a60, length=17, elements={
0x00007fbd60017ea0, 0x00007fbd600f8390, 0x00007fbd600f9770, 0x00007fbd601011d0,
0x00007fbcd00016e0
}

"main" #1 prio=5 os_prio=0 cpu=31.09ms elapsed=2.31s tid=0x00007fbd60017ea0 nid=0x165c waiting on condition  [0x00007fbd65d1e000]
   java.lang.Thread.State: TIMED_WAITING (sleeping)
	at java.lang.Thread.sleep(java.base@17.0.15/Native Method)
	at Named.main(Named.java:5)

"Finalizer" #3 daemon prio=8 os_prio=0 cpu=0.33ms elapsed=2.28s tid=0x00007fbd600f9770 nid=0x1668 in Object.wait()  [0x00007fbd31efe000]
   java.lang.Thread.State: WAITING (on object monitor)
	at java.lang.Object.wait(java.base@17.0.15/Native Method)
	- waiting on <0x000000069ec02f40> (a java.lang.ref.ReferenceQueue$Lock)

"C2 CompilerThread0" #7 daemon prio=9 os_prio=0 cpu=2.38ms elapsed=2.28s tid=0x00007fbd60105340 nid=0x166d waiting on condition  [0x0000000000000000]
   java.lang.Thread.State: RUNNABLE
   No compile task

"Executor task launch worker for task 0.0 in stage 12.0 (TID 102)" #12 daemon prio=5 os_prio=0 cpu=0.17ms elapsed=2.26s tid=0x00007fbd60118bb0 nid=0x1673 waiting on condition  [0x00007fbd314fd000]
   java.lang.Thread.State: TIMED_WAITING (sleeping)
	at java.lang.Thread.sleep(java.base@17.0.15/Native Method)

"weird "quoted" name" #5 daemon" #13 daemon prio=5 os_prio=0 cpu=0.15ms elapsed=2.26s tid=0x00007fbd60119b70 nid=0x1674 waiting on condition  [0x00007fbd313fd000]
   java.lang.Thread.State: TIMED_WAITING (sleeping)

"tail quote"" #14 daemon prio=5 os_prio=0 cpu=0.14ms elapsed=2.25s tid=0x00007fbd6011ab70 nid=0x1675 waiting on condition  [0x00007fbd312fd000]
   java.lang.Thread.State: TIMED_WAITING (sleeping)

" lead space" #15 daemon prio=5 os_prio=0 cpu=0.15ms elapsed=2.25s tid=0x00007fbd6011bb70 nid=0x1676 waiting on condition  [0x00007fbd311fd000]
   java.lang.Thread.State: TIMED_WAITING (sleeping)

"new
line" #16 daemon prio=5 os_prio=0 cpu=0.15ms elapsed=2.24s tid=0x00007fbd6011cb60 nid=0x1677 waiting on condition  [0x00007fbd310fd000]
   java.lang.Thread.State: TIMED_WAITING (sleeping)

"VM Periodic Task Thread" os_prio=0 cpu=2.27ms elapsed=2.27s tid=0x00007fbd60110960 nid=0x1671 waiting on condition  

"VM Thread" os_prio=0 cpu=0.37ms elapsed=2.29s tid=0x00007fbd600f4400 nid=0x1666 runnable  

"GC Thread#0" os_prio=0 cpu=0.15ms elapsed=2.31s tid=0x00007fbd60041620 nid=0x165d runnable  

JNI global refs: 4, weak refs: 0
"#;

    #[test]
    fn jdk17_dump() {
        assert_eq!(
            parse_thread_dump(JDK17),
            vec![
                thread("main", 0x165c),
                thread("Finalizer", 0x1668),
                thread("C2 CompilerThread0", 0x166d),
                thread(
                    "Executor task launch worker for task 0.0 in stage 12.0 (TID 102)",
                    0x1673
                ),
                thread("weird \"quoted\" name\" #5 daemon", 0x1674),
                thread("tail quote\"", 0x1675),
                thread(" lead space", 0x1676),
                thread("new\nline", 0x1677),
                thread("VM Periodic Task Thread", 0x1671),
                thread("VM Thread", 0x1666),
                thread("GC Thread#0", 0x165d),
            ]
        );
    }

    #[test]
    fn jdk21_decimal_nids_and_bracketed_tid() {
        let text = "\"main\" #1 [9074] prio=5 os_prio=0 cpu=158,35ms elapsed=29,56s tid=0x0000750ee40285f0 nid=9074 waiting on condition  [0x0000750eec5fe000]\n   java.lang.Thread.State: TIMED_WAITING (sleeping)\n\n\"VM Thread\" os_prio=0 cpu=1.00ms elapsed=29.50s tid=0x0000750ee415f9d0 nid=9081 runnable  \r\n";
        assert_eq!(
            parse_thread_dump(text),
            vec![thread("main", 9074), thread("VM Thread", 9081)]
        );
    }

    #[test]
    fn jdk8_header() {
        let text = "\"Signal Dispatcher\" #4 daemon prio=9 os_prio=0 tid=0x00007f1c8c0e1000 nid=0x1c0a runnable [0x0000000000000000]\n";
        assert_eq!(
            parse_thread_dump(text),
            vec![thread("Signal Dispatcher", 0x1c0a)]
        );
    }

    #[test]
    fn malformed_headers_are_dropped_not_fatal() {
        let text = concat!(
            "\"no nid\" #3 daemon prio=5 os_prio=0 tid=0x1 runnable\n",
            "\"bad nid\" #4 daemon prio=5 nid=0xzz runnable\n",
            "\"huge nid\" #5 nid=99999999999 runnable\n",
            "\"negative\" #6 nid=-5 runnable\n",
            "\"unterminated\n",
            "\"ok\" #7 daemon prio=5 os_prio=0 tid=0x2 nid=0x10 runnable\n",
            "\"\" #8 nid=17 runnable\n",
            "\"",
        );
        assert_eq!(
            parse_thread_dump(text),
            vec![thread("ok", 0x10), thread("", 17)]
        );
        assert!(parse_thread_dump("").is_empty());
        assert!(parse_thread_dump("\"\"\"\"\"\n\"").is_empty());
    }

    #[test]
    fn an_open_header_does_not_swallow_the_next_thread() {
        let mut text = String::from("\"never closed\n");
        for _ in 0..3 * MAX_HEADER_LINES {
            text.push_str("   at Foo.bar(Foo.java:1)\n");
        }
        text.push_str("\"next\" #2 nid=0x2 runnable\n");
        assert_eq!(parse_thread_dump(&text), vec![thread("next", 2)]);
    }

    #[test]
    fn nids() {
        assert_eq!(parse_nid("0x2abd"), Some(0x2abd));
        assert_eq!(parse_nid("0X2ABD"), Some(0x2abd));
        assert_eq!(parse_nid("10941"), Some(10941));
        assert_eq!(parse_nid("0x"), None);
        assert_eq!(parse_nid("+5"), None);
        assert_eq!(parse_nid("0x+5"), None);
        assert_eq!(parse_nid("0x100000000"), None);
    }
}
