//! Architecture rules checked over the source tree.

use std::path::Path;

use crate::common::files_with_suffix;

/// Lance APIs that write (commit inline or stage). Only the storage adapter
/// (`src/engine/storage/`) may name them.
const LANCE_WRITE_APIS: &[&str] = &[
    "CommitBuilder",
    "InsertBuilder",
    "MergeInsertBuilder",
    "DeleteBuilder",
    "UpdateBuilder",
    "Dataset::write",
    "Dataset::commit",
    "write_fragments",
    ".restore(",
    "commit_compaction",
    "compact_files",
    "create_index",
    "create_branch(",
    "delete_branch(",
    "execute_uncommitted",
    ".merge_insert(",
    "cleanup_old_versions",
];

#[test]
fn lance_write_apis_are_called_only_in_the_storage_adapter() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let adapter = src.join("engine").join("storage");
    let mut offenders = Vec::new();
    for file in files_with_suffix(&src, ".rs") {
        if file.starts_with(&adapter) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for api in LANCE_WRITE_APIS {
                if code.contains(api) {
                    offenders.push(format!("{}:{}: {api}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(offenders.is_empty(), "Lance write APIs outside src/engine/storage:\n{}", offenders.join("\n"));
}

#[test]
fn the_scan_sees_the_adapter_itself() {
    // Guard against the rule above passing vacuously (e.g. a moved directory).
    let adapter = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine/storage/table.rs");
    let text = std::fs::read_to_string(adapter).expect("adapter exists");
    assert!(text.contains("CommitBuilder") && text.contains("MergeInsertBuilder"));
}
