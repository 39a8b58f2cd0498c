//! Tracepoint record layouts, read from tracefs.
//!
//! Classic tracepoint programs read their record at fixed offsets, and the
//! offsets differ between kernels (fields are added and dropped), so they are
//! read from `events/<category>/<event>/format` at start-up and handed to the
//! programs as globals.

use std::fs;

/// Where tracefs is mounted, newest first.
const TRACEFS_ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The fields of one tracepoint's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracepointFormat {
    /// `(name, offset)` of every field, in order.
    fields: Vec<(String, u32)>,
}

impl TracepointFormat {
    /// Reads `category/event`'s format from tracefs.
    pub fn read(category: &str, event: &str) -> Result<Self, String> {
        let text = TRACEFS_ROOTS
            .iter()
            .find_map(|root| {
                fs::read_to_string(format!("{root}/events/{category}/{event}/format")).ok()
            })
            .ok_or_else(|| {
                format!("{category}:{event} tracepoint format not readable (is tracefs mounted?)")
            })?;
        Ok(Self::parse(&text))
    }

    /// Parses `\tfield:char newcomm[16];\toffset:28;\tsize:16;\tsigned:0;` lines.
    pub fn parse(text: &str) -> Self {
        let fields = text
            .lines()
            .filter_map(|line| {
                let decl = line.trim_start().strip_prefix("field:")?;
                let name = decl.split(';').next()?.split_whitespace().last()?;
                let name = name.split('[').next()?;
                let offset = line
                    .split("offset:")
                    .nth(1)?
                    .split(';')
                    .next()?
                    .trim()
                    .parse()
                    .ok()?;
                Some((name.to_owned(), offset))
            })
            .collect();
        Self { fields }
    }

    /// The offset of a field, if the record has it.
    pub fn offset(&self, field: &str) -> Option<u32> {
        self.fields
            .iter()
            .find(|(name, _)| name == field)
            .map(|(_, offset)| *offset)
    }

    /// The offset of a field the program cannot do without.
    pub fn require(&self, field: &str, event: &str) -> Result<u32, String> {
        self.offset(field)
            .ok_or_else(|| format!("the {event} tracepoint record has no field {field}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub const SCHED_SWITCH_6_18: &str = "name: sched_switch\nID: 372\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\n\
print fmt: \"prev_comm=%s prev_pid=%d\"\n";

    #[test]
    fn finds_field_offsets() {
        let format = TracepointFormat::parse(SCHED_SWITCH_6_18);
        assert_eq!(format.offset("prev_pid"), Some(24));
        assert_eq!(format.offset("prev_state"), Some(32));
        assert_eq!(format.offset("next_pid"), Some(56));
        assert_eq!(format.offset("prev_comm"), Some(8));
        assert_eq!(format.offset("pid"), None);
        assert!(format.require("next_prio", "sched_switch").is_err());
        assert_eq!(TracepointFormat::parse("garbage").offset("x"), None);
    }

    #[test]
    fn reads_this_kernels_sched_switch() {
        let format = TracepointFormat::read("sched", "sched_switch")
            .expect("tracefs with sched:sched_switch (the tests run as root)");
        assert!(format.offset("prev_state").is_some());
    }
}
