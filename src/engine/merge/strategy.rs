//! A merge strategy and the user's resolutions applied to one table's row
//! conflicts: each conflicting entity is read at the base, the source and
//! the target, decided ([`resolution::decide`]: a resolution naming it,
//! else the strategy), and the decision joins the table's delta as
//! any other row the merge writes. So the decided rows land in the same
//! pre-minted chain as the rest of the merge: one commit, no intermediate
//! state, and recovery rolls forward exactly what was decided.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::RecordBatch;
use lance::Dataset;

use super::delta;
use super::lineage::ConflictRows;
use super::{ShapedPin, TableMerge};
use crate::engine::committed;
use crate::engine::manifest::TableEntry;
use crate::engine::resolution::{self, Resolution, Strategies};
use crate::engine::rows::{self, EntityRow};
use crate::engine::storage::{Reshaper, Root};
use crate::engine::three_way::Decision;
use crate::protocol::{OmniError, Result};

/// What deciding one table's row conflicts did.
#[derive(Debug, Default)]
pub struct Decided {
    /// Row conflicts decided (by a resolution or the strategy).
    pub count: usize,
    /// Each resolution applied (by its index in the merge's list), and its
    /// outcome (`kept`, `written`, `deleted`).
    pub resolved: Vec<(usize, &'static str)>,
}

/// Decide the row conflicts of `m`: by the `resolutions` naming them (each
/// with its index in the merge's list; all of `m`'s type), else by
/// `strategy` (per entity or property: the merge's strategy or the
/// schema's `@merge` policies). The three sides' rows are those the row
/// versions gave (`m.conflict_rows`), else read at each pin (`base`: the
/// table's pin at the merge base); `may_decide` false (no resolution,
/// every strategy `fail`) skips them. What nothing decides stays in
/// `m.delta.conflicts`; the decisions join its delta and rows. A
/// resolution that does not fit its conflict is a 400.
pub async fn decide_table(
    root: &Root,
    base: Option<&TableEntry>,
    m: &mut TableMerge,
    (strategy, may_decide): (Strategies<'_>, bool),
    resolutions: &[(usize, &Resolution)],
) -> Result<Decided> {
    let mut out = Decided::default();
    if !may_decide || m.delta.conflicts.is_empty() {
        return Ok(out);
    }
    // A target that is the merge base changed nothing, so it has no conflict.
    assert!(
        base.is_none_or(|b| !super::same(b, &m.target)),
        "{}: a conflict where the target is the base",
        m.table_key
    );
    let shapes = m.shapes.as_deref();
    let sides = match m.conflict_rows.take() {
        Some(known) => Sides::of(known),
        None => Sides::read(root, base, m).await?,
    };
    let Sides { base: base_rows, source: (source_rows, source_batches), target: target_rows } = sides;
    let (mut whole, mut merged) = (BTreeSet::new(), Vec::new());
    for c in std::mem::take(&mut m.delta.conflicts) {
        let Some(id) = c.entity_id.clone() else {
            return Err(OmniError::Internal(format!("{}: a row conflict without an id", m.table_key)));
        };
        let (b, s, t) = (base_rows.get(&id), source_rows.get(&id), target_rows.get(&id));
        let mine: Vec<&(usize, &Resolution)> = resolutions.iter().filter(|(_, r)| r.id == id).collect();
        let named: Vec<&Resolution> = mine.iter().map(|(_, r)| *r).collect();
        let decision = resolution::decide(c.kind, strategy, &named, (b, s, t)).map_err(OmniError::BadRequest)?;
        let Some(decision) = decision else {
            m.delta.conflicts.push(c);
            continue;
        };
        out.count += 1;
        out.resolved.extend(mine.iter().map(|(i, _)| (*i, decision.outcome())));
        match decision {
            Decision::Keep => continue,
            Decision::Delete => {
                m.delta.deleted.insert(id);
                continue;
            }
            // The source's own row is written as it is stored; a merged one is built.
            Decision::Write(row) if Some(&row) == s => {
                whole.insert(id.clone());
            }
            Decision::Write(row) => merged.push(row),
        }
        if t.is_some() { &mut m.delta.updated } else { &mut m.delta.inserted }.insert(id);
    }
    // Written as the merge's other rows are: in the merged shape across a
    // schema change, else in the target's column order and types.
    let (exact, _) = delta::split_by_ids(&source_batches, &whole)?;
    let schema = match shapes {
        Some(s) => {
            m.rows.extend(exact);
            s.merged.clone()
        }
        None => {
            m.rows.extend(super::lineage::normalised(&m.target_ds, &exact)?);
            Arc::new(arrow_schema::Schema::from(m.target_ds.schema()))
        }
    };
    if !merged.is_empty() {
        m.rows.push(rows::to_batch(&schema, &merged)?);
    }
    Ok(out)
}

/// The rows of a table's conflicting entities on the three sides, by id
/// (the source's as batches too: a row it keeps is written as stored).
struct Sides {
    base: HashMap<String, EntityRow>,
    source: (HashMap<String, EntityRow>, Vec<RecordBatch>),
    target: HashMap<String, EntityRow>,
}

impl Sides {
    /// From the rows the merge's row versions already gave.
    fn of(known: ConflictRows) -> Self {
        let by_id = rows::by_id::<HashMap<_, _>>;
        Sides { base: by_id(&known.base), source: (by_id(&known.source), known.source), target: by_id(&known.target) }
    }

    /// Read from each side's pin (`base`: the table's pin at the merge
    /// base). Across a schema change every side is read in the merged
    /// shape, the base under the name it had there.
    async fn read(root: &Root, base: Option<&TableEntry>, m: &TableMerge) -> Result<Self> {
        let ids: HashSet<&str> = m.delta.conflicts.iter().filter_map(|c| c.entity_id.as_deref()).collect();
        let shapes = m.shapes.as_deref();
        let shape = |pin: &ShapedPin| pin.shape.clone();
        let base = match shapes {
            Some(s) => s.base.as_ref().map(|b| (&b.entry, shape(b))),
            None => base.map(|b| (b, None)),
        };
        let source_ds = committed::open_pinned(root, &m.source).await?;
        let source = read(&source_ds, &ids, shapes.and_then(|s| shape(&s.source))).await?;
        let (target, _) = read(&m.target_ds, &ids, shapes.and_then(|s| shape(&s.target))).await?;
        let base = match base {
            Some((entry, shape)) => read(&*committed::open_pinned(root, entry).await?, &ids, shape).await?.0,
            None => HashMap::new(),
        };
        Ok(Sides { base, source, target })
    }
}

/// The rows of `ds` whose ids are in `ids` (through `shape`, when given),
/// by id and as batches.
async fn read(
    ds: &Dataset,
    ids: &HashSet<&str>,
    shape: Option<Reshaper>,
) -> Result<(HashMap<String, EntityRow>, Vec<RecordBatch>)> {
    let batches = super::reshaped(shape.as_ref(), delta::rows_with_ids(ds, ids).await?)?;
    Ok((rows::by_id(&batches), batches))
}
