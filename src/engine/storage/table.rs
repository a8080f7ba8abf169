//! Lance table operations: create, open, stage, commit exactly, restore.
//!
//! This is the only module in the crate that calls Lance write APIs (a test
//! scans `src/` to keep it so). Every write is staged first and committed
//! through [`commit_exact`], which allows zero transparent retries and admits
//! exactly `read_version + 1` (see [`super::guard`]).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{RecordBatch, RecordBatchIterator};
use arrow_schema::{Schema as ArrowSchema, SchemaRef};
use datafusion::scalar::ScalarValue;
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::builder::DatasetBuilder;
use lance::dataset::scanner::RowAddrTreeMap;
use lance::dataset::transaction::{Operation, Transaction, UpdateMap, UpdateMapEntry, UpdateMode};
use lance::dataset::{
    CommitBuilder, DeleteBuilder, InsertBuilder, MergeInsertBuilder, WhenMatched, WhenNotMatched, WriteMode,
    WriteParams,
};
use lance_file::version::LanceFileVersion;

use super::caches;
use super::guard::ExpectVersion;
use super::io_hook;
use super::key_probe;
use super::lineage;
use super::row_locate;
use super::staged::{CommittedTxn, MergeMode, StagePlan, StagedTxn, TxnIdentity};
use crate::protocol::{OmniError, Result};

/// The Lance file format every omnigraph dataset uses.
const FILE_VERSION: LanceFileVersion = LanceFileVersion::V2_2;

/// Lance's `main` branch is addressed as `None`.
fn lance_branch(branch: Option<&str>) -> Option<&str> {
    branch.filter(|b| *b != "main")
}

/// Write parameters shared by every dataset: stable row ids on, auto-cleanup
/// off (nothing may garbage-collect a version `__manifest` pins).
fn write_params(uri: &str, mode: WriteMode) -> WriteParams {
    WriteParams {
        mode,
        enable_stable_row_ids: true,
        data_storage_version: Some(FILE_VERSION),
        auto_cleanup: None,
        skip_auto_cleanup: true,
        store_params: io_hook::store_params(uri),
        session: Some(caches::private_session()),
        ..Default::default()
    }
}

/// Create a dataset at `uri` holding `batch` as version 1, with the table
/// config every omnigraph table carries ([`lineage`]). Fails if one exists.
pub async fn create_table(uri: &str, batch: RecordBatch) -> Result<Arc<Dataset>> {
    create(uri, batch, true).await
}

/// [`create_table`] without the [`lineage`] config, as binaries before it
/// created every table: for tests of the migration (optimize sets it).
#[doc(hidden)]
pub async fn create_table_without_lineage_config(uri: &str, batch: RecordBatch) -> Result<Arc<Dataset>> {
    create(uri, batch, false).await
}

async fn create(uri: &str, batch: RecordBatch, with_lineage: bool) -> Result<Arc<Dataset>> {
    let params = write_params(uri, WriteMode::Create);
    let mut txn = InsertBuilder::new(uri)
        .with_params(&params)
        .execute_uncommitted(vec![batch])
        .await
        .map_err(|e| OmniError::storage(format!("creating table {uri}"), e))?;
    if with_lineage {
        with_lineage_config(&mut txn.operation);
    }
    create_builder(uri).execute(txn).await.map_err(|e| OmniError::storage(format!("creating table {uri}"), e))?;
    // Opened again: the committed handle keeps the create's version-1-only
    // commit handler, which would refuse every later commit through it.
    open_table(uri, None, Some(1)).await
}

/// Add the lineage config to a creating `Overwrite`.
fn with_lineage_config(operation: &mut Operation) {
    if let Operation::Overwrite { config_upsert_values, .. } = operation {
        config_upsert_values.get_or_insert_with(HashMap::new).extend(lineage::config());
    }
}

/// A commit that creates the dataset at `uri` as version 1: stable row ids,
/// the omnigraph file format, no retries, no auto-cleanup.
fn create_builder(uri: &str) -> CommitBuilder<'_> {
    let mut builder = CommitBuilder::new(uri).with_session(caches::private_session());
    if let Some(params) = io_hook::store_params(uri) {
        builder = builder.with_store_params(params);
    }
    builder
        .use_stable_row_ids(true)
        .with_storage_format(FILE_VERSION)
        .with_max_retries(0)
        .with_skip_auto_cleanup(true)
        .with_commit_handler(ExpectVersion::new(1))
}

/// Append `batch` to the dataset at `uri`, creating it if absent. Used only
/// for the recovery audit log, which no manifest pins (so an inline commit
/// with Lance's own retries is right here).
pub async fn append_or_create(uri: &str, batch: RecordBatch) -> Result<()> {
    let schema = batch.schema();
    let reader = RecordBatchIterator::new(vec![Ok(batch)], schema);
    let exists = open_table(uri, None, None).await.is_ok();
    let params = write_params(uri, if exists { WriteMode::Append } else { WriteMode::Create });
    Dataset::write(reader, uri, Some(params))
        .await
        .map_err(|e| OmniError::storage(format!("appending to {uri}"), e))?;
    Ok(())
}

/// Open a table at `version` (or its latest) on a native branch (`None`/`main` = main).
/// A private session with the budget's capacities (see [`caches`]).
pub async fn open_table(uri: &str, branch: Option<&str>, version: Option<u64>) -> Result<Arc<Dataset>> {
    let ds = open_with(Sessions::Private, uri, branch, version).await?;
    caches::track(&ds);
    Ok(ds)
}

/// [`open_table`] at an exact version for a query, through the shared read session.
pub async fn open_table_for_read(uri: &str, branch: Option<&str>, version: u64) -> Result<Arc<Dataset>> {
    open_with(Sessions::Read, uri, branch, Some(version)).await
}

/// Which Lance session an open uses ([`caches`]).
#[derive(Debug, Clone, Copy)]
enum Sessions {
    /// A private one, with the budget's capacities.
    Private,
    /// The read path's shared one.
    Read,
}

impl Sessions {
    fn builder(self, uri: &str) -> DatasetBuilder {
        let builder = DatasetBuilder::from_uri(uri);
        let builder = match self {
            Sessions::Private => caches::private(builder),
            Sessions::Read => builder.with_session(caches::read_session()),
        };
        match io_hook::store_params(uri) {
            Some(params) => builder.with_store_params(params),
            None => builder,
        }
    }
}

async fn open_with(sessions: Sessions, uri: &str, branch: Option<&str>, version: Option<u64>) -> Result<Arc<Dataset>> {
    // Latest, on a local disk: found from Lance's hint, not by listing every
    // version; should that version be gone by now, Lance lists after all.
    if version.is_none()
        && let Some(latest) = super::version_hint::local_latest(uri, lance_branch(branch))
        && let Ok(ds) = load_at(sessions, uri, branch, Some(latest)).await
    {
        return Ok(ds);
    }
    load_at(sessions, uri, branch, version).await.map_err(|e| open_error(uri, branch, version, e))
}

async fn load_at(
    sessions: Sessions,
    uri: &str,
    branch: Option<&str>,
    version: Option<u64>,
) -> std::result::Result<Arc<Dataset>, lance::Error> {
    let ds = match (lance_branch(branch), version) {
        // A native branch at a known version is opened at its own chain
        // (`<table>/tree/<branch>`). Through `with_branch` Lance would first
        // resolve the root's latest version, listing its `_versions/`, which
        // gains a file with every commit on main: an open of a branch would
        // cost more the longer main's history.
        (Some(b), Some(v)) => {
            let ds = sessions.builder(&format!("{uri}/tree/{b}")).with_version(v).load().await?;
            if ds.manifest().branch.as_deref() != Some(b) {
                return Err(lance::Error::internal(format!(
                    "{uri}/tree/{b} holds a manifest of branch {:?}",
                    ds.manifest().branch
                )));
            }
            ds
        }
        (Some(b), None) => sessions.builder(uri).with_branch(b, None).load().await?,
        (None, Some(v)) => sessions.builder(uri).with_version(v).load().await?,
        (None, None) => sessions.builder(uri).load().await?,
    };
    Ok(Arc::new(ds))
}

fn open_error(uri: &str, branch: Option<&str>, version: Option<u64>, e: lance::Error) -> OmniError {
    let what = format!(
        "{uri} (branch {}, version {})",
        branch.unwrap_or("main"),
        version.map_or("latest".to_string(), |v| v.to_string())
    );
    match e {
        lance::Error::DatasetNotFound { .. }
        | lance::Error::NotFound { .. }
        | lance::Error::RefNotFound { .. }
        | lance::Error::VersionNotFound { .. } => OmniError::NotFound(format!("table {what}")),
        other => OmniError::storage(format!("opening {what}"), other),
    }
}

/// The table's own URI, also for a handle checked out on a native branch
/// (whose Lance URI is the branch tree `<table>/tree/<branch>`).
pub fn table_uri(ds: &Dataset) -> String {
    let uri = ds.uri().trim_end_matches('/');
    match ds.manifest().branch.as_deref() {
        Some(b) => uri.strip_suffix(&format!("/tree/{b}")).unwrap_or(uri).to_string(),
        None => uri.to_string(),
    }
}

/// The live Lance HEAD version of a table on a native branch.
pub async fn head_version(uri: &str, branch: Option<&str>) -> Result<u64> {
    Ok(open_table(uri, branch, None).await?.version().version)
}

/// The latest version of the ref `ds` is open on (a version probe: the
/// handle stays at its checked-out version).
pub async fn latest_version(ds: &Dataset) -> Result<u64> {
    if still_latest(ds).await {
        return Ok(ds.version().version);
    }
    ds.latest_version_id().await.map_err(|e| OmniError::storage(format!("probing the head of {}", ds.uri()), e))
}

/// Whether `ds` is provably still the latest version of its ref, asked by
/// name instead of by listing the ref's versions: the next version's
/// manifest does not exist, and the handle's own is still the object it was
/// opened from (its e-tag and size, where the handle knows them). Two HEADs
/// in flight together. Lance's own answer lists `_versions/`, which costs
/// O(versions) on a local disk (a directory read, every write of a
/// long-running daemon) and on some S3-compatible servers, and is a list
/// request on S3 where the names are known. `false` when it cannot tell (a
/// V1-named manifest, a probe error): the caller asks Lance.
pub async fn still_latest(ds: &Dataset) -> bool {
    use lance_table::io::commit::ManifestNamingScheme;
    use object_store::ObjectStoreExt;
    use object_store::path::{Path, PathPart};
    let location = ds.manifest_location();
    if location.naming_scheme != ManifestNamingScheme::V2 {
        return false;
    }
    let Ok(store) = ds.object_store(None).await else { return false };
    let parts: Vec<PathPart<'_>> = location.path.parts().collect();
    let Some((_, dir)) = parts.split_last() else { return false };
    let name = format!("{:020}.manifest", u64::MAX - (location.version + 1));
    let next = Path::from_iter(dir.iter().cloned().chain([PathPart::from(name.as_str())]));
    let (own, next) = tokio::join!(store.inner.head(&location.path), store.inner.head(&next));
    let Ok(own) = own else { return false };
    let same = location.e_tag.as_ref().is_none_or(|tag| own.e_tag.as_ref() == Some(tag))
        && location.size.is_none_or(|size| size == own.size);
    same && matches!(next, Err(object_store::Error::NotFound { .. }))
}

/// Number of live rows at the dataset's checked-out version.
pub async fn row_count(ds: &Dataset) -> Result<u64> {
    let n = ds.count_rows(None).await.map_err(|e| OmniError::storage(format!("counting rows of {}", ds.uri()), e))?;
    Ok(n as u64)
}

/// Read every row (optionally filtered by a Lance SQL predicate) at the
/// dataset's checked-out version.
pub async fn scan(ds: &Dataset, filter: Option<&str>) -> Result<Vec<RecordBatch>> {
    let ctx = || format!("scanning {}", ds.uri());
    let mut scanner = ds.scan();
    if let Some(f) = filter {
        scanner.filter(f).map_err(|e| OmniError::storage(ctx(), e))?;
    }
    let stream = scanner.try_into_stream().await.map_err(|e| OmniError::storage(ctx(), e))?;
    stream.try_collect().await.map_err(|e| OmniError::storage(ctx(), e))
}

/// Every row at the dataset's checked-out version, as a stream of scan
/// batches (nothing is collected: memory stays at about one batch).
pub async fn scan_stream(ds: &Dataset) -> Result<futures::stream::BoxStream<'static, Result<RecordBatch>>> {
    stream_of(ds, ds.scan()).await
}

/// [`scan_stream`] of only `columns`.
pub async fn scan_columns_stream(
    ds: &Dataset,
    columns: &[&str],
) -> Result<futures::stream::BoxStream<'static, Result<RecordBatch>>> {
    let mut scanner = ds.scan();
    scanner.project(columns).map_err(|e| OmniError::storage(format!("scanning {}", ds.uri()), e))?;
    stream_of(ds, scanner).await
}

async fn stream_of(
    ds: &Dataset,
    scanner: lance::dataset::scanner::Scanner,
) -> Result<futures::stream::BoxStream<'static, Result<RecordBatch>>> {
    use futures::StreamExt;
    let uri = ds.uri().to_string();
    let stream = scanner.try_into_stream().await.map_err(|e| OmniError::storage(format!("scanning {uri}"), e))?;
    Ok(stream.map(move |b| b.map_err(|e| OmniError::storage(format!("scanning {uri}"), e))).boxed())
}

/// Read only `columns` of every row at the dataset's checked-out version.
pub async fn scan_columns(ds: &Dataset, columns: &[&str]) -> Result<Vec<RecordBatch>> {
    let ctx = || format!("scanning {}", ds.uri());
    let mut scanner = ds.scan();
    scanner.project(columns).map_err(|e| OmniError::storage(ctx(), e))?;
    let stream = scanner.try_into_stream().await.map_err(|e| OmniError::storage(ctx(), e))?;
    stream.try_collect().await.map_err(|e| OmniError::storage(ctx(), e))
}

/// Read every row matching a DataFusion expression at the dataset's
/// checked-out version (`None` = all rows).
pub async fn scan_expr(ds: &Arc<Dataset>, filter: Option<datafusion::prelude::Expr>) -> Result<Vec<RecordBatch>> {
    // A key lookup (`c = v`, `c IN (…)`) on an indexed column reads the
    // rows it finds, not the table.
    if let Some((column, values)) = filter.as_ref().and_then(row_locate::key_filter)
        && values.len() <= INDEX_PROBE_MAX_ROWS
        && let Some(found) = row_locate::locate(ds, &column, &values, &[]).await?
    {
        return Ok(found.rows);
    }
    let ctx = || format!("scanning {}", ds.uri());
    let mut scanner = ds.scan();
    if let Some(f) = filter {
        scanner.filter_expr(f);
    }
    let stream = scanner.try_into_stream().await.map_err(|e| OmniError::storage(ctx(), e))?;
    stream.try_collect().await.map_err(|e| OmniError::storage(ctx(), e))
}

/// The Arrow schema of a dataset.
pub fn arrow_schema(ds: &Dataset) -> SchemaRef {
    Arc::new(ArrowSchema::from(ds.schema()))
}

/// Stage `plan` against `ds` with a pre-minted transaction uuid; `None` when
/// it changes nothing (a delete that matches no row).
pub async fn stage(ds: Arc<Dataset>, plan: StagePlan, uuid: &str) -> Result<Option<StagedTxn>> {
    match plan {
        StagePlan::Merge { batches, mode } => stage_keyed(ds, batches, mode, uuid).await.map(Some),
        StagePlan::Append { batches } => stage_write(ds, batches, WriteMode::Append, uuid).await.map(Some),
        StagePlan::Delete { ids } => stage_delete(ds, &ids, uuid).await,
        StagePlan::Rewrite { addresses, batches } => stage_located(ds, &addresses, batches, uuid).await.map(Some),
        StagePlan::Overwrite { batches } => stage_overwrite(ds, batches, uuid).await.map(Some),
        StagePlan::Indices { specs, depth } => stage_indices(ds, &specs, depth, uuid).await,
        StagePlan::Configure => Ok(Some(stage_configure(ds, uuid))),
        StagePlan::EditColumns(edit) => stage_column_edit(ds, &edit, uuid).map(Some),
        StagePlan::Reshape { schema, reshape } => stage_reshape(ds, schema, reshape, uuid).await.map(Some),
        StagePlan::Compact(scope) => {
            // Boxed: Lance's planner future is `Send` only for one lifetime,
            // which the callers' higher-ranked `Send` bounds (axum) cannot see.
            let staged: futures::future::BoxFuture<'_, _> = Box::pin(stage_compaction(ds.clone(), uuid, scope));
            let staged = staged.await?;
            Ok(Some(match staged {
                Some((txn, _)) => txn,
                None => empty_rewrite(ds, uuid),
            }))
        }
    }
}

/// At most this many source rows find the rows they replace through the
/// table's `id` index ([`row_locate::locate`]) and stage exactly those
/// changes (a merge of 10,000 updated and 10,000 new rows among them); a
/// larger write (a bulk load) joins with Lance's merge-insert, whose scan of
/// the key column is small beside the rows it writes.
const INDEX_PROBE_MAX_ROWS: usize = 65_536;

/// Stage a keyed write of `batches`. A few rows with distinct ids find the
/// live rows holding their ids through the `id` index and a scan of only
/// the fragments it does not cover, and stage exactly the change: an
/// append when none exists, else one `Update` that deletes the rows they
/// replace (deletion vectors) and appends the new images. The exact commit
/// holds the pin, so what was found stays true at commit. Otherwise (no
/// index, many rows, a repeated id, a strict insert that meets an id)
/// Lance's merge-insert joins them, and reports what it refuses.
async fn stage_keyed(ds: Arc<Dataset>, batches: Vec<RecordBatch>, mode: MergeMode, uuid: &str) -> Result<StagedTxn> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    // An update-only merge (no writer stages one today) keeps Lance's join.
    let located = (1..=INDEX_PROBE_MAX_ROWS).contains(&rows) && mode != MergeMode::UpdateOnly;
    let ids = if located { key_probe::distinct_ids(&batches) } else { None };
    let Some(ids) = ids else { return stage_merge_insert(ds, batches, mode, uuid).await };
    let keys: Vec<ScalarValue> = ids.iter().map(|id| ScalarValue::Utf8(Some(id.to_string()))).collect();
    let Some(addresses) = row_locate::locate_addresses(&ds, "id", &keys).await? else {
        return stage_merge_insert(ds, batches, mode, uuid).await;
    };
    match (addresses.is_empty(), mode) {
        (false, MergeMode::StrictInsert) => stage_merge_insert(ds, batches, mode, uuid).await,
        (true, _) => stage_write(ds, batches, WriteMode::Append, uuid).await,
        (false, _) => stage_rewrite(ds, &addresses, batches, uuid).await,
    }
}

/// Stage [`StagePlan::Rewrite`]: a `Delete` when there are no new rows,
/// else [`stage_rewrite`]. Every address must be a live row of `ds`: the
/// plan's author located them, and a wrong one is refused here, before
/// anything is written, rather than deleting another row.
async fn stage_located(
    ds: Arc<Dataset>,
    addresses: &[u64],
    batches: Vec<RecordBatch>,
    uuid: &str,
) -> Result<StagedTxn> {
    row_locate::assert_live(&ds, addresses).await?;
    if batches.iter().any(|b| b.num_rows() > 0) {
        return stage_rewrite(ds, addresses, batches, uuid).await;
    }
    let (mut txn, affected) = delete_txn(&ds, addresses, format!("{} located rows", addresses.len())).await?;
    txn.uuid = uuid.to_string();
    Ok(StagedTxn { uri: table_uri(&ds), dataset: Some(ds), txn, affected_rows: Some(affected), rows_written: 0 })
}

/// A `Delete` of the live rows at `addresses` (new deletion vectors), and
/// the rows it affects, for the commit's conflict check.
async fn delete_txn(ds: &Arc<Dataset>, addresses: &[u64], predicate: String) -> Result<(Transaction, RowAddrTreeMap)> {
    let (updated_fragments, deleted_fragment_ids) = delete_addresses(ds, addresses).await?;
    let op = Operation::Delete { updated_fragments, deleted_fragment_ids, predicate };
    let affected = RowAddrTreeMap::from_iter(addresses.iter().copied());
    Ok((Transaction::new(ds.version().version, op, None), affected))
}

/// Stage, as one `Update`, the deletion of the live rows at `addresses`
/// and the append of `batches`: the change a keyed write makes, without
/// Lance's join. The new rows get new stable row ids (a diff pairs the two
/// images by key), and no existing fragment's row lineage is resolved.
async fn stage_rewrite(
    ds: Arc<Dataset>,
    addresses: &[u64],
    batches: Vec<RecordBatch>,
    uuid: &str,
) -> Result<StagedTxn> {
    let uri = table_uri(&ds);
    let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    let (updated_fragments, removed_fragment_ids) = delete_addresses(&ds, addresses).await?;
    let new_fragments = if rows == 0 { vec![] } else { write_fragments(&ds, batches).await? };
    let op = Operation::Update {
        removed_fragment_ids,
        updated_fragments,
        new_fragments,
        fields_modified: vec![],
        compacted_sstables: vec![],
        fields_for_preserving_frag_bitmap: vec![],
        update_mode: Some(UpdateMode::RewriteRows),
        inserted_rows_filter: None,
        updated_fragment_offsets: None,
    };
    let mut txn = Transaction::new(ds.version().version, op, None);
    txn.uuid = uuid.to_string();
    let affected = RowAddrTreeMap::from_iter(addresses.iter().copied());
    Ok(StagedTxn { dataset: Some(ds), uri, txn, affected_rows: Some(affected), rows_written: rows })
}

/// The fragments `batches` become, written as an append would write them
/// and not yet part of any version.
async fn write_fragments(ds: &Arc<Dataset>, batches: Vec<RecordBatch>) -> Result<Vec<lance_table::format::Fragment>> {
    let uri = table_uri(ds);
    let params = write_params(&uri, WriteMode::Append);
    let txn = InsertBuilder::new(ds.clone())
        .with_params(&params)
        .execute_uncommitted(batches)
        .await
        .map_err(|e| OmniError::storage(format!("writing new rows of {uri}"), e))?;
    match txn.operation {
        Operation::Append { fragments } => Ok(fragments),
        other => Err(OmniError::Internal(format!("an append to {uri} staged a {other} operation"))),
    }
}

/// New deletion vectors for the fragments holding `addresses`: the
/// fragments that keep live rows, and the ids of those left empty.
async fn delete_addresses(
    ds: &Arc<Dataset>,
    addresses: &[u64],
) -> Result<(Vec<lance_table::format::Fragment>, Vec<u64>)> {
    let mut by_fragment: std::collections::BTreeMap<u64, Vec<u32>> = std::collections::BTreeMap::new();
    for a in addresses {
        by_fragment.entry(a >> 32).or_default().push(*a as u32);
    }
    let (mut updated, mut removed) = (Vec::new(), Vec::new());
    for (id, offsets) in by_fragment {
        let fragment = usize::try_from(id).ok().and_then(|id| ds.get_fragment(id)).ok_or_else(|| {
            OmniError::Internal(format!("fragment {id} of {} vanished while staging a delete", ds.uri()))
        })?;
        let written = fragment
            .extend_deletions(offsets)
            .await
            .map_err(|e| OmniError::storage(format!("writing deletions of {}", ds.uri()), e))?;
        match written {
            Some(f) => updated.push(f.metadata().clone()),
            None => removed.push(id),
        }
    }
    Ok((updated, removed))
}

/// Stage a merge-insert keyed on `id` with a pre-minted transaction uuid.
/// A strict insert that meets an existing id fails here, before any effect.
pub async fn stage_merge_insert(
    ds: Arc<Dataset>,
    batches: Vec<RecordBatch>,
    mode: MergeMode,
    uuid: &str,
) -> Result<StagedTxn> {
    let uri = table_uri(&ds);
    let ctx = || format!("staging merge-insert into {uri}");
    let mut builder =
        MergeInsertBuilder::try_new(ds.clone(), vec!["id".to_string()]).map_err(|e| OmniError::storage(ctx(), e))?;
    let (matched, not_matched) = match mode {
        MergeMode::StrictInsert => (WhenMatched::Fail, WhenNotMatched::InsertAll),
        MergeMode::Upsert => (WhenMatched::UpdateAll, WhenNotMatched::InsertAll),
        MergeMode::UpdateOnly => (WhenMatched::UpdateAll, WhenNotMatched::DoNothing),
    };
    builder
        .when_matched(matched)
        .when_not_matched(not_matched)
        .conflict_retries(0)
        .commit_retries(0)
        .use_index(false)
        .skip_auto_cleanup(true);
    let job = builder.try_build().map_err(|e| OmniError::storage(ctx(), e))?;
    let staged = job.execute_uncommitted_batches(batches).await.map_err(|e| OmniError::storage(ctx(), e))?;
    let rows = staged.stats.num_inserted_rows + staged.stats.num_updated_rows;
    let mut txn = staged.transaction;
    txn.uuid = uuid.to_string();
    // Lance records a bloom filter of the inserted keys (32 KiB) so that a
    // retry can tell whether a concurrent commit inserted the same keys. An
    // exact commit never retries and admits no commit in between, and the
    // filter would ride in this version's manifest, which every open of the
    // table reads.
    if let Operation::Update { inserted_rows_filter, .. } = &mut txn.operation {
        *inserted_rows_filter = None;
    }
    Ok(StagedTxn { dataset: Some(ds), uri, txn, affected_rows: staged.affected_rows, rows_written: rows })
}

/// The filter selecting the rows with `ids`.
fn ids_filter(ids: &[String]) -> datafusion::prelude::Expr {
    use datafusion::prelude::{col, lit};
    col("id").in_list(ids.iter().map(|id| lit(id.clone())).collect(), false)
}

/// Stage a delete of the rows with `ids`: their live rows found through the
/// `id` index ([`row_locate::locate`]) get new deletion vectors, so the cost
/// follows the ids, not the table; without an index Lance's delete scans.
/// A delete that matches nothing stages nothing (committing it would still
/// bump the version).
pub async fn stage_delete(ds: Arc<Dataset>, ids: &[String], uuid: &str) -> Result<Option<StagedTxn>> {
    let uri = table_uri(&ds);
    let keys: Vec<ScalarValue> = ids.iter().map(|id| ScalarValue::Utf8(Some(id.clone()))).collect();
    let found =
        if ids.len() <= INDEX_PROBE_MAX_ROWS { row_locate::locate_addresses(&ds, "id", &keys).await? } else { None };
    let (txn, affected_rows) = match found {
        Some(addresses) if addresses.is_empty() => return Ok(None),
        Some(addresses) => {
            let (txn, affected) = delete_txn(&ds, &addresses, ids_filter(ids).to_string()).await?;
            (txn, Some(affected))
        }
        None => {
            let staged = DeleteBuilder::from_expr(ds.clone(), ids_filter(ids))
                .conflict_retries(0)
                .execute_uncommitted()
                .await
                .map_err(|e| OmniError::storage(format!("staging delete on {uri}"), e))?;
            if staged.num_deleted_rows == 0 {
                return Ok(None);
            }
            (staged.transaction, staged.affected_rows)
        }
    };
    let mut txn = txn;
    txn.uuid = uuid.to_string();
    Ok(Some(StagedTxn { dataset: Some(ds), uri, txn, affected_rows, rows_written: 0 }))
}

/// How many live rows of `ds` hold one of `ids`.
pub async fn count_ids(ds: &Arc<Dataset>, ids: &[String]) -> Result<u64> {
    let keys: Vec<ScalarValue> = ids.iter().map(|id| ScalarValue::Utf8(Some(id.clone()))).collect();
    if let Some(addresses) = row_locate::locate_addresses(ds, "id", &keys).await? {
        return Ok(addresses.len() as u64);
    }
    let rows = scan_expr(ds, Some(ids_filter(ids))).await?;
    Ok(rows.iter().map(|b| b.num_rows() as u64).sum())
}

/// Stage an overwrite of the whole table. No batches = a zero-fragment overwrite.
pub async fn stage_overwrite(ds: Arc<Dataset>, batches: Vec<RecordBatch>, uuid: &str) -> Result<StagedTxn> {
    if batches.iter().all(|b| b.num_rows() == 0) {
        let op = Operation::Overwrite {
            fragments: vec![],
            schema: ds.schema().clone(),
            config_upsert_values: None,
            initial_bases: None,
        };
        let mut txn = Transaction::new(ds.version().version, op, None);
        txn.uuid = uuid.to_string();
        return Ok(StagedTxn { uri: table_uri(&ds), dataset: Some(ds), txn, affected_rows: None, rows_written: 0 });
    }
    stage_write(ds, batches, WriteMode::Overwrite, uuid).await
}

/// Stage an overwrite of the whole table with the batches of `stream` (all
/// of `schema`), writing data files as they come: memory stays at about
/// one batch whatever the table holds. `rows` is how many it yields.
pub async fn stage_overwrite_stream(
    ds: Arc<Dataset>,
    schema: SchemaRef,
    stream: futures::stream::BoxStream<'static, Result<RecordBatch>>,
    rows: u64,
    uuid: &str,
) -> Result<StagedTxn> {
    use datafusion::physical_plan::SendableRecordBatchStream;
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
    if rows == 0 {
        return stage_overwrite(ds, vec![], uuid).await;
    }
    let params = write_params(&table_uri(&ds), WriteMode::Overwrite);
    let batches = stream.map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)));
    let source: SendableRecordBatchStream = Box::pin(RecordBatchStreamAdapter::new(schema, batches));
    let txn = InsertBuilder::new(ds.clone()).with_params(&params).execute_uncommitted_stream(source).await;
    staged_insert(ds, txn, "a streamed overwrite", rows, uuid)
}

/// Stage an overwrite of every row of `ds` passed through `reshape`, in
/// scan order (see [`StagePlan::Reshape`]).
async fn stage_reshape(ds: Arc<Dataset>, schema: SchemaRef, reshape: super::Reshaper, uuid: &str) -> Result<StagedTxn> {
    let rows = row_count(&ds).await?;
    let f = reshape.0;
    let reshaped = futures::StreamExt::map(scan_stream(&ds).await?, move |batch| f(batch?));
    stage_overwrite_stream(ds, schema, futures::StreamExt::boxed(reshaped), rows, uuid).await
}

/// Stage new data files as an append or an overwrite of the whole table.
async fn stage_write(ds: Arc<Dataset>, batches: Vec<RecordBatch>, mode: WriteMode, uuid: &str) -> Result<StagedTxn> {
    let rows: u64 = batches.iter().map(|b| b.num_rows() as u64).sum();
    let params = write_params(&table_uri(&ds), mode);
    let txn = InsertBuilder::new(ds.clone()).with_params(&params).execute_uncommitted(batches).await;
    staged_insert(ds, txn, &format!("{mode:?}"), rows, uuid)
}

/// An insert builder's uncommitted transaction (`what` of `rows` rows) as
/// a [`StagedTxn`] carrying `uuid`.
fn staged_insert(
    ds: Arc<Dataset>,
    txn: lance::Result<Transaction>,
    what: &str,
    rows: u64,
    uuid: &str,
) -> Result<StagedTxn> {
    let uri = table_uri(&ds);
    let mut txn = txn.map_err(|e| OmniError::storage(format!("staging {what} of {uri}"), e))?;
    txn.uuid = uuid.to_string();
    Ok(StagedTxn { dataset: Some(ds), uri, txn, affected_rows: None, rows_written: rows })
}

/// Stage the creation of an empty dataset at `uri` (version 1, zero
/// fragments, stable row ids, the given schema, the [`lineage`] config). Committing it fails if a
/// dataset already exists there.
pub fn stage_create(uri: &str, schema: &ArrowSchema, uuid: &str) -> Result<StagedTxn> {
    let schema = lance_core::datatypes::Schema::try_from(schema)
        .map_err(|e| OmniError::storage(format!("staging creation of {uri}"), e))?;
    let op = Operation::Overwrite {
        fragments: vec![],
        schema,
        config_upsert_values: Some(lineage::config()),
        initial_bases: None,
    };
    let mut txn = Transaction::new(0, op, None);
    txn.uuid = uuid.to_string();
    Ok(StagedTxn { dataset: None, uri: uri.to_string(), txn, affected_rows: None, rows_written: 0 })
}

/// Stage an `UpdateConfig` setting the [`lineage`] config on a table an
/// older binary created.
pub fn stage_configure(ds: Arc<Dataset>, uuid: &str) -> StagedTxn {
    let entries = lineage::ENTRIES.into_iter().map(UpdateMapEntry::from).collect();
    let op = Operation::UpdateConfig {
        config_updates: Some(UpdateMap { update_entries: entries, replace: false }),
        table_metadata_updates: None,
        schema_metadata_updates: None,
        field_metadata_updates: Default::default(),
    };
    let mut txn = Transaction::new(ds.version().version, op, None);
    txn.uuid = uuid.to_string();
    StagedTxn { uri: table_uri(&ds), dataset: Some(ds), txn, affected_rows: None, rows_written: 0 }
}

/// Whether the table at the handle's version carries the [`lineage`] config.
pub fn has_lineage_config(ds: &Dataset) -> bool {
    lineage::is_set(ds.config())
}

/// Stage a restore of the table's content at `to_version`, as a new version.
pub fn stage_restore(ds: Arc<Dataset>, to_version: u64, uuid: &str) -> StagedTxn {
    let uri = table_uri(&ds);
    let mut txn = Transaction::new(ds.version().version, Operation::Restore { version: to_version }, None);
    txn.uuid = uuid.to_string();
    StagedTxn { dataset: Some(ds), uri, txn, affected_rows: None, rows_written: 0 }
}

/// Commit a staged transaction with zero transparent retries, admitting only
/// `read_version + 1`, and verify the landed version carries the staged identity.
///
/// An ambiguous failure is resolved by looking the identity up at the target
/// version, never by committing again (Lance does not dedupe by uuid).
pub async fn commit_exact(staged: StagedTxn) -> Result<CommittedTxn> {
    let identity = staged.identity();
    let target = identity.target_version();
    let uri = staged.uri.clone();
    let Some(ds) = staged.dataset else {
        return commit_create(&uri, &identity, staged.txn).await;
    };
    let base = ds.clone();
    let mut builder = CommitBuilder::new(ds)
        .with_max_retries(0)
        .with_skip_auto_cleanup(true)
        .with_commit_handler(ExpectVersion::new(target));
    if let Some(rows) = staged.affected_rows {
        builder = builder.with_affected_rows(rows);
    }
    let committed = match builder.execute(staged.txn).await {
        Ok(ds) => Arc::new(ds),
        Err(e) if is_conflict(&e) => {
            return Err(OmniError::ReadSetChanged {
                member: format!("table {uri}"),
                expected: format!("v{}", identity.read_version),
                actual: "a newer version".to_string(),
            });
        }
        Err(e) => resolve_ambiguous(&base, &identity, e).await?,
    };
    verify_landed(&uri, &identity, committed).await
}

/// Commit a staged creation exactly as version 1.
async fn commit_create(uri: &str, identity: &TxnIdentity, txn: Transaction) -> Result<CommittedTxn> {
    let created = create_builder(uri).execute(txn).await;
    match created {
        Ok(ds) => verify_landed(uri, identity, Arc::new(ds)).await,
        Err(e) => match open_table(uri, None, Some(1)).await {
            // An ambiguous error after our create landed: it is ours.
            Ok(ds) if transaction_at(&ds, 1).await.ok().flatten().as_ref() == Some(identity) => {
                verify_landed(uri, identity, ds).await
            }
            // Whatever Lance reported, an existing dataset means the create lost.
            Ok(_) => Err(OmniError::AlreadyExists(format!("a dataset already exists at {uri}"))),
            Err(_) => Err(OmniError::storage(format!("creating {uri}"), e)),
        },
    }
}

fn is_conflict(e: &lance::Error) -> bool {
    matches!(
        e,
        lance::Error::CommitConflict { .. }
            | lance::Error::RetryableCommitConflict { .. }
            | lance::Error::IncompatibleTransaction { .. }
            | lance::Error::TooMuchWriteContention { .. }
    )
}

/// After an error that does not prove the commit failed, look for our identity
/// at the target version on the same native branch.
async fn resolve_ambiguous(base: &Dataset, identity: &TxnIdentity, e: lance::Error) -> Result<Arc<Dataset>> {
    let target = identity.target_version();
    if let Ok(Some(found)) = transaction_at(base, target).await
        && found == *identity
    {
        let landed = base
            .checkout_version(target)
            .await
            .map_err(|e| OmniError::storage(format!("opening {} v{target}", base.uri()), e))?;
        return Ok(Arc::new(landed));
    }
    Err(OmniError::storage(format!("committing {} to {}", identity.uuid, base.uri()), e))
}

async fn verify_landed(uri: &str, identity: &TxnIdentity, ds: Arc<Dataset>) -> Result<CommittedTxn> {
    let version = ds.version().version;
    if version != identity.target_version() {
        return Err(OmniError::Internal(format!(
            "{uri}: commit landed at v{version}, expected v{}",
            identity.target_version()
        )));
    }
    // The handle's own transaction: the one Lance's conditional commit of
    // this version wrote (kept in the session's cache by the commit), or,
    // after an ambiguous error, the one the version re-read from storage
    // carries. Reading it back from storage again cost a round trip per
    // commit and could not disagree with a commit that returned success.
    let found =
        read_transaction(&ds, version, true).await?.map(|t| TxnIdentity { read_version: t.read_version, uuid: t.uuid });
    if found.as_ref() != Some(identity) {
        return Err(OmniError::Internal(format!(
            "{uri}: v{version} carries transaction {found:?}, expected {identity:?}"
        )));
    }
    let row_count = row_count(&ds).await?;
    Ok(CommittedTxn { identity: identity.clone(), version, row_count, dataset: ds })
}

/// Rewrite the dataset's small fragments into few (a physical-only change:
/// same rows, new version), materialising deletions; `None` when there was
/// nothing to do. A table an older binary created gets the [`lineage`]
/// config first, so this compaction already spills. Commits inline (Lance's
/// own UpdateConfig, ReserveFragments and Rewrite versions), so callers use
/// it only where a concurrent commit to the same ref is excluded and no
/// manifest pins the versions it adds.
pub async fn compact(ds: Arc<Dataset>, scope: Compaction) -> Result<Option<Arc<Dataset>>> {
    let mut ds = Arc::unwrap_or_clone(ds);
    let configured = !has_lineage_config(&ds);
    if configured {
        ds.update_config(lineage::ENTRIES)
            .await
            .map_err(|e| OmniError::storage(format!("setting the config of {}", ds.uri()), e))?;
    }
    let options = lance::dataset::optimize::CompactionOptions {
        materialize_deletions: true,
        materialize_deletions_threshold: 0.0,
        ..compaction_options(scope)
    };
    let metrics = lance::dataset::optimize::compact_files(&mut ds, options, None)
        .await
        .map_err(|e| OmniError::storage(format!("compacting {}", ds.uri()), e))?;
    Ok((configured || metrics.fragments_removed > 0).then(|| Arc::new(ds)))
}

/// What a staged compaction rewrites.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionStats {
    /// Fragments the rewrite replaces.
    pub fragments_removed: u64,
    /// Fragments it writes in their place.
    pub fragments_added: u64,
}

/// How much a compaction rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compaction {
    /// Lance's defaults: every fragment under a million rows is a candidate
    /// (`optimize`).
    Full,
    /// Only fragments under [`SMALL_FRAGMENT_ROWS`] rows, rewritten into
    /// fragments of about that size: cheap enough to ride along with a write.
    SmallFragments,
    /// Only fragments under this many rows, merged into fragments of about
    /// that size: one tier of a tiered compaction
    /// ([`crate::engine::compaction_tiers`]). `Below(TAIL_FRAGMENT_ROWS)` is
    /// an append-only log's recent tail (`__manifest`): each compaction
    /// rewrites about that many rows however long the history, where Lance's
    /// defaults would rewrite the whole history every few commits.
    Below(usize),
}

/// A fragment under this many rows is part of an append-only log's tail
/// (`Compaction::Below(TAIL_FRAGMENT_ROWS)`); larger ones are left as they are. At four or five
/// `__manifest` rows a commit, one fragment settles every ~200 commits.
pub const TAIL_FRAGMENT_ROWS: usize = 1024;

/// A fragment under this many rows counts as small for [`Compaction::SmallFragments`].
pub const SMALL_FRAGMENT_ROWS: usize = 8192;

/// Small fragments a table may hold before a write to it also compacts them.
/// Every unindexed read of a table opens every fragment, so without a bound
/// each one-row commit would make the next write and query slower (a write
/// validating keys reads them all). Kept as low as `__manifest`'s bound
/// (`actors::branch::MANIFEST_COMPACT_ABOVE`): rewriting eight small
/// fragments rides along with a write for less than the reads it saves.
pub const COMPACT_ABOVE_SMALL_FRAGMENTS: usize = 8;

/// Whether a write to `ds` should end its chain with a [`StagePlan::Compact`]:
/// a run of more than [`COMPACT_ABOVE_SMALL_FRAGMENTS`] small neighbours that
/// one compaction can merge, and Lance's planner finds some to merge. Lance
/// merges only neighbours covered by the same indexes, so the small
/// fragment each index fold covers and leaves behind can never merge with
/// later ones: counted, such fragments made every write plan (and often
/// run) a compaction once a few folds had passed, so a long-running
/// daemon's writes grew slower with each fold.
pub async fn needs_compaction(ds: &Dataset) -> Result<bool> {
    use lance::index::DatasetIndexExt;
    let fragments = &ds.manifest().fragments;
    let is_small = |f: &lance_table::format::Fragment| f.physical_rows.is_none_or(|n| n < SMALL_FRAGMENT_ROWS);
    if fragments.iter().filter(|f| is_small(f)).count() <= COMPACT_ABOVE_SMALL_FRAGMENTS {
        return Ok(false);
    }
    let ctx = || format!("listing the indexes of {}", ds.uri());
    let segments = ds.load_indices().await.map_err(|e| OmniError::storage(ctx(), e))?;
    let groups: Vec<Option<Vec<usize>>> = fragments
        .iter()
        .map(|f| {
            is_small(f).then(|| {
                let covers = |s: &&lance_table::format::IndexMetadata| {
                    s.fragment_bitmap.as_ref().is_some_and(|b| u32::try_from(f.id).is_ok_and(|id| b.contains(id)))
                };
                segments.iter().enumerate().filter(|(_, s)| covers(s)).map(|(i, _)| i).collect()
            })
        })
        .collect();
    if crate::engine::compaction_tiers::longest_mergeable_run(&groups) <= COMPACT_ABOVE_SMALL_FRAGMENTS {
        return Ok(false);
    }
    let options = compaction_options(Compaction::SmallFragments);
    // Boxed for the same reason as in [`stage`].
    let plan: futures::future::BoxFuture<'_, _> = Box::pin(lance::dataset::optimize::plan_compaction(ds, &options));
    let plan = plan.await.map_err(|e| OmniError::storage(format!("planning a compaction of {}", ds.uri()), e))?;
    Ok(plan.num_tasks() > 0)
}

fn compaction_options(scope: Compaction) -> lance::dataset::optimize::CompactionOptions {
    let mut options = lance::dataset::optimize::CompactionOptions::default();
    match scope {
        Compaction::Full => {}
        Compaction::SmallFragments => options.target_rows_per_fragment = SMALL_FRAGMENT_ROWS,
        Compaction::Below(rows) => options.target_rows_per_fragment = rows,
    }
    options
}

/// Stage a compaction of `ds` (adjacent candidate fragments rewritten into
/// few, deletions materialised past Lance's default threshold) as one
/// uncommitted `Rewrite` transaction under the pre-minted `uuid`: the new
/// data files are written now, nothing is committed. `None` when there is
/// nothing to compact.
///
/// Lance's own `commit_compaction` commits inline (and first reserves fragment
/// ids as a version of its own), so the exact adapter commits the `Rewrite`
/// itself, its new fragments numbered from the staged version's high-water
/// mark (the exact commit lands on that version), and with stable row ids
/// the rows keep their ids (notes/lance14.md §9). An index of row ids
/// (BTree, full text) follows its rows to the new fragments; one of row
/// addresses (vector) loses coverage of them (Lance drops them from its
/// bitmap, so those rows are scanned): results never change, and the next
/// index fold ([`stage_indices`]) covers them again.
pub async fn stage_compaction(
    ds: Arc<Dataset>,
    uuid: &str,
    scope: Compaction,
) -> Result<Option<(StagedTxn, CompactionStats)>> {
    use futures::StreamExt;
    use lance::dataset::optimize::plan_compaction;
    use lance::dataset::transaction::RewriteGroup;
    let options = compaction_options(scope);
    let uri = table_uri(&ds);
    let ctx = || format!("compacting {uri}");
    let plan = plan_compaction(&ds, &options).await.map_err(|e| OmniError::storage(ctx(), e))?;
    if plan.num_tasks() == 0 {
        return Ok(None);
    }
    let tasks: Vec<_> = plan.compaction_tasks().collect();
    // A loop, not a closure: the closure's future is not `Send` for every lifetime.
    let mut runs: Vec<futures::future::BoxFuture<'_, _>> = Vec::with_capacity(tasks.len());
    for task in &tasks {
        runs.push(Box::pin(task.execute(&ds)));
    }
    let results: Vec<_> = futures::stream::iter(runs)
        .buffer_unordered(2)
        .try_collect()
        .await
        .map_err(|e| OmniError::storage(ctx(), e))?;
    let mut stats = CompactionStats::default();
    // The ids the manifest build would give the new fragments (the next
    // after the dataset's high-water mark, in order), given here: the build
    // moves an index's coverage of a group to the ids the group carries, and
    // unassigned ones (0) would make every rewritten index claim fragment 0.
    let mut next_id = ds.manifest().max_fragment_id().map_or(0, |id| id + 1);
    let groups = results
        .into_iter()
        .map(|r| {
            stats.fragments_removed += r.original_fragments.len() as u64;
            stats.fragments_added += r.new_fragments.len() as u64;
            let mut new_fragments = r.new_fragments;
            for fragment in &mut new_fragments {
                fragment.id = next_id;
                next_id += 1;
            }
            RewriteGroup { old_fragments: r.original_fragments, new_fragments }
        })
        .collect();
    let op = Operation::Rewrite { groups, rewritten_indices: vec![], frag_reuse_index: None };
    let mut txn = Transaction::new(plan.read_version(), op, None);
    txn.uuid = uuid.to_string();
    let staged = StagedTxn { dataset: Some(ds), uri, txn, affected_rows: None, rows_written: 0 };
    Ok(Some((staged, stats)))
}

/// A `Rewrite` that rewrites nothing: the compaction step of a chain whose
/// earlier steps left nothing to merge (a delete that removed the small
/// fragments) still lands its armed version, changing nothing.
fn empty_rewrite(ds: Arc<Dataset>, uuid: &str) -> StagedTxn {
    let op = Operation::Rewrite { groups: vec![], rewritten_indices: vec![], frag_reuse_index: None };
    let mut txn = Transaction::new(ds.version().version, op, None);
    txn.uuid = uuid.to_string();
    StagedTxn { uri: table_uri(&ds), dataset: Some(ds), txn, affected_rows: None, rows_written: 0 }
}

/// What the `Rewrite` that produced `version` of the table at `uri` (on a
/// native branch) rewrote; zero when that version is no rewrite.
pub async fn rewrite_stats_at(uri: &str, branch: Option<&str>, version: u64) -> Result<CompactionStats> {
    let ds = open_table(uri, branch, Some(version)).await?;
    let mut stats = CompactionStats::default();
    if let Some(Transaction { operation: Operation::Rewrite { groups, .. }, .. }) =
        read_transaction(&ds, version, true).await?
    {
        for group in groups {
            stats.fragments_removed += group.old_fragments.len() as u64;
            stats.fragments_added += group.new_fragments.len() as u64;
        }
    }
    Ok(stats)
}

/// Bytes of the Lance manifest file of the handle's version: what every
/// open of that version reads and the next commit rewrites.
pub async fn manifest_bytes(ds: &Dataset) -> Result<u64> {
    let location = ds.manifest_location();
    if let Some(size) = location.size {
        return Ok(size);
    }
    let ctx = || format!("reading the manifest size of {}", ds.uri());
    let store = ds.object_store(None).await.map_err(|e| OmniError::storage(ctx(), e))?;
    store.size(&location.path).await.map_err(|e| OmniError::storage(ctx(), e))
}

/// Bytes of row lineage (row ids, created-at and last-updated-at versions)
/// the handle's manifest holds inline, over all fragments; spilled sequences
/// ([`lineage`]) count nothing.
pub fn inline_lineage_bytes(ds: &Dataset) -> u64 {
    use lance_table::format::{RowDatasetVersionMeta, RowIdMeta};
    let versions = |meta: &Option<RowDatasetVersionMeta>| match meta {
        Some(RowDatasetVersionMeta::Inline(bytes)) => bytes.len() as u64,
        _ => 0,
    };
    let fragment = |f: &lance_table::format::Fragment| {
        let row_ids = match &f.row_id_meta {
            Some(RowIdMeta::Inline(bytes)) => bytes.len() as u64,
            _ => 0,
        };
        row_ids + versions(&f.created_at_version_meta) + versions(&f.last_updated_at_version_meta)
    };
    ds.manifest().fragments.iter().map(fragment).sum()
}

/// Fragments of the dataset at its checked-out version.
pub fn fragment_count(ds: &Dataset) -> u64 {
    ds.get_fragments().len() as u64
}

/// Fragments of `ds` in an append-only log's tail (under [`TAIL_FRAGMENT_ROWS`] rows).
pub fn tail_fragment_count(ds: &Dataset) -> usize {
    ds.manifest().fragments.iter().filter(|f| f.physical_rows.is_none_or(|n| n < TAIL_FRAGMENT_ROWS)).count()
}

/// The compaction of `ds` that `tiers` call for, if any
/// ([`crate::engine::compaction_tiers::due`] over its fragments' row counts).
pub fn tier_due(ds: &Dataset, tiers: &[crate::engine::compaction_tiers::Tier]) -> Option<Compaction> {
    let rows: Vec<Option<usize>> = ds.manifest().fragments.iter().map(|f| f.physical_rows).collect();
    crate::engine::compaction_tiers::due(&rows, tiers).map(Compaction::Below)
}

/// The identity of the transaction that produced `version`, if Lance kept one.
pub async fn transaction_at(ds: &Dataset, version: u64) -> Result<Option<TxnIdentity>> {
    Ok(read_transaction(ds, version, false).await?.map(|t| TxnIdentity { read_version: t.read_version, uuid: t.uuid }))
}

/// The operation name (`Append`, `Update`, `Rewrite`, `Restore`, …) of the
/// transaction that produced `version`, if Lance kept it.
pub async fn operation_at(ds: &Dataset, version: u64) -> Result<Option<String>> {
    Ok(read_transaction(ds, version, false).await?.map(|t| t.operation.name().to_string()))
}

/// The operation name and recorded properties of the transaction that
/// produced `version` (on the handle's branch), if Lance kept it.
pub async fn transaction_properties_at(
    ds: &Dataset,
    version: u64,
) -> Result<Option<(String, HashMap<String, String>)>> {
    Ok(read_transaction(ds, version, true).await?.map(|t| {
        let props = t.transaction_properties.map(|p| (*p).clone()).unwrap_or_default();
        (t.operation.name().to_string(), props)
    }))
}

/// The transaction that produced `version` on the handle's branch. With
/// `from_handle`, the handle's own version costs no read (its manifest
/// carried it inline); without it, it is read from storage (what a check
/// that a commit landed must look at).
async fn read_transaction(ds: &Dataset, version: u64, from_handle: bool) -> Result<Option<Transaction>> {
    let txn = if from_handle && version == ds.version().version {
        ds.read_transaction().await
    } else {
        ds.read_transaction_by_version(version).await
    };
    txn.map_err(|e| OmniError::storage(format!("reading transaction v{version} of {}", ds.uri()), e))
}

/// Why an exact append of manifest rows did not land.
#[derive(Debug)]
pub enum RowAppendError {
    /// Another writer committed to the same ref first; nothing of ours
    /// landed. Re-read and retry.
    Contention(String),
    /// Anything else.
    Failed(OmniError),
}

/// Append `batch` to the table as exactly one commit at the version after
/// the handle's, with zero transparent retries: the manifest publisher's
/// compare-and-swap (a concurrent commit on the same ref is contention, so
/// no row-level merge, and no read of the existing rows, is needed).
///
/// `properties` are recorded in the transaction (the manifest's head
/// checkpoint), where an open of that version reads them for free: Lance
/// keeps the transaction inline in the version's manifest file.
pub async fn append_rows(
    ds: Arc<Dataset>,
    batch: RecordBatch,
    properties: HashMap<String, String>,
) -> Result<CommittedTxn, RowAppendError> {
    let uuid = format!("omni-{}", ulid::Ulid::new());
    let mut staged = stage_write(ds, vec![batch], WriteMode::Append, &uuid).await.map_err(RowAppendError::Failed)?;
    if !properties.is_empty() {
        staged.txn.transaction_properties = Some(Arc::new(properties));
    }
    match commit_exact(staged).await {
        Ok(c) => Ok(c),
        Err(e @ OmniError::ReadSetChanged { .. }) => Err(RowAppendError::Contention(e.to_string())),
        Err(e) => Err(RowAppendError::Failed(e)),
    }
}

/// The native branch identifier of the dataset's branch: `(parent_version,
/// uuid)` pairs, empty for main. Detects delete/recreate of a branch name.
pub async fn branch_identifier(ds: &Dataset) -> Result<Vec<(u64, String)>> {
    let id = ds
        .branch_identifier()
        .await
        .map_err(|e| OmniError::storage(format!("reading branch identifier of {}", ds.uri()), e))?;
    Ok(id.version_mapping)
}

/// Schema-level metadata of the dataset (where `__manifest` keeps its stamp).
pub fn schema_metadata(ds: &Dataset) -> &HashMap<String, String> {
    &ds.schema().metadata
}

/// One native Lance branch of a dataset, as its `BranchContents` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NativeBranch {
    /// The parent branch (`None` = main).
    pub parent_branch: Option<String>,
    /// The parent version the branch was created at.
    pub parent_version: u64,
    /// `(parent_version, uuid)` per fork level; unique per incarnation.
    pub identifier: Vec<(u64, String)>,
    /// Creation time, seconds since the epoch.
    pub created_at: u64,
}

/// Every native branch of the dataset at `uri` (main is not listed): a
/// listing and one ref read per branch, so callers that need one branch or
/// only names use [`native_branch`] or [`branch_names`].
pub async fn list_branches(uri: &str) -> Result<std::collections::BTreeMap<String, NativeBranch>> {
    let ds = open_table(uri, None, None).await?;
    let all = ds.list_branches().await.map_err(|e| OmniError::storage(format!("listing branches of {uri}"), e))?;
    Ok(all.into_iter().map(|(name, c)| (name, NativeBranch::from(c))).collect())
}

/// Native branch `name` of the dataset at `uri`, or `None` when it has no
/// such ref: one ref read whatever the number of branches.
pub async fn native_branch(uri: &str, name: &str) -> Result<Option<NativeBranch>> {
    let ds = open_table(uri, None, None).await?;
    match ds.branches().get(name).await {
        Ok(c) => Ok(Some(NativeBranch::from(c))),
        // Absent, removed between Lance's existence check and its read, or
        // a name Lance cannot hold (so no ref has it).
        Err(lance::Error::RefNotFound { .. } | lance::Error::NotFound { .. } | lance::Error::InvalidRef { .. }) => {
            Ok(None)
        }
        Err(e) => Err(OmniError::storage(format!("reading branch `{name}` of {uri}"), e)),
    }
}

/// The names of the native branches of the dataset at `uri` (main is not
/// listed): one directory listing, no ref read. The names are those
/// [`list_branches`] gives: Lance keeps one `_refs/branches/<name>.json`
/// per ref, its name URL-encoded.
pub async fn branch_names(uri: &str) -> Result<std::collections::BTreeSet<String>> {
    use object_store::path::Path;
    let what = "listing branches";
    let files = list_under(uri, what, |ds| {
        Ok(lance::dataset::refs::base_branches_contents_path(&ds.branch_location().find_main()?.path))
    })
    .await?;
    files
        .iter()
        .filter_map(|f| f.strip_suffix(".json"))
        .map(|encoded| {
            Path::from_url_path(encoded)
                .map(|p| p.to_string())
                .map_err(|e| OmniError::Internal(format!("a branch ref of {uri} named `{encoded}`: {e}")))
        })
        .collect()
}

/// Whether the dataset at `uri` holds any file under branch `name`'s tree
/// (`tree/<name>/`): one directory listing. A ref's tree without its ref
/// is what a create that did not finish leaves behind.
pub async fn branch_tree_exists(uri: &str, name: &str) -> Result<bool> {
    let what = format!("listing the tree of branch `{name}`");
    Ok(!list_under(uri, &what, |ds| Ok(ds.branch_location().find_branch(Some(name))?.path)).await?.is_empty())
}

/// The entries of the directory `dir` names in the dataset at `uri`
/// (opened on main), through the dataset's own store; none when the
/// directory does not exist.
async fn list_under(
    uri: &str,
    what: &str,
    dir: impl FnOnce(&Dataset) -> lance::Result<object_store::path::Path>,
) -> Result<Vec<String>> {
    let ds = open_table(uri, None, None).await?;
    let failed = |e: lance::Error| OmniError::storage(format!("{what} of {uri}"), e);
    let path = dir(&ds).map_err(failed)?;
    let store = ds.object_store(None).await.map_err(failed)?;
    match store.read_dir(path).await {
        Ok(entries) => Ok(entries),
        Err(lance::Error::NotFound { .. }) => Ok(Vec::new()),
        Err(e) => Err(failed(e)),
    }
}

impl From<lance::dataset::refs::BranchContents> for NativeBranch {
    fn from(c: lance::dataset::refs::BranchContents) -> Self {
        NativeBranch {
            parent_branch: c.parent_branch,
            parent_version: c.parent_version,
            identifier: c.identifier.version_mapping,
            created_at: c.create_at,
        }
    }
}

/// Create native branch `name` of the dataset at `uri` from exactly
/// (`from`, `version`). Lance shallow-clones `tree/<name>` and then writes the
/// branch's `BranchContents`; the two steps are not atomic, so callers
/// classify a failure from fresh metadata (see [`list_branches`]).
pub async fn create_branch(uri: &str, from: Option<&str>, version: u64, name: &str) -> Result<Arc<Dataset>> {
    let mut ds = Arc::unwrap_or_clone(open_table(uri, None, None).await?);
    let reference: lance::dataset::refs::Ref = (lance_branch(from), Some(version)).into();
    let created = ds.create_branch(name, reference, None).await.map_err(|e| match e {
        lance::Error::InvalidRef { message } => OmniError::BadRequest(format!("branch name `{name}`: {message}")),
        other => OmniError::storage(format!("creating branch `{name}` of {uri} at v{version}"), other),
    })?;
    Ok(Arc::new(created))
}

/// Delete native branch `name` of the dataset at `uri`. `force` also reclaims
/// a clone-only tree that has no `BranchContents`. A branch other branches
/// were created from is refused with [`OmniError::BranchConflict`].
pub async fn delete_branch(uri: &str, name: &str, force: bool) -> Result<()> {
    let mut ds = Arc::unwrap_or_clone(open_table(uri, None, None).await?);
    let out = if force { ds.force_delete_branch(name).await } else { ds.delete_branch(name).await };
    out.map_err(|e| match e {
        lance::Error::RefConflict { message } => OmniError::BranchConflict { branch: name.into(), reason: message },
        lance::Error::RefNotFound { .. } => OmniError::NotFound(format!("branch `{name}` of {uri}")),
        other => OmniError::storage(format!("deleting branch `{name}` of {uri}"), other),
    })
}

/// What a version cleanup removed (or, as a preview, would remove).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct VersionRemoval {
    /// Versions removed.
    pub versions_removed: u64,
    /// Bytes of files removed.
    pub bytes_removed: u64,
    /// Data files removed.
    pub data_files_removed: u64,
}

/// Every version of the ref `ds` is open on, oldest first.
pub async fn list_versions(ds: &Dataset) -> Result<Vec<u64>> {
    let versions =
        ds.versions().await.map_err(|e| OmniError::storage(format!("listing versions of {}", ds.uri()), e))?;
    Ok(versions.into_iter().map(|v| v.version).collect())
}

/// Remove exactly `versions` of the ref `ds` is open on (its latest is kept
/// by Lance whatever the list says), or only measure that when `!execute`.
/// Files a kept version or a child branch still reads stay; files no
/// manifest references stay too unless Lance's own 7-day rule applies, so a
/// write staging files concurrently loses nothing.
pub async fn remove_versions(ds: &Dataset, versions: Vec<u64>, execute: bool) -> Result<VersionRemoval> {
    if versions.is_empty() {
        return Ok(VersionRemoval::default());
    }
    let what = || format!("removing old versions of {}", ds.uri());
    let policy = lance::dataset::cleanup::CleanupPolicyBuilder::default()
        .versions(versions)
        .map_err(|e| OmniError::storage(what(), e))?
        .delete_unverified(false)
        .error_if_tagged_old_versions(false)
        .build();
    let op = ds.cleanup(policy);
    let stats = if execute { op.execute().await } else { op.explain().await.map(|x| x.stats) };
    let stats = stats.map_err(|e| OmniError::storage(what(), e))?;
    Ok(VersionRemoval {
        versions_removed: stats.old_versions,
        bytes_removed: stats.bytes_removed,
        data_files_removed: stats.data_files_removed,
    })
}

/// A change of a table's columns that touches no data file.
#[derive(Debug, Clone, Default)]
pub struct ColumnEdit {
    /// `(from, to)` column renames.
    pub renames: Vec<(String, String)>,
    /// Columns removed from the schema (their data stays in the files, so
    /// older versions still read them).
    pub drops: Vec<String>,
    /// `(column, nullable)` nullability changes.
    pub nullability: Vec<(String, bool)>,
    /// New nullable columns (read as null from every existing fragment).
    pub adds: Vec<arrow_schema::Field>,
    /// The column order the table must end with (the catalog's order).
    pub order: Vec<String>,
}

/// Stage `edit` as one metadata-only transaction: `Merge` with the current
/// fragments when it adds all-null columns, else `Project`. Field ids of
/// kept columns never change, so renamed columns keep their data and
/// indexes.
pub fn stage_column_edit(ds: Arc<Dataset>, edit: &ColumnEdit, uuid: &str) -> Result<StagedTxn> {
    let uri = table_uri(&ds);
    let err = |e: lance::Error| OmniError::storage(format!("planning the column change of {uri}"), e);
    let mut schema = ds.schema().clone();
    schema.fields.retain(|f| !edit.drops.contains(&f.name));
    for f in &mut schema.fields {
        if let Some((_, to)) = edit.renames.iter().find(|(from, _)| *from == f.name) {
            f.name = to.clone();
        }
        if let Some((_, nullable)) = edit.nullability.iter().find(|(c, _)| *c == f.name) {
            f.nullable = *nullable;
        }
    }
    if !edit.adds.is_empty() {
        schema = schema.merge(&ArrowSchema::new(edit.adds.clone())).map_err(err)?;
        schema.try_set_field_id(Some(ds.manifest().max_field_id())).map_err(err)?;
    }
    let position = |name: &str| edit.order.iter().position(|c| c == name).unwrap_or(usize::MAX);
    schema.fields.sort_by_key(|f| position(&f.name));
    let tightens = edit.nullability.iter().any(|(_, nullable)| !nullable);
    let op = if edit.adds.is_empty() {
        Operation::Project { schema, preserves_nullability: !tightens }
    } else {
        let fragments = ds.get_fragments().iter().map(|f| f.metadata().clone()).collect();
        Operation::Merge { fragments, schema, preserves_nullability: !tightens }
    };
    let mut txn = Transaction::new(ds.version().version, op, None);
    txn.uuid = uuid.to_string();
    Ok(StagedTxn { uri, dataset: Some(ds), txn, affected_rows: None, rows_written: 0 })
}

/// Names of the indexes the dataset has at its checked-out version.
pub async fn index_names(ds: &Dataset) -> Result<std::collections::BTreeSet<String>> {
    use lance::index::DatasetIndexExt;
    let indices =
        ds.load_indices().await.map_err(|e| OmniError::storage(format!("listing indexes of {}", ds.uri()), e))?;
    Ok(indices.iter().map(|i| i.name.clone()).collect())
}

/// Partitions the widest vector index [`stage_indices`] builds has.
const MAX_PARTITIONS: usize = 256;

/// The ids of the `k` rows of `ds` nearest `query` by cosine distance, from
/// the vector index on `column` with every partition probed (IVF_FLAT stores
/// exact vectors, so the answer is exact; rows appended after the build are
/// scanned); `None` when the column has no vector index yet.
pub async fn nearest_ids(ds: &Dataset, column: &str, query: &[f32], k: usize) -> Result<Option<Vec<String>>> {
    if !index_names(ds).await?.contains(&format!("{column}_vector")) {
        return Ok(None);
    }
    let ctx = || format!("nearest on {column} in {}", table_uri(ds));
    let mut scanner = ds.scan();
    scanner.project(&["id"]).map_err(|e| OmniError::storage(ctx(), e))?;
    let q = arrow_array::Float32Array::from(query.to_vec());
    scanner.nearest(column, &q, k).map_err(|e| OmniError::storage(ctx(), e))?;
    scanner.distance_metric(lance_linalg::distance::DistanceType::Cosine).nprobes(MAX_PARTITIONS);
    let stream = scanner.try_into_stream().await.map_err(|e| OmniError::storage(ctx(), e))?;
    let batches: Vec<RecordBatch> = stream.try_collect().await.map_err(|e| OmniError::storage(ctx(), e))?;
    let mut out = Vec::new();
    for b in &batches {
        let ids = b
            .column_by_name("id")
            .and_then(|c| c.as_any().downcast_ref::<arrow_array::StringArray>())
            .ok_or_else(|| OmniError::Internal(format!("{}: no id column in the result", ctx())))?;
        out.extend(ids.iter().flatten().map(str::to_string));
    }
    Ok(Some(out))
}

/// Bring the indexes of `specs` up to date as one `CreateIndex` transaction
/// with a pre-minted uuid: build each the dataset lacks (by name), and fold
/// the fragments an existing one does not cover into new segments
/// ([`super::index_fold::fold`]). `None` when every one exists and covers
/// the whole table. Nothing is committed: the index files are written, and
/// the exact commit makes them part of a version.
pub async fn stage_indices(
    ds: Arc<Dataset>,
    specs: &[crate::engine::lang::catalog::indexes::IndexSpec],
    depth: super::index_fold::FoldDepth,
    uuid: &str,
) -> Result<Option<StagedTxn>> {
    let existing = index_names(&ds).await?;
    let (present, missing): (Vec<_>, Vec<_>) = specs.iter().partition(|s| existing.contains(&s.name()));
    let uri = table_uri(&ds);
    let (mut new_indices, removed_indices) =
        super::index_fold::fold(&ds, present.iter().map(|s| s.name()).collect(), depth).await?;
    if !missing.is_empty() {
        let rows = row_count(&ds).await?;
        for spec in missing {
            let mut working = Arc::unwrap_or_clone(ds.clone());
            // Boxed: the builder's future is large and `Send` only for one lifetime.
            let index: futures::future::BoxFuture<'_, _> = Box::pin(build_index(&mut working, spec, rows));
            new_indices
                .push(index.await.map_err(|e| OmniError::storage(format!("building {} on {uri}", spec.name()), e))?);
        }
    }
    if new_indices.is_empty() && removed_indices.is_empty() {
        return Ok(None);
    }
    let op = Operation::CreateIndex { new_indices, removed_indices };
    let mut txn = Transaction::new(ds.version().version, op, None);
    txn.uuid = uuid.to_string();
    Ok(Some(StagedTxn { uri, dataset: Some(ds), txn, affected_rows: None, rows_written: 0 }))
}

/// Entries per page of a BTree index (Lance's default is 4,096). A key
/// probe decodes, sorts and searches each page it touches whole, so a
/// lookup of k spread keys costs about k pages of this size; but every
/// lookup also walks the page lookup, which grows as pages shrink. Measured
/// at ten million rows (`bench_writes`, figure `scale`): 1,024 halved a
/// 1,000-row merge load against 4,096 (in-process 116 → 58 ms, as a CLI
/// process 171 → 81 ms, its peak RSS 2.26× → 1.30× the 10,000-row figure)
/// with one-row writes unchanged; 512 and 256 made one-row deletes (three
/// lookups with their edge cascade) 1.7–2.4× their 10,000-row time.
/// Applies to indexes built from now on; a fold keeps an index's own size.
pub const BTREE_PAGE_ROWS: u64 = 1024;

/// Rows a vector index needs to train its partitions.
pub const VECTOR_INDEX_MIN_ROWS: u64 = 256;

async fn build_index(
    ds: &mut Dataset,
    spec: &crate::engine::lang::catalog::indexes::IndexSpec,
    rows: u64,
) -> lance::Result<lance_table::format::IndexMetadata> {
    use crate::engine::lang::catalog::indexes::IndexKind;
    use lance_index::scalar::{BuiltinIndexType, InvertedIndexParams, ScalarIndexParams};
    // Positions: `match_text` is a phrase query.
    let inverted = InvertedIndexParams::default().with_position(true);
    let btree = ScalarIndexParams::for_builtin(BuiltinIndexType::BTree)
        .with_params(&serde_json::json!({ "zone_size": BTREE_PAGE_ROWS }));
    // About one partition per 4,096 rows: small IVF lists train fast and stay exact enough.
    let partitions = usize::try_from(rows / 4_096).unwrap_or(MAX_PARTITIONS).clamp(1, MAX_PARTITIONS);
    let vector =
        lance::index::vector::VectorIndexParams::ivf_flat(partitions, lance_linalg::distance::DistanceType::Cosine);
    let (index_type, params): (lance_index::IndexType, &dyn lance_index::IndexParams) = match spec.kind {
        IndexKind::Btree => (lance_index::IndexType::BTree, &btree),
        IndexKind::Inverted => (lance_index::IndexType::Inverted, &inverted),
        IndexKind::Vector => (lance_index::IndexType::IvfFlat, &vector),
    };
    lance::index::CreateIndexBuilder::new(ds, &[spec.column.as_str()], index_type, params)
        .name(spec.name())
        .execute_uncommitted()
        .await
}

/// A full-text query on one column (see [`full_text_scores`]).
#[derive(Debug, Clone)]
pub enum TextQuery {
    /// Rows with any token of the text (BM25-scored).
    Match(String),
    /// Rows with a token within `max_edits` edits of one of the text's
    /// (`None` = by token length: 0 up to 2 chars, 1 up to 5, else 2).
    Fuzzy(String, Option<u32>),
    /// Rows with the text's tokens as a phrase, in order.
    Phrase(String),
}

/// `id` and BM25 score of every row at the checked-out version that
/// matches `query` on `column`, through its inverted index (rows written
/// after the index was built are searched too). `None` when the column has
/// no inverted index.
pub async fn full_text_scores(ds: &Dataset, column: &str, query: &TextQuery) -> Result<Option<Vec<(String, f32)>>> {
    use lance_index::scalar::FullTextSearchQuery;
    use lance_index::scalar::inverted::query::{FtsQuery, MatchQuery, PhraseQuery};
    let inverted = format!("{column}_inverted");
    if !index_names(ds).await?.contains(&inverted) {
        return Ok(None);
    }
    let col = Some(column.to_string());
    let fts: FtsQuery = match query {
        TextQuery::Match(q) => MatchQuery::new(q.clone()).with_column(col).into(),
        TextQuery::Fuzzy(q, edits) => MatchQuery::new(q.clone()).with_column(col).with_fuzziness(*edits).into(),
        TextQuery::Phrase(q) => PhraseQuery::new(q.clone()).with_column(col).into(),
    };
    let ctx = || format!("full-text search of {column} in {}", ds.uri());
    let mut scanner = ds.scan();
    scanner.project(&["id"]).map_err(|e| OmniError::storage(ctx(), e))?;
    scanner.full_text_search(FullTextSearchQuery::new_query(fts)).map_err(|e| OmniError::storage(ctx(), e))?;
    let stream = scanner.try_into_stream().await.map_err(|e| OmniError::storage(ctx(), e))?;
    let batches: Vec<RecordBatch> = stream.try_collect().await.map_err(|e| OmniError::storage(ctx(), e))?;
    let mut out = Vec::new();
    for b in &batches {
        let ids = b.column_by_name("id").and_then(|c| c.as_any().downcast_ref::<arrow_array::StringArray>());
        let scores = b.column_by_name("_score").and_then(|c| c.as_any().downcast_ref::<arrow_array::Float32Array>());
        let (Some(ids), Some(scores)) = (ids, scores) else {
            return Err(OmniError::Internal(format!("{}: no id/_score columns in the result", ctx())));
        };
        out.extend((0..b.num_rows()).map(|i| (ids.value(i).to_string(), scores.value(i))));
    }
    Ok(Some(out))
}
