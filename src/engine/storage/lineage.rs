//! Row lineage kept out of Lance manifests.
//!
//! With stable row ids, Lance records when each row of a fragment was created
//! and last updated, run-length encoded by version, inline in the table's
//! manifest. A compaction merges fragments written at many versions, so the
//! fragment it writes carries one run per commit that wrote its rows (about
//! 20 bytes each, in two sequences): a table taking one-row commits carries
//! its commit history in every manifest version, which every open reads and
//! every commit rewrites (`__manifest` grew from 4.6 KB at 100 commits to
//! 25 KB at 1,130, and optimize could not shrink it).
//!
//! Lance 14 moves a sequence over a table's inline limit into hidden columns
//! of the data file a compaction (or update) writes, when the table's config
//! asks for it. Every table omnigraph creates carries that config; optimize
//! and the `__manifest` compaction set it on tables an older binary created.
//! The config changes no row and no read: Lance reads spilled lineage like
//! inline lineage, only from the data file.

use std::collections::HashMap;

/// Lance's table config key that turns spilling on (`lance::dataset::rowids::spill`).
pub const SPILL_KEY: &str = "lance.row_lineage.spill";

/// Lance's table config key for the largest sequence kept inline, in bytes.
pub const INLINE_MAX_KEY: &str = "lance.row_lineage.inline_max_bytes";

/// The largest lineage sequence a manifest keeps inline. Lance's default
/// (200 KiB) holds ~8,000 one-row commits per sequence; at 1 KiB a fragment's
/// sequences leave once they record ~50 commits, while an appended fragment's
/// single run (a few dozen bytes) always stays inline, so appends never spill.
pub const INLINE_MAX_BYTES: &str = "1024";

/// The config entries every table carries.
pub const ENTRIES: [(&str, &str); 2] = [(SPILL_KEY, "true"), (INLINE_MAX_KEY, INLINE_MAX_BYTES)];

/// The config entries as the map a creating transaction upserts.
pub fn config() -> HashMap<String, String> {
    ENTRIES.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// Whether a table's config already spills its lineage as omnigraph sets it.
pub fn is_set(config: &HashMap<String, String>) -> bool {
    ENTRIES.iter().all(|(key, value)| config.get(*key).map(String::as_str) == Some(*value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_created_config_is_recognised_and_a_partial_or_other_one_is_not() {
        assert!(is_set(&config()));
        let mut partial = config();
        partial.remove(INLINE_MAX_KEY);
        assert!(!is_set(&partial));
        let mut other = config();
        other.insert(SPILL_KEY.to_string(), "false".to_string());
        assert!(!is_set(&other));
        assert!(!is_set(&HashMap::new()));
    }
}
