//! Stable table and property ids.
//!
//! Ids are derived from names so that compiling the same schema twice gives
//! the same catalog; a schema apply that follows `@rename_from` carries the
//! previous ids over with [`super::Catalog::adopt_ids`], so data files never
//! move when a type or property is renamed.

use super::types::TypeKind;
use sha2::{Digest, Sha256};

/// Lowercase hex of the sha256 of `input`.
pub fn sha256_hex(input: &[u8]) -> String {
    let digest = Sha256::digest(input);
    let mut out = String::with_capacity(64);
    for byte in digest {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// First 16 hex chars of sha256(`input`): 64 bits, ample for one graph.
fn short_hash(input: &str) -> String {
    let mut hex = sha256_hex(input.as_bytes());
    hex.truncate(16);
    hex
}

/// Table id: `n…` for nodes (hash of `node:Name`), `e…` for edges.
pub fn table_id(kind: TypeKind, name: &str) -> String {
    match kind {
        TypeKind::Node => format!("n{}", short_hash(&format!("node:{name}"))),
        TypeKind::Edge => format!("e{}", short_hash(&format!("edge:{name}"))),
    }
}

/// Property id: `p` + hash of `prop:Owner.name`.
pub fn prop_id(owner: &str, name: &str) -> String {
    format!("p{}", short_hash(&format!("prop:{owner}.{name}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_deterministic_and_prefixed() {
        let a = table_id(TypeKind::Node, "Person");
        assert_eq!(a, table_id(TypeKind::Node, "Person"));
        assert!(a.starts_with('n') && a.len() == 17);
        assert_ne!(a, table_id(TypeKind::Edge, "Person"));
        assert!(prop_id("Person", "name").starts_with('p'));
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }
}
