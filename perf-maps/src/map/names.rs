//! Readable symbol names.
//!
//! Flame graphs are read by people: `void org.apache.spark.sql.execution.
//! SortExec.doExecute()` repeats the return type and parameters on every
//! frame and makes otherwise identical frames differ, so by default we show
//! `org.apache.spark.sql.execution.SortExec.doExecute`. Overloads then merge,
//! which is what one usually wants in a profile; [`NameStyle::Full`] keeps
//! the signature for when it is not.
//!
//! Only names we positively recognise are rewritten. Everything else (the
//! `Interpreter` blob, stubs such as `StubRoutines (1)`, `I2C/C2I adapters`,
//! `vtable chunks`, CPython's `py::` trampolines, names from unknown JITs) is
//! returned unchanged, because a wrong "cleanup" is worse than a verbose name.

use std::borrow::Cow;

/// How names from a map are stored in a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NameStyle {
    /// Java names without return type and parameter list, perf-map-agent
    /// names in dotted form; everything else unchanged. See [`readable_name`].
    #[default]
    Readable,
    /// Exactly as written in the map.
    Full,
}

impl NameStyle {
    /// Applies the style to one raw name.
    pub fn apply<'a>(&self, raw: &'a str) -> Cow<'a, str> {
        match self {
            NameStyle::Readable => readable_name(raw),
            NameStyle::Full => Cow::Borrowed(raw),
        }
    }
}

/// The readable form of a perf-map name:
///
/// - JDK (`Compiler.perfmap`): `java.lang.String java.lang.String.substring(int, int)`
///   → `java.lang.String.substring`
/// - perf-map-agent: `Lorg/apache/spark/Foo;::bar` → `org.apache.spark.Foo.bar`
///   (a trailing signature is dropped; `->`-joined inline chains are
///   converted part by part)
/// - perf-map-agent with `dottedclass`: `org.apache.spark.Foo::bar` →
///   `org.apache.spark.Foo.bar`
/// - anything else: unchanged.
pub fn readable_name(raw: &str) -> Cow<'_, str> {
    if let Some(s) = agent_chain(raw) {
        return Cow::Owned(s);
    }
    if let Some(s) = jdk_method(raw) {
        return Cow::Borrowed(s);
    }
    Cow::Borrowed(raw)
}

/// Splits a CPython perf trampoline name `py::<qualname>:<filename>` into
/// `(qualname, filename)`. Qualnames have no `:`, file names may, so we split
/// at the first `:` after the prefix.
pub fn python_trampoline(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix("py::")?;
    let (qual, file) = rest.split_once(':')?;
    (!qual.is_empty()).then_some((qual, file))
}

/// `[return-type ]qualified.Class.method(params)` → `qualified.Class.method`.
/// Requires a dotted, space-free qualified name right before the parameter
/// list, so `StubRoutines (1)` (space before the parenthesis, no dot) stays.
fn jdk_method(raw: &str) -> Option<&str> {
    let body = raw.strip_suffix(')')?;
    let open = body.rfind('(')?;
    let (head, params) = (&body[..open], &body[open + 1..]);
    if params.contains(['(', ')']) {
        return None;
    }
    let qname = match head.split_once(' ') {
        None => head,
        Some((ret, q)) if !ret.is_empty() && !q.contains(char::is_whitespace) => q,
        Some(_) => return None,
    };
    let (class, method) = qname.rsplit_once('.')?;
    if class.is_empty()
        || method.is_empty()
        || class.starts_with('.')
        || class.ends_with('.')
        || qname.contains(char::is_whitespace)
    {
        return None;
    }
    Some(qname)
}

/// perf-map-agent names, possibly an inline chain `a->b->c`. All parts must be
/// recognised, or the name is left alone.
fn agent_chain(raw: &str) -> Option<String> {
    if !raw.contains("::") {
        return None;
    }
    let mut out = String::with_capacity(raw.len());
    for (i, part) in raw.split("->").enumerate() {
        if i > 0 {
            out.push_str("->");
        }
        agent_one(part, &mut out)?;
    }
    Some(out)
}

fn agent_one(part: &str, out: &mut String) -> Option<()> {
    let (class, rest) = part.split_once("::")?;
    let class = if let Some(internal) = class.strip_prefix('L').and_then(|c| c.strip_suffix(';')) {
        // JVM internal form: Lorg/apache/Foo;
        if internal.is_empty() || internal.contains(char::is_whitespace) {
            return None;
        }
        Cow::Owned(internal.replace('/', "."))
    } else if class.contains('.') && !class.contains(char::is_whitespace) && !class.contains('/') {
        // dottedclass form. C++ names (`StubRoutines::x`) never contain dots.
        Cow::Borrowed(class)
    } else {
        return None;
    };
    let method_end = rest
        .find(|c: char| c == '(' || c.is_whitespace())
        .unwrap_or(rest.len());
    let method = &rest[..method_end];
    if method.is_empty() {
        return None;
    }
    out.push_str(&class);
    out.push('.');
    out.push_str(method);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jdk_names() {
        let cases = [
            (
                "void org.apache.spark.sql.execution.SortExec.doExecute()",
                "org.apache.spark.sql.execution.SortExec.doExecute",
            ),
            (
                "java.lang.String java.lang.String.substring(int, int)",
                "java.lang.String.substring",
            ),
            (
                "char java.lang.String.charAt(int)",
                "java.lang.String.charAt",
            ),
            (
                "java.lang.Object[] java.util.Arrays.copyOf(java.lang.Object[], int)",
                "java.util.Arrays.copyOf",
            ),
            ("void java.lang.Object.<init>()", "java.lang.Object.<init>"),
            ("long Busy.hash(int)", "Busy.hash"),
            (
                "void org.Foo$$Lambda$12/0x0000000800c0b440.run()",
                "org.Foo$$Lambda$12/0x0000000800c0b440.run",
            ),
        ];
        for (raw, want) in cases {
            assert_eq!(readable_name(raw), want, "{raw}");
            assert_eq!(NameStyle::Full.apply(raw), raw);
        }
    }

    #[test]
    fn agent_names() {
        assert_eq!(
            readable_name("Lorg/apache/spark/Foo;::bar"),
            "org.apache.spark.Foo.bar"
        );
        assert_eq!(
            readable_name("Lorg/apache/spark/Foo;::bar (Ljava/lang/String;)V"),
            "org.apache.spark.Foo.bar"
        );
        assert_eq!(
            readable_name("Ljava/util/HashMap;::get->Ljava/util/HashMap;::hash"),
            "java.util.HashMap.get->java.util.HashMap.hash"
        );
        assert_eq!(
            readable_name("org.apache.spark.Foo::bar"),
            "org.apache.spark.Foo.bar"
        );
    }

    #[test]
    fn others_unchanged() {
        for raw in [
            "Interpreter",
            "StubRoutines (1)",
            "StubRoutines (2)",
            "I2C/C2I adapters",
            "vtable chunks",
            "flush_icache_stub",
            "StubRoutines::call_stub",
            "_new_array_Java",
            "py::compute:/app/job.py",
            "py::<module>:/app/x.py",
            "native_call (something weird)",
            "a  b(c)",
            "",
        ] {
            assert_eq!(readable_name(raw), raw, "{raw}");
        }
    }

    #[test]
    fn python_split() {
        assert_eq!(
            python_trampoline("py::Foo.bar:/app/job.py"),
            Some(("Foo.bar", "/app/job.py"))
        );
        assert_eq!(python_trampoline("py::f:C:/x.py"), Some(("f", "C:/x.py")));
        assert_eq!(python_trampoline("Interpreter"), None);
        assert_eq!(python_trampoline("py::nofile"), None);
    }
}
