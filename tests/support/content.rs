//! A branch's content as comparable data: every table's rows without their
//! ids (generated ids differ between runs and branches), sorted. Equal
//! content = the same graph.

use std::collections::BTreeMap;

use omnigraph::Graph;
use omnigraph::engine::manifest;
use omnigraph::engine::storage::table;

/// Table key → sorted rows (`src dst props`, ids left out) on `branch`.
pub async fn content(g: &Graph, branch: &str) -> BTreeMap<String, Vec<String>> {
    content_at(g, branch, None).await
}

/// [`content`] at one `__manifest` version of `branch` (`None`: its head).
#[allow(dead_code)] // the crash binary reads heads only
pub async fn content_at(g: &Graph, branch: &str, version: Option<u64>) -> BTreeMap<String, Vec<String>> {
    let view = manifest::load(g.root(), branch, version).await.expect("view");
    let mut out = BTreeMap::new();
    for t in view.state.tables.values() {
        let uri = g.root().child_uri(&t.location);
        let ds = table::open_table(&uri, t.branch.as_deref(), Some(t.version)).await.expect("open");
        let mut rows: Vec<String> = table::scan(&ds, None)
            .await
            .expect("scan")
            .iter()
            .flat_map(omnigraph::engine::rows::from_batch)
            .map(|r| format!("{:?} {:?} {:?}", r.src, r.dst, r.props))
            .collect();
        rows.sort();
        out.insert(t.table_key.clone(), rows);
    }
    out
}
