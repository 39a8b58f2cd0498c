//! A method's name from its `Method*`, as async-profiler prints it:
//! `pkg.Class.method` (the class's internal name with `/` as `.`).
//! `Method` → `ConstMethod` → its `ConstantPool` → the pool holder's class
//! name, and the method's name at its constant-pool index; both are
//! `Symbol`s (a length and UTF-8 bytes).

use super::{HotspotError, layout::HotspotLayout};
use crate::sys::memory::ReadMemory;

/// Longest symbol read (HotSpot allows 65535; real names are far shorter).
const MAX_SYMBOL: u64 = 4096;

/// Class and method name of a `Method*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodName {
    /// Internal form, e.g. `java/lang/Thread`.
    pub class: String,
    pub method: String,
}

impl MethodName {
    /// `java.lang.Thread.run`. A hidden class (a lambda's, say) drops the
    /// address HotSpot appends to its name (`Job$$Lambda$12+0x7f3c…`): it
    /// differs in every JVM, and the same lambda of every executor should
    /// add up in one frame.
    pub fn readable(&self) -> String {
        let class = match self.class.rsplit_once("+0x") {
            Some((class, address)) if address.bytes().all(|b| b.is_ascii_hexdigit()) => class,
            _ => &self.class,
        };
        format!("{}.{}", class.replace('/', "."), self.method)
    }
}

/// Reads the names of the method at `method`.
pub fn method_name(
    memory: &impl ReadMemory,
    layout: &HotspotLayout,
    method: u64,
) -> Result<MethodName, HotspotError> {
    let const_method = memory.read_u64(method + layout.method_const_method)?;
    let pool = memory.read_u64(const_method + layout.const_method_constants)?;
    let holder = memory.read_u64(pool + layout.constant_pool_pool_holder)?;
    let class = symbol(memory, layout, memory.read_u64(holder + layout.klass_name)?)?;
    let index = memory.read_u16(const_method + layout.const_method_name_index)?;
    let slot = pool + layout.constant_pool_size + 8 * u64::from(index);
    // A resolved UTF-8 entry holds its `Symbol*` (bit 0 is a tag).
    let method = symbol(memory, layout, memory.read_u64(slot)? & !1)?;
    Ok(MethodName { class, method })
}

fn symbol(
    memory: &impl ReadMemory,
    layout: &HotspotLayout,
    address: u64,
) -> Result<String, HotspotError> {
    let length = u64::from(memory.read_u16(address + layout.symbol_length)?);
    if length == 0 || length > MAX_SYMBOL {
        return Err(HotspotError::Garbage(format!(
            "a symbol of {length} bytes at {address:#x}"
        )));
    }
    let bytes = memory.read_vec(address + layout.symbol_body, length as usize)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
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
    }
}
