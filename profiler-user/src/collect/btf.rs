//! The running kernel's types, from its BTF (`/sys/kernel/btf/vmlinux`).
//!
//! sparkprof attaches nothing through tracefs, which a fresh host or a
//! container does not have mounted: its tracepoint programs are BTF-typed
//! (`tp_btf`, found by the kernel's `btf_trace_<event>` typedef), uprobes
//! go through the uprobe PMU (sysfs) and the sampler is a perf event. What a
//! program must know of a kernel struct is read here, because Rust eBPF has
//! no CO-RE: the offset of one member, handed to the program as a global.
//!
//! The format (Documentation/bpf/btf.rst): a header, a type section of
//! variable-length records numbered from 1, and a string section. Only
//! what is needed is decoded: names, struct members, and the size of every
//! record so the next one can be found. aya parses the same file to load
//! the programs, but keeps member offsets to itself.

use std::{collections::HashMap, fs};

use thiserror::Error;

/// Where the kernel exposes its own BTF.
pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

const MAGIC: u16 = 0xeb9f;

/// BTF kinds (`BTF_KIND_*`).
mod kind {
    pub const INT: u32 = 1;
    pub const ARRAY: u32 = 3;
    pub const STRUCT: u32 = 4;
    pub const UNION: u32 = 5;
    pub const ENUM: u32 = 6;
    pub const TYPEDEF: u32 = 8;
    pub const VOLATILE: u32 = 9;
    pub const CONST: u32 = 10;
    pub const RESTRICT: u32 = 11;
    pub const FUNC_PROTO: u32 = 13;
    pub const VAR: u32 = 14;
    pub const DATASEC: u32 = 15;
    pub const DECL_TAG: u32 = 17;
    pub const TYPE_TAG: u32 = 18;
    pub const ENUM64: u32 = 19;
}

#[derive(Debug, Error)]
pub enum BtfError {
    #[error("{path}: {source} (sparkprof needs a kernel built with CONFIG_DEBUG_INFO_BTF)")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("malformed BTF: {0}")]
    Malformed(String),
    #[error("the kernel's BTF has no struct {0}")]
    NoStruct(String),
    #[error("the kernel's BTF has no member {member} in struct {strukt}")]
    NoMember { strukt: String, member: String },
}

/// The bytes of the running kernel's BTF.
pub fn read_vmlinux() -> Result<Vec<u8>, BtfError> {
    fs::read(VMLINUX).map_err(|source| BtfError::Read {
        path: VMLINUX.to_owned(),
        source,
    })
}

/// One member of a struct or union.
#[derive(Debug, Clone)]
struct Member {
    name: String,
    type_id: u32,
    /// Offset from the start of the struct, in bits.
    bit_offset: u32,
}

/// One type record, as far as sparkprof looks at it.
#[derive(Debug, Clone)]
struct Type {
    kind: u32,
    name: String,
    /// The record's third word: the type a typedef or qualifier stands
    /// for (a size for other kinds).
    target: u32,
    /// Struct and union members (empty for other kinds).
    members: Vec<Member>,
}

/// The kernel's types: names and struct layouts.
#[derive(Debug)]
pub struct KernelTypes {
    /// Index `id - 1` holds type `id`.
    types: Vec<Type>,
    /// Named structs, by name (the first of a name wins: the kernel has
    /// one `task_struct`).
    structs: HashMap<String, u32>,
}

impl KernelTypes {
    /// Reads the running kernel's BTF (for `doctor`; `record` parses the
    /// bytes it read once for aya too, with [`read_vmlinux`]).
    pub fn read() -> Result<Self, BtfError> {
        Self::parse(&read_vmlinux()?)
    }

    /// Parses a little-endian BTF blob.
    pub fn parse(data: &[u8]) -> Result<Self, BtfError> {
        let malformed = |what: &str| BtfError::Malformed(what.to_owned());
        let u16_at = |at: usize| {
            data.get(at..at + 2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
        };
        let u32_at = |at: usize| {
            data.get(at..at + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        if u16_at(0) != Some(MAGIC) {
            return Err(malformed("bad magic (not little-endian BTF)"));
        }
        let header = |at| {
            u32_at(at)
                .map(|v| v as usize)
                .ok_or(malformed("short header"))
        };
        let hdr_len = header(4)?;
        let (type_off, type_len) = (hdr_len + header(8)?, header(12)?);
        let (str_off, str_len) = (hdr_len + header(16)?, header(20)?);
        let strings = data
            .get(str_off..str_off + str_len)
            .ok_or(malformed("string section out of bounds"))?;
        let name = |offset: u32| -> String {
            strings
                .get(offset as usize..)
                .and_then(|rest| rest.split(|&b| b == 0).next())
                .map(|bytes| String::from_utf8_lossy(bytes).into_owned())
                .unwrap_or_default()
        };
        let end = type_off
            .checked_add(type_len)
            .filter(|&end| end <= data.len())
            .ok_or(malformed("type section out of bounds"))?;

        let mut types = Vec::new();
        let mut structs = HashMap::new();
        let mut at = type_off;
        while at < end {
            let record = |field: usize| u32_at(at + 4 * field).ok_or(malformed("short type"));
            let (name_off, info, target) = (record(0)?, record(1)?, record(2)?);
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            let bitfields = info >> 31 != 0;
            at += 12;
            let mut members = Vec::new();
            let trailing = match kind {
                kind::INT | kind::VAR | kind::DECL_TAG => 4,
                kind::ARRAY => 12,
                kind::STRUCT | kind::UNION => {
                    for index in 0..vlen {
                        let field = |n: usize| {
                            u32_at(at + 12 * index + 4 * n).ok_or(malformed("short member"))
                        };
                        let offset = field(2)?;
                        members.push(Member {
                            name: name(field(0)?),
                            type_id: field(1)?,
                            bit_offset: if bitfields {
                                offset & 0xff_ffff
                            } else {
                                offset
                            },
                        });
                    }
                    12 * vlen
                }
                kind::ENUM | kind::FUNC_PROTO => 8 * vlen,
                kind::DATASEC | kind::ENUM64 => 12 * vlen,
                0 | 20.. => return Err(BtfError::Malformed(format!("unknown kind {kind}"))),
                _ => 0,
            };
            at += trailing;
            let name = name(name_off);
            if kind == kind::STRUCT && !name.is_empty() {
                structs
                    .entry(name.clone())
                    .or_insert(types.len() as u32 + 1);
            }
            types.push(Type {
                kind,
                name,
                target,
                members,
            });
        }
        Ok(Self { types, structs })
    }

    fn type_by_id(&self, id: u32) -> Option<&Type> {
        self.types.get((id as usize).checked_sub(1)?)
    }

    /// The byte offset of `member` in `struct strukt`, looking into
    /// anonymous structs and unions too (as C does).
    pub fn member_offset(&self, strukt: &str, member: &str) -> Result<u32, BtfError> {
        let id = *self
            .structs
            .get(strukt)
            .ok_or_else(|| BtfError::NoStruct(strukt.to_owned()))?;
        self.find_member(id, member, 0)
            .map(|bits| bits / 8)
            .ok_or_else(|| BtfError::NoMember {
                strukt: strukt.to_owned(),
                member: member.to_owned(),
            })
    }

    /// Where a task's ids are: `[offset of task_struct::pid, of ::tgid]`.
    pub fn task_ids(&self) -> Result<[u32; 2], BtfError> {
        Ok([
            self.member_offset("task_struct", "pid")?,
            self.member_offset("task_struct", "tgid")?,
        ])
    }

    /// Where a task's BPF local storage pointer is (`task_struct::bpf_storage`,
    /// with `CONFIG_BPF_SYSCALL`).
    pub fn task_storage(&self) -> Result<u32, BtfError> {
        self.member_offset("task_struct", "bpf_storage")
    }

    /// Where the run queue clock is reached from a task:
    /// `[offset of task_struct::se.cfs_rq, of cfs_rq::rq, of rq::clock]`
    /// (`se.cfs_rq` exists with `CONFIG_FAIR_GROUP_SCHED`).
    pub fn run_queue_clock(&self) -> Result<[u32; 3], BtfError> {
        Ok([
            self.member_offset("task_struct", "se")?
                + self.member_offset("sched_entity", "cfs_rq")?,
            self.member_offset("cfs_rq", "rq")?,
            self.member_offset("rq", "clock")?,
        ])
    }

    fn find_member(&self, id: u32, member: &str, depth: u32) -> Option<u32> {
        let ty = self.type_by_id(id)?;
        for field in &ty.members {
            if field.name == member {
                return Some(field.bit_offset);
            }
            if field.name.is_empty() && depth < 8 {
                let inner = self.skip_modifiers(field.type_id)?;
                if let Some(bits) = self.find_member(inner, member, depth + 1) {
                    return Some(field.bit_offset + bits);
                }
            }
        }
        None
    }

    /// Follows typedefs and qualifiers (const, volatile, restrict, type
    /// tags) to the struct or union under them.
    fn skip_modifiers(&self, mut id: u32) -> Option<u32> {
        for _ in 0..16 {
            let ty = self.type_by_id(id)?;
            match ty.kind {
                kind::STRUCT | kind::UNION => return Some(id),
                kind::TYPEDEF | kind::VOLATILE | kind::CONST | kind::RESTRICT | kind::TYPE_TAG => {
                    id = ty.target;
                }
                _ => return None,
            }
        }
        None
    }

    /// Whether the kernel has the BTF-typed tracepoint `event` (its
    /// `btf_trace_<event>` typedef, which is what `tp_btf` programs attach by).
    pub fn has_tracepoint(&self, event: &str) -> bool {
        let typedef = format!("btf_trace_{event}");
        self.types
            .iter()
            .any(|ty| ty.kind == kind::TYPEDEF && ty.name == typedef)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob built by hand: the header, `types` (each a list of
    /// words) and a string section made of `names`.
    fn blob(names: &[&str], types: &[Vec<u32>]) -> Vec<u8> {
        let mut strings = vec![0u8];
        for name in names {
            strings.extend_from_slice(name.as_bytes());
            strings.push(0);
        }
        let type_bytes: Vec<u8> = types
            .iter()
            .flatten()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let mut data = Vec::new();
        data.extend_from_slice(&MAGIC.to_le_bytes());
        data.extend_from_slice(&[1, 0]);
        for word in [24, 0, type_bytes.len() as u32, type_bytes.len() as u32] {
            data.extend_from_slice(&word.to_le_bytes());
        }
        data.extend_from_slice(&(strings.len() as u32).to_le_bytes());
        data.extend_from_slice(&type_bytes);
        data.extend_from_slice(&strings);
        data
    }

    /// Offset of `name` in the string section `blob` builds.
    fn at(names: &[&str], name: &str) -> u32 {
        let index = names.iter().position(|n| *n == name).unwrap();
        1 + names[..index]
            .iter()
            .map(|n| n.len() as u32 + 1)
            .sum::<u32>()
    }

    fn info(kind: u32, vlen: u32, bitfields: bool) -> u32 {
        (u32::from(bitfields) << 31) | (kind << 24) | vlen
    }

    #[test]
    fn finds_members_through_anonymous_unions_and_bitfields() {
        let names = [
            "int",
            "task_struct",
            "flags",
            "pid",
            "tgid",
            "inner_t",
            "btf_trace_task_rename",
            "on_cpu",
        ];
        let n = |name| at(&names, name);
        let types = vec![
            // 1: int (size 4, 32 bits).
            vec![n("int"), info(kind::INT, 0, false), 4, 32],
            // 2: union { int flags; struct { int pid; int tgid; } } (anonymous).
            vec![0, info(kind::UNION, 2, false), 8, n("flags"), 1, 0, 0, 3, 0],
            // 3: the anonymous struct inside it.
            vec![
                0,
                info(kind::STRUCT, 2, false),
                8,
                n("pid"),
                1,
                0,
                n("tgid"),
                1,
                32,
            ],
            // 4: const (2), 5: typedef inner_t of it.
            vec![0, info(kind::CONST, 0, false), 2],
            vec![n("inner_t"), info(kind::TYPEDEF, 0, false), 4],
            // 6: struct task_struct { int on_cpu : 3 (bit 0); <anon inner_t> at byte 16 },
            // with bitfield-style offsets (the size in the top 8 bits).
            vec![
                n("task_struct"),
                info(kind::STRUCT, 2, true),
                24,
                n("on_cpu"),
                1,
                (3 << 24) | 5,
                0,
                5,
                128,
            ],
            // 7: the BTF tracepoint typedef a tp_btf program attaches by.
            vec![n("btf_trace_task_rename"), info(kind::TYPEDEF, 0, false), 1],
        ];
        let kernel = KernelTypes::parse(&blob(&names, &types)).unwrap();
        assert_eq!(kernel.member_offset("task_struct", "pid").unwrap(), 16);
        assert_eq!(kernel.member_offset("task_struct", "tgid").unwrap(), 20);
        assert_eq!(kernel.member_offset("task_struct", "flags").unwrap(), 16);
        assert_eq!(kernel.member_offset("task_struct", "on_cpu").unwrap(), 0);
        assert!(matches!(
            kernel.member_offset("task_struct", "comm"),
            Err(BtfError::NoMember { .. })
        ));
        assert!(matches!(
            kernel.member_offset("mm_struct", "pid"),
            Err(BtfError::NoStruct(_))
        ));
        assert!(kernel.has_tracepoint("task_rename"));
        assert!(!kernel.has_tracepoint("sched_switch"));
    }

    #[test]
    fn refuses_what_is_not_btf() {
        assert!(matches!(
            KernelTypes::parse(b"\x7fELF...."),
            Err(BtfError::Malformed(_))
        ));
        let mut data = blob(&["x"], &[vec![1, info(kind::INT, 0, false), 4, 32]]);
        data.truncate(data.len() - 6);
        assert!(KernelTypes::parse(&data).is_err());
        let unknown = blob(&["x"], &[vec![1, info(25, 0, false), 0]]);
        assert!(matches!(
            KernelTypes::parse(&unknown),
            Err(BtfError::Malformed(_))
        ));
    }

    /// The running kernel, read as `record` reads it: its `task_struct`
    /// has `pid` with `tgid` right after it (`pid_t pid; pid_t tgid;`), and
    /// the three tracepoints sparkprof attaches by BTF exist.
    #[test]
    fn reads_this_kernels_task_struct() {
        let kernel = KernelTypes::read().expect("the kernel's BTF at /sys/kernel/btf/vmlinux");
        let [pid, tgid] = kernel.task_ids().unwrap();
        // The off-CPU test's first load (and the field is after the ids).
        assert!(kernel.task_storage().unwrap() > tgid);
        assert!(pid > 0, "task_struct.pid at {pid}");
        assert_eq!(tgid, pid + 4);
        for event in [
            "sched_switch",
            "sched_process_exit",
            "task_rename",
            "sched_process_fork",
            "sched_process_exec",
        ] {
            assert!(kernel.has_tracepoint(event), "no btf_trace_{event}");
        }
        assert!(!kernel.has_tracepoint("no_such_event"));
        // Where sched_switch reads its time (this kernel has
        // CONFIG_FAIR_GROUP_SCHED, as distributions' do): `se.cfs_rq`
        // lies inside `task_struct::se`.
        let [cfs_rq, rq, clock] = kernel.run_queue_clock().unwrap();
        let se = kernel.member_offset("task_struct", "se").unwrap();
        assert!(
            cfs_rq > se && cfs_rq < se + 512,
            "se at {se}, se.cfs_rq at {cfs_rq}"
        );
        assert!(
            rq > 0 && clock > 0,
            "cfs_rq.rq at {rq}, rq.clock at {clock}"
        );
    }
}
