//! The ids of a keyed write's rows: what [`super::table`]'s keyed staging
//! looks up through [`super::row_locate`].

use std::collections::HashSet;

use arrow_array::{RecordBatch, StringArray};

/// The `id`s of `batches` when all are distinct (a batch repeating a key is
/// for the merge to refuse or fold, never an append), else `None`.
pub fn distinct_ids(batches: &[RecordBatch]) -> Option<Vec<&str>> {
    let mut seen = HashSet::new();
    for b in batches {
        let ids = b.column_by_name("id")?.as_any().downcast_ref::<StringArray>()?;
        for id in ids.iter() {
            if !seen.insert(id?) {
                return None;
            }
        }
    }
    Some(seen.into_iter().collect())
}
