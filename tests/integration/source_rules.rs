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

/// The top-level modules, lowest layer first: a module may import only from
/// layers below it (wire types at the bottom; the daemon, then the CLI's
/// modules of the binary, at the top).
const LAYERS: [&str; 7] = ["protocol", "engine", "recovery", "actors", "graph", "server", "cli"];

/// A module's path under `src/` (`src/a/b.rs` and `src/a/b/mod.rs` → `[a, b]`).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src").with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().to_string()).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The import graph between second-level modules (`engine::storage`,
/// `actors::lease`, …; a top-level module's own file is `engine::`): an edge
/// for every `crate::a::b` and `super::…::b` path in a file's code.
fn import_graph() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files: Vec<_> =
        files_with_suffix(&src, ".rs").into_iter().filter(|f| f.parent() != Some(src.as_path())).collect();
    let modules: std::collections::BTreeSet<Vec<String>> = files.iter().map(|f| module_path(&src, f)).collect();
    let node = |path: &[String]| -> String {
        // Each segment counts only if it names a module (not an item or a
        // `#[macro_export]` macro at the crate root).
        match path {
            [top, second, ..] if modules.contains(&vec![top.clone(), second.clone()]) => format!("{top}::{second}"),
            [top, ..] if modules.iter().any(|m| m[0] == *top) => format!("{top}::"),
            _ => String::new(),
        }
    };
    let crate_path = regex::Regex::new(r"\bcrate::([a-z_]+)(?:::([a-z_]+))?").expect("regex");
    let super_path = regex::Regex::new(r"\b((?:super::)+)([a-z_]+)").expect("regex");
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    for file in &files {
        let me = module_path(&src, file);
        let from = node(&me);
        let text = std::fs::read_to_string(file).expect("read source");
        for line in text.lines().map(str::trim_start).filter(|l| !l.starts_with("//")) {
            let mut targets: Vec<Vec<String>> = crate_path
                .captures_iter(line)
                .map(|c| [c.get(1), c.get(2)].into_iter().flatten().map(|m| m.as_str().to_string()).collect())
                .collect();
            for c in super_path.captures_iter(line) {
                let ups = c[1].matches("super::").count();
                if ups <= me.len() {
                    let mut t = me[..me.len() - ups].to_vec();
                    t.push(c[2].to_string());
                    targets.push(t);
                }
            }
            for t in targets {
                let to = node(&t);
                if !to.is_empty() && to != from {
                    graph.entry(from.clone()).or_default().insert(to);
                }
            }
        }
    }
    graph
}

/// One import cycle in `graph`, if any (depth-first search).
fn find_cycle(graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|s| s == n) {
            let mut cycle = stack[i..].to_vec();
            cycle.push(n.to_string());
            return Some(cycle);
        }
        if done.contains(n) {
            return None;
        }
        stack.push(n.to_string());
        for next in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(next, graph, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    graph.keys().find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn modules_import_only_downward_and_without_cycles() {
    let graph = import_graph();
    // Guard against a scan that finds nothing (a moved tree, a changed idiom).
    assert!(graph.get("actors::runtime").is_some_and(|t| t.contains("engine::storage")), "{graph:?}");
    let rank = |node: &str| LAYERS.iter().position(|l| node.split("::").next() == Some(l));
    let mut upward = Vec::new();
    for (from, targets) in &graph {
        for to in targets {
            match (rank(from), rank(to)) {
                (Some(a), Some(b)) if b > a => upward.push(format!("{from} -> {to}")),
                (None, _) | (_, None) => upward.push(format!("{from} -> {to} (a module outside the layers)")),
                _ => {}
            }
        }
    }
    assert!(upward.is_empty(), "upward imports (layers, lowest first: {LAYERS:?}):\n{}", upward.join("\n"));
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle: {}", cycle.join(" -> "));
    }
}

#[test]
fn the_cycle_check_finds_a_cycle() {
    let mut graph: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    graph.entry("a::x".into()).or_default().insert("a::y".into());
    graph.entry("a::y".into()).or_default().insert("a::z".into());
    assert_eq!(find_cycle(&graph), None);
    graph.entry("a::z".into()).or_default().insert("a::x".into());
    assert_eq!(find_cycle(&graph).map(|c| c.len()), Some(4));
}

/// The pure core must build without storage: its manifest names none of the
/// storage or runtime crates, so its tests never compile or link Lance.
#[test]
fn the_pure_core_depends_on_no_storage_crate() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/omnigraph-core/Cargo.toml");
    let text = std::fs::read_to_string(manifest).expect("core manifest");
    let deps: Vec<&str> = text
        .lines()
        .skip_while(|l| l.trim() != "[dependencies]")
        .skip(1)
        .take_while(|l| !l.starts_with('['))
        .filter_map(|l| l.split(['=', '.']).next().map(str::trim))
        .filter(|d| !d.is_empty())
        .collect();
    assert!(deps.contains(&"arrow-schema"), "the dependency scan read nothing: {deps:?}");
    let storage = ["lance", "datafusion", "object_store", "tokio", "ractor"];
    let offenders: Vec<&&str> = deps.iter().filter(|d| storage.iter().any(|s| d.starts_with(s))).collect();
    assert!(offenders.is_empty(), "omnigraph-core depends on storage/runtime crates: {offenders:?}");
}

/// The storage primitives that move a table's HEAD, a ref or the manifest,
/// and the only files outside their defining module that may call them: the
/// actor owning that table, ref or branch (which checks the caller's lease
/// first). Everything else reaches them through the actors.
const OWNED_PRIMITIVES: &[(&str, &[&str])] = &[
    ("commit_exact(", &["actors/table.rs"]),
    ("branches::create_exact(", &["actors/table.rs", "actors/branch.rs"]),
    ("branches::delete_exact(", &["actors/branch.rs"]),
    ("branches::reclaim(", &["actors/table.rs"]),
    ("publish_from(", &["actors/branch.rs"]),
    ("publisher::publish(", &[]),
];

#[test]
fn commit_and_publish_primitives_are_called_only_by_their_owning_actor() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let defining = [src.join("engine/storage"), src.join("engine/manifest")];
    let mut offenders = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for file in files_with_suffix(&src, ".rs") {
        if defining.iter().any(|d| file.starts_with(d)) {
            continue;
        }
        let rel = file.strip_prefix(&src).expect("under src").to_string_lossy().replace('\\', "/");
        let text = std::fs::read_to_string(&file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for (primitive, owners) in OWNED_PRIMITIVES {
                if code.contains(primitive) {
                    seen.insert(*primitive);
                    if !owners.contains(&rel.as_str()) {
                        offenders.push(format!("src/{rel}:{}: {primitive}", n + 1));
                    }
                }
            }
        }
    }
    // Each owner really calls its primitive: the rule cannot pass because a
    // name changed and the scan matches nothing.
    for (primitive, owners) in OWNED_PRIMITIVES {
        assert!(owners.is_empty() || seen.contains(primitive), "no call of {primitive} found: renamed?");
    }
    assert!(offenders.is_empty(), "storage primitives called outside their owning actor:\n{}", offenders.join("\n"));
}
