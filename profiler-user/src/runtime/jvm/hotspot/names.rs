//! A method's name from its `Method*`, as async-profiler prints it:
//! `pkg.Class.method` (the class's internal name with `/` as `.`).
//! `Method` → `ConstMethod` → its `ConstantPool` → the pool holder's class
//! name, and the method's name at its constant-pool index; both are
//! `Symbol`s (a length and UTF-8 bytes).

use std::sync::Arc;

use super::{HotspotError, layout::HotspotLayout};
use crate::{FastMap, sys::memory::ReadMemory};

/// Longest symbol read (HotSpot allows 65535; real names are far shorter).
const MAX_SYMBOL: u64 = 4096;

/// Class and method name of a `Method*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodName {
    /// Internal form, e.g. `java/lang/Thread`.
    pub class: Arc<str>,
    pub method: Arc<str>,
}

impl MethodName {
    /// `java.lang.Thread.run`. A hidden class (a lambda's, say) drops the
    /// address HotSpot appends to its name (`Job$$Lambda$12+0x7f3c…`): it
    /// differs in every JVM, and the same lambda of every executor should
    /// add up in one frame.
    pub fn readable(&self) -> String {
        self.shared().to_string()
    }

    /// [`Self::readable`], built in its one allocation: thousands of names
    /// are made in a JVM's first minute.
    pub fn shared(&self) -> Arc<str> {
        // By its last `+` (a byte search: a substring search's set-up, for
        // every name of a JVM's first minute, cost more than the rest).
        let class = match self.class.rfind('+') {
            Some(plus)
                if self.class[plus + 1..]
                    .strip_prefix("0x")
                    .is_some_and(|address| address.bytes().all(|b| b.is_ascii_hexdigit())) =>
            {
                &self.class[..plus]
            }
            _ => &self.class,
        };
        let len = class.len() + 1 + self.method.len();
        let mut on_stack = [0u8; 512];
        let mut on_heap = Vec::new();
        let bytes: &mut [u8] = match on_stack.get_mut(..len) {
            Some(bytes) => bytes,
            None => {
                on_heap.resize(len, 0);
                &mut on_heap
            }
        };
        // `/` and `.` are ASCII, never part of another character's bytes:
        // the name stays UTF-8.
        for (to, &from) in bytes.iter_mut().zip(class.as_bytes()) {
            *to = if from == b'/' { b'.' } else { from };
        }
        bytes[class.len()] = b'.';
        bytes[class.len() + 1..].copy_from_slice(self.method.as_bytes());
        Arc::from(String::from_utf8_lossy(bytes))
    }
}

/// Names already read, kept as long as the cache of method names beside
/// them.
#[derive(Debug, Default)]
pub struct NamesRead {
    /// Class names by constant pool (every method of a class shares its
    /// pool): the class half of a name costs no read after the first
    /// method.
    classes: FastMap<u64, Arc<str>>,
    /// Method names by `Symbol*`: HotSpot interns symbols, and one name
    /// serves many methods (an executor's 7,992 methods had 4,319 names,
    /// 697 of them `apply`), so a known name costs no read.
    symbols: FastMap<u64, Arc<str>>,
    /// Where the names of methods being read lie (`Method*` → its
    /// constant pool and name index), kept for one drain
    /// ([`Self::forget_sites`]), as the blocks they were read from: a
    /// prefetch's rounds walk every method not named yet from its start,
    /// and reading its `Method` and `ConstMethod` again in every round was
    /// most of what the rounds cost (a testbed job's new methods took
    /// about five walks each).
    sites: FastMap<u64, (u64, u16)>,
}

impl NamesRead {
    /// Names held.
    pub fn len(&self) -> usize {
        self.classes.len() + self.symbols.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn clear(&mut self) {
        self.classes.clear();
        self.symbols.clear();
        self.sites.clear();
    }

    /// Lets go of the sites read in a drain: the process may have changed
    /// them since.
    pub fn forget_sites(&mut self) {
        self.sites.clear();
    }
}

/// Reads the names of the method at `method`.
///
/// Reads of another process's memory are most of what naming a JIT-heavy
/// JVM costs, so each struct is read once (the `ConstMethod` fields in one
/// block, a symbol's length with its first bytes) and names read are kept
/// ([`NamesRead`]): three reads for a method of a known class and name,
/// seven at most.
pub fn method_name(
    memory: &impl ReadMemory,
    layout: &HotspotLayout,
    read: &mut NamesRead,
    method: u64,
) -> Result<MethodName, HotspotError> {
    let (pool, index) = match read.sites.get(&method) {
        Some(&site) => site,
        None => {
            let const_method = memory.read_u64(method + layout.method_const_method)?;
            let site = const_method_fields(memory, layout, const_method)?;
            read.sites.insert(method, site);
            site
        }
    };
    let class = match read.classes.get(&pool) {
        Some(class) => class.clone(),
        None => {
            let holder = memory.read_u64(pool + layout.constant_pool_pool_holder)?;
            let class = symbol(memory, layout, memory.read_u64(holder + layout.klass_name)?)?;
            read.classes.insert(pool, class.clone());
            class
        }
    };
    let slot = name_slot(layout, pool, index);
    // A resolved UTF-8 entry holds its `Symbol*` (bit 0 is a tag).
    let name = memory.read_u64(slot)? & !1;
    let method = match read.symbols.get(&name) {
        Some(method) => method.clone(),
        None => {
            let method = symbol(memory, layout, name)?;
            read.symbols.insert(name, method.clone());
            method
        }
    };
    Ok(MethodName { class, method })
}

/// Where the `Symbol*` of the name at constant-pool `index` is.
fn name_slot(layout: &HotspotLayout, pool: u64, index: u16) -> u64 {
    pool.wrapping_add(layout.constant_pool_size + 8 * u64::from(index))
}

/// The bytes of `ConstMethod` [`const_method_fields`] reads: offset, length.
fn const_method_span(layout: &HotspotLayout) -> (u64, usize) {
    let (constants, name_index) = (
        layout.const_method_constants,
        layout.const_method_name_index,
    );
    let start = constants.min(name_index);
    let end = (constants + 8).max(name_index + 2);
    (start, (end - start) as usize)
}

/// `ConstMethod::_constants` and `_name_index`, in one read of the bytes
/// from the lower field to the end of the higher.
fn const_method_fields(
    memory: &impl ReadMemory,
    layout: &HotspotLayout,
    const_method: u64,
) -> Result<(u64, u16), HotspotError> {
    let (constants, name_index) = (
        layout.const_method_constants,
        layout.const_method_name_index,
    );
    let (start, len) = const_method_span(layout);
    // Read onto the stack: the two fields lie a few bytes apart.
    let mut buf = [0u8; 64];
    let heap;
    let block: &[u8] = match buf.get_mut(..len) {
        Some(block) => {
            memory.read(const_method + start, block)?;
            block
        }
        None => {
            heap = memory.read_vec(const_method + start, len)?;
            &heap
        }
    };
    let at = |offset: u64| (offset - start) as usize;
    let pool = u64::from_le_bytes(block[at(constants)..at(constants) + 8].try_into().unwrap());
    let index = u16::from_le_bytes(
        block[at(name_index)..at(name_index) + 2]
            .try_into()
            .unwrap(),
    );
    Ok((pool, index))
}

/// Bytes of a symbol read with its length (most names are shorter).
const SYMBOL_FIRST_READ: u64 = 96;

/// What [`symbol`] reads first of the symbol at `address`: its length and
/// first bytes, never past the page it starts on (the next may not be
/// mapped).
fn symbol_head(layout: &HotspotLayout, address: u64) -> (u64, usize) {
    let (length_at, body_at) = (layout.symbol_length, layout.symbol_body);
    let first = address.wrapping_add(length_at.min(body_at));
    let to_page_end = 0x1000 - (first & 0xfff);
    let wanted = (body_at + SYMBOL_FIRST_READ).saturating_sub(length_at.min(body_at));
    (first, wanted.min(to_page_end) as usize)
}

fn symbol(
    memory: &impl ReadMemory,
    layout: &HotspotLayout,
    address: u64,
) -> Result<Arc<str>, HotspotError> {
    let (length_at, body_at) = (layout.symbol_length, layout.symbol_body);
    // The length and the first bytes in one read (onto the stack); the
    // rest if longer.
    let (first, len) = symbol_head(layout, address);
    let mut buf = [0u8; 256];
    let head_vec;
    let head: &[u8] = match buf.get_mut(..len) {
        Some(head) => {
            memory.read(first, head)?;
            head
        }
        None => {
            head_vec = memory.read_vec(first, len)?;
            &head_vec
        }
    };
    let at = |offset: u64| (address + offset - first) as usize;
    let length = match head.get(at(length_at)..at(length_at) + 2) {
        Some(bytes) => u64::from(u16::from_le_bytes(bytes.try_into().unwrap())),
        None => u64::from(memory.read_u16(address + length_at)?),
    };
    if length == 0 || length > MAX_SYMBOL {
        return Err(HotspotError::Garbage(format!(
            "a symbol of {length} bytes at {address:#x}"
        )));
    }
    let rest;
    let bytes = match head.get(at(body_at)..at(body_at) + length as usize) {
        Some(bytes) => bytes,
        None => {
            rest = memory.read_vec(address + body_at, length as usize)?;
            &rest
        }
    };
    Ok(Arc::from(String::from_utf8_lossy(bytes)))
}

#[cfg(test)]
mod tests {
    use super::MethodName;

    #[test]
    fn hidden_classes_lose_their_address() {
        let name = |class: &str| {
            MethodName {
                class: class.into(),
                method: "run".into(),
            }
            .readable()
        };
        assert_eq!(name("java/lang/Thread"), "java.lang.Thread.run");
        assert_eq!(
            name("org/apache/spark/Job$$Lambda$12+0x00007f784c000a08"),
            "org.apache.spark.Job$$Lambda$12.run"
        );
        // Not an address: kept.
        assert_eq!(name("a/B+0xyz"), "a.B+0xyz.run");
        // Other characters as they are, and a name longer than the stack's
        // room whole.
        assert_eq!(name("été/Ünï/Клас"), "été.Ünï.Клас.run");
        let long = "p/".repeat(400);
        assert_eq!(name(&long), format!("{}.run", "p.".repeat(400)));
    }
}
