//! The methods a compiled frame stands for: the JIT inlines callees into
//! their caller's code, and the nmethod's debug info says, for each pc
//! where the JVM may need it, which chain of (inlined) methods is there.
//!
//! An nmethod has an array of `PcDesc`s (pc offset from its code start →
//! decode offset into its scopes data) and a scopes data stream of
//! `ScopeDesc`s: per scope three UNSIGNED5 numbers, the sender scope's
//! decode offset (0: the outermost), the method's index in the nmethod's
//! metadata array (1-based) and the bytecode index plus one. Return
//! addresses have a `PcDesc` of their own; a leaf pc takes the first one
//! at or after it, as HotSpot's own `PcDesc` lookup does.
//!
//! Where those arrays live changed: JDK 9-22 keep them in the nmethod
//! (offsets from its start; the scopes data by address), JDK 23+ in its
//! immutable data and the metadata in its mutable data. Only these two
//! shapes are read; for any other (or anything that does not add up:
//! the array must start with HotSpot's sentinel at pc offset -1), a frame
//! shows its compiled method alone.

use super::{HotspotError, lines::unsigned5, vmstructs::VmStructs};
use crate::sys::memory::ReadMemory;

/// `PcDesc`s read at most per nmethod (a large C2 method has a few thousand).
const MAX_PC_DESCS: u64 = 1 << 16;
/// Scopes of one pc followed at most (HotSpot's `MaxInlineLevel` is 15).
const MAX_SCOPES: usize = 64;
/// Metadata entries an index may name at most.
const MAX_METADATA: u32 = 1 << 20;
/// Bytes read per scope (three UNSIGNED5 numbers take at most 15).
const SCOPE_BYTES: usize = 16;

/// Where an nmethod keeps its debug info.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    /// JDK 9-22: `int` offsets from the nmethod for the `PcDesc`s (up to
    /// the dependencies) and the metadata; the scopes data by address.
    InNmethod {
        scopes_pcs_offset: u64,
        dependencies_offset: u64,
        metadata_offset: u64,
        scopes_data_begin: u64,
    },
    /// JDK 23+: the `PcDesc`s and scopes data in the immutable data, the
    /// metadata after the relocations in the mutable data.
    Separate {
        immutable_data: u64,
        scopes_pcs_offset: u64,
        scopes_data_offset: u64,
        mutable_data: u64,
        relocation_size: u64,
    },
}

/// The offsets that lead to an nmethod's inlining chains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InliningLayout {
    shape: Shape,
    pc_desc_size: u64,
    pc_desc_pc_offset: u64,
    pc_desc_scope_decode_offset: u64,
    unsigned5_excluded: u8,
}

impl InliningLayout {
    pub fn from_tables(tables: &VmStructs, unsigned5_excluded: u8) -> Result<Self, HotspotError> {
        let offset = |ty: &str, field: &str| tables.required_offset(ty, field);
        let shape = if tables.offset("nmethod", "_immutable_data").is_some() {
            Shape::Separate {
                immutable_data: offset("nmethod", "_immutable_data")?,
                scopes_pcs_offset: offset("nmethod", "_scopes_pcs_offset")?,
                scopes_data_offset: offset("nmethod", "_scopes_data_offset")?,
                mutable_data: offset("CodeBlob", "_mutable_data")?,
                relocation_size: offset("CodeBlob", "_relocation_size")?,
            }
        } else {
            Shape::InNmethod {
                scopes_pcs_offset: offset("nmethod", "_scopes_pcs_offset")?,
                dependencies_offset: offset("nmethod", "_dependencies_offset")?,
                metadata_offset: offset("nmethod", "_metadata_offset")?,
                scopes_data_begin: tables
                    .offset("CompiledMethod", "_scopes_data_begin")
                    .or_else(|| tables.offset("nmethod", "_scopes_data_begin"))
                    .ok_or_else(|| {
                        HotspotError::MissingField("nmethod::_scopes_data_begin".into())
                    })?,
            }
        };
        let pc_desc_size = tables.required_size("PcDesc")?;
        if !(8..=64).contains(&pc_desc_size) {
            return Err(HotspotError::Garbage(format!(
                "sizeof(PcDesc) is {pc_desc_size}"
            )));
        }
        Ok(Self {
            shape,
            pc_desc_size,
            pc_desc_pc_offset: offset("PcDesc", "_pc_offset")?,
            pc_desc_scope_decode_offset: offset("PcDesc", "_scope_decode_offset")?,
            unsigned5_excluded,
        })
    }

    /// The `Method*`s of the scopes at `pc_offset` (from the code start) of
    /// the nmethod at `nmethod`, innermost first; `None` where the debug
    /// info has none (or does not add up). `leaf`: the pc is where the
    /// thread was, not a return address.
    pub fn methods_at(
        &self,
        memory: &impl ReadMemory,
        nmethod: u64,
        pc_offset: i64,
        leaf: bool,
    ) -> Option<Vec<u64>> {
        let info = self.debug_info(memory, nmethod)?;
        self.scope_methods(memory, &info, info.decode_offset(pc_offset, leaf)?)
    }

    /// The nmethod's debug info: where its scopes are, and its `PcDesc`s
    /// read once, so that every pc of it finds its scope without reading
    /// the JVM again.
    pub fn debug_info(&self, memory: &impl ReadMemory, nmethod: u64) -> Option<DebugInfo> {
        let arrays = self.arrays(memory, nmethod)?;
        let len = (arrays.pcs_end - arrays.pcs) as usize;
        let bytes = memory.read_vec(arrays.pcs, len).ok()?;
        let field = |desc: &[u8], at: u64| -> Option<i32> {
            let at = at as usize;
            Some(i32::from_le_bytes(desc.get(at..at + 4)?.try_into().ok()?))
        };
        let mut descs = bytes.chunks_exact(self.pc_desc_size as usize);
        // HotSpot's sentinel: the first PcDesc is at pc offset -1.
        if field(descs.next()?, self.pc_desc_pc_offset)? != -1 {
            return None;
        }
        let descs = descs
            .map(|desc| {
                Some((
                    field(desc, self.pc_desc_pc_offset)?,
                    field(desc, self.pc_desc_scope_decode_offset)?,
                ))
            })
            .collect::<Option<Vec<_>>>()?;
        // HotSpot records them by increasing pc offset (its own lookup is
        // a binary search, as is ours): any other order is not debug info.
        if !descs.windows(2).all(|pair| pair[0].0 < pair[1].0) {
            return None;
        }
        Some(DebugInfo {
            scopes_data: arrays.scopes_data,
            metadata: arrays.metadata,
            descs,
        })
    }

    /// The `Method*`s of the scope chain at `decode_offset`, innermost
    /// first.
    pub fn scope_methods(
        &self,
        memory: &impl ReadMemory,
        info: &DebugInfo,
        decode_offset: u64,
    ) -> Option<Vec<u64>> {
        let mut methods = Vec::new();
        let mut offset = decode_offset;
        while offset > 0 && methods.len() < MAX_SCOPES {
            let mut bytes = [0u8; SCOPE_BYTES];
            memory.read(info.scopes_data + offset, &mut bytes).ok()?;
            let mut stream = bytes.into_iter();
            let sender = unsigned5(&mut stream, self.unsigned5_excluded)?;
            let index = unsigned5(&mut stream, self.unsigned5_excluded)?;
            if index == 0 || index > MAX_METADATA {
                return None;
            }
            let method = memory
                .read_u64(info.metadata + 8 * u64::from(index - 1))
                .ok()?;
            methods.push(method);
            // Senders are written before the scopes they enclose.
            if u64::from(sender) >= offset {
                break;
            }
            offset = u64::from(sender);
        }
        (!methods.is_empty()).then_some(methods)
    }

    fn arrays(&self, memory: &impl ReadMemory, nmethod: u64) -> Option<Arrays> {
        let int = |field: u64| memory.read_u32(nmethod + field).ok().map(u64::from);
        let arrays = match &self.shape {
            Shape::InNmethod {
                scopes_pcs_offset,
                dependencies_offset,
                metadata_offset,
                scopes_data_begin,
            } => Arrays {
                pcs: nmethod + int(*scopes_pcs_offset)?,
                pcs_end: nmethod + int(*dependencies_offset)?,
                scopes_data: memory.read_u64(nmethod + scopes_data_begin).ok()?,
                metadata: nmethod + int(*metadata_offset)?,
            },
            Shape::Separate {
                immutable_data,
                scopes_pcs_offset,
                scopes_data_offset,
                mutable_data,
                relocation_size,
            } => {
                let immutable = memory.read_u64(nmethod + immutable_data).ok()?;
                let scopes_data = immutable + int(*scopes_data_offset)?;
                Arrays {
                    pcs: immutable + int(*scopes_pcs_offset)?,
                    pcs_end: scopes_data,
                    scopes_data,
                    metadata: memory.read_u64(nmethod + mutable_data).ok()?
                        + int(*relocation_size)?,
                }
            }
        };
        let count = arrays.pcs_end.checked_sub(arrays.pcs)? / self.pc_desc_size;
        (count > 0 && count <= MAX_PC_DESCS).then_some(arrays)
    }
}

/// One nmethod's debug info: its `PcDesc`s (pc offset, scope decode
/// offset; the sentinel left out), and where its scopes and metadata are.
#[derive(Debug, Clone)]
pub struct DebugInfo {
    scopes_data: u64,
    metadata: u64,
    descs: Vec<(i32, i32)>,
}

impl DebugInfo {
    /// The scope decode offset of the `PcDesc` of `pc_offset` (for a
    /// `leaf`, the first at or after it: HotSpot's own rule). A binary
    /// search, as HotSpot's own lookup is: the descs are in increasing pc
    /// order ([`InliningLayout::debug_info`] keeps no others), and a large
    /// C2 method has thousands. (Measured over a testbed job, the scan it
    /// replaced was not a visible share of sparkprof's CPU: this bounds the
    /// cost per pc, it did not lower a measured one.)
    pub fn decode_offset(&self, pc_offset: i64, leaf: bool) -> Option<u64> {
        let first = self
            .descs
            .partition_point(|&(at, _)| i64::from(at) < pc_offset);
        let &(at, decode) = self.descs.get(first)?;
        (i64::from(at) == pc_offset || leaf)
            .then(|| u64::try_from(decode).ok().filter(|&d| d > 0))
            .flatten()
    }

    /// `PcDesc`s held.
    pub fn len(&self) -> usize {
        self.descs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.descs.is_empty()
    }
}

/// Where one nmethod's debug info is.
struct Arrays {
    pcs: u64,
    pcs_end: u64,
    scopes_data: u64,
    metadata: u64,
}

#[cfg(test)]
mod tests {
    use super::DebugInfo;

    #[test]
    fn a_return_address_takes_its_own_desc_and_a_leaf_the_next() {
        let info = DebugInfo {
            scopes_data: 0,
            metadata: 0,
            descs: vec![(0, 5), (16, 9), (40, 0), (64, 12)],
        };
        let at = |pc, leaf| info.decode_offset(pc, leaf);
        // A return address: only a desc at exactly its offset.
        assert_eq!(at(16, false), Some(9));
        assert_eq!(at(17, false), None);
        assert_eq!(at(-3, false), None);
        // A leaf: the first desc at or after it.
        assert_eq!(at(17, true), None, "decode offset 0: no scope");
        assert_eq!(at(41, true), Some(12));
        assert_eq!(at(-3, true), Some(5));
        assert_eq!(at(64, true), Some(12));
        // Past the last desc: none.
        assert_eq!(at(65, true), None);
        assert_eq!(at(65, false), None);
    }
}
