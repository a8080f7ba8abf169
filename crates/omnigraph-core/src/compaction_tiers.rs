//! Tiered compaction of an append-mostly table: when a write should compact,
//! and how far.
//!
//! Compacting only the recent tail into fragments of a fixed size keeps
//! each compaction cheap but lets the settled fragments pile up without
//! bound: one per so many rows, forever, so everything that walks a
//! version's fragment list (every commit, open and scan) costs more as the
//! table ages. Tiers bound the count instead, as an LSM tree's levels do:
//! tier `i` merges its candidates (fragments under `target_rows` rows) into
//! fragments of that size once there are more than `max_small` of them, so
//! a table holds at most about `max_small` fragments per tier, and each row
//! is rewritten about once per tier over its life.

/// One tier of a tiered compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tier {
    /// Fragments under this many rows are the tier's candidates, merged into
    /// fragments of about this size.
    pub target_rows: usize,
    /// Candidates the table may hold before the tier compacts.
    pub max_small: usize,
}

/// The `target_rows` of the highest tier that is due, given each
/// fragment's physical row count (`None` = unknown, counted in the lowest
/// tier), or `None` when none is. Tiers are given smallest first. A tier
/// counts the fragments its level holds (under its target, and at least
/// the tier below's: what that tier settled), so a lower tier's fragments
/// never make a higher one due; the highest due tier is chosen because its
/// merge (of every fragment under its target) also absorbs the lower ones.
pub fn due(fragment_rows: &[Option<usize>], tiers: &[Tier]) -> Option<usize> {
    tiers.iter().enumerate().rev().find_map(|(i, tier)| {
        let floor = i.checked_sub(1).map_or(0, |below| tiers[below].target_rows);
        let level = |rows: &&Option<usize>| match rows {
            Some(n) => *n >= floor && *n < tier.target_rows,
            None => i == 0,
        };
        (fragment_rows.iter().filter(level).count() > tier.max_small).then_some(tier.target_rows)
    })
}

/// The longest run of adjacent candidates that one compaction could merge:
/// `fragments` in order, each `None` when it is not a candidate, else the
/// group it may merge within (Lance merges only neighbours covered by the
/// same indexes). A small fragment an index fold covered and left behind
/// sits alone in its group, so it never makes a write compact again.
pub fn longest_mergeable_run<K: PartialEq>(fragments: &[Option<K>]) -> usize {
    let (mut best, mut run) = (0, 0);
    for (i, group) in fragments.iter().enumerate() {
        run = match (group, i.checked_sub(1).and_then(|p| fragments[p].as_ref())) {
            (None, _) => 0,
            (Some(g), Some(prev)) if g == prev => run + 1,
            (Some(_), _) => 1,
        };
        best = best.max(run);
    }
    best
}

/// How many of an index's newest segments a background fold merges with
/// the tail it indexes (0: the tail becomes a segment of its own), given
/// each segment's rows, oldest first, and the tail's rows. A segment that
/// holds no more rows than everything newer (the tail included) is merged,
/// with all newer ones: afterwards each segment outweighs all newer ones
/// together, so sizes at least double from newest to oldest, an index holds
/// at most about log2(rows / tail) segments (a key lookup searches each),
/// and each row is rewritten about as often, as a binary counter carries.
/// Appending deltas without merging, a lookup searched one more segment
/// after every fold for as long as the daemon ran.
pub fn segments_to_merge(oldest_first: &[u64], tail_rows: u64) -> usize {
    let mut newer = tail_rows;
    let mut merge = 0;
    for (j, &rows) in oldest_first.iter().rev().enumerate() {
        if rows <= newer {
            merge = j + 1;
        }
        newer += rows;
    }
    merge
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_folds_keep_segments_logarithmic_and_rewrites_few() {
        assert_eq!(segments_to_merge(&[], 10), 0);
        assert_eq!(segments_to_merge(&[100], 10), 0, "a big segment stays");
        assert_eq!(segments_to_merge(&[100, 10], 10), 1);
        assert_eq!(segments_to_merge(&[40, 20, 10], 10), 3, "a carry runs through every equal-or-smaller segment");
        // A thousand folds of 10 rows: the segments are the binary digits of
        // the folds so far, and each row is rewritten about log2 times.
        let (mut segments, mut rewritten) = (Vec::<u64>::new(), 0u64);
        for fold in 1..=1000u64 {
            let k = segments_to_merge(&segments, 10);
            let merged: u64 = segments.drain(segments.len() - k..).sum();
            rewritten += merged;
            segments.push(merged + 10);
            assert_eq!(segments.len() as u32, fold.count_ones(), "after fold {fold}: {segments:?}");
            assert!(segments.windows(2).all(|w| w[0] > w[1]), "sizes fall from oldest to newest: {segments:?}");
        }
        assert!(rewritten <= 10 * 1000 * 10, "rows rewritten {rewritten} for 10,000 indexed");
    }

    #[test]
    fn uneven_tails_still_leave_each_segment_above_all_newer_ones() {
        let (mut segments, mut state) = (Vec::<u64>::new(), 7u64);
        for _ in 0..2000 {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let tail = 1 + (state >> 33) % 5000;
            let k = segments_to_merge(&segments, tail);
            let merged: u64 = segments.drain(segments.len() - k..).sum();
            segments.push(merged + tail);
            for i in 0..segments.len() {
                assert!(segments[i] > segments[i + 1..].iter().sum::<u64>(), "{segments:?}");
            }
        }
        let total: u64 = segments.iter().sum();
        assert!(segments.len() as f64 <= (total as f64).log2() + 1.0, "{} segments for {total} rows", segments.len());
    }

    #[test]
    fn a_mergeable_run_stops_at_a_settled_fragment_and_at_another_index_group() {
        assert_eq!(longest_mergeable_run::<u8>(&[]), 0);
        assert_eq!(longest_mergeable_run(&[Some(1), Some(1), None, Some(1)]), 2);
        // Stranded small fragments, each covered by a different fold, then an unindexed tail.
        let stranded = [Some(1), None, Some(2), None, Some(3), Some(0), Some(0), Some(0)];
        assert_eq!(longest_mergeable_run(&stranded), 3);
    }

    const TIERS: [Tier; 2] = [Tier { target_rows: 1024, max_small: 8 }, Tier { target_rows: 32_768, max_small: 40 }];

    /// Simulates a table that gains `rows_per_commit` rows a commit, with a
    /// compaction whenever a tier is due (merging its candidates in order);
    /// returns the fragments left and the rows each tier rewrote.
    fn simulate(commits: usize, rows_per_commit: usize) -> (Vec<Option<usize>>, [usize; 2]) {
        let (mut fragments, mut rewritten) = (Vec::new(), [0usize; 2]);
        for _ in 0..commits {
            fragments.push(Some(rows_per_commit));
            if let Some(target) = due(&fragments, &TIERS) {
                let (keep, merge): (Vec<Option<usize>>, Vec<Option<usize>>) =
                    fragments.iter().partition(|r| r.is_some_and(|n| n >= target));
                let rows: usize = merge.iter().map(|r| r.unwrap_or(0)).sum();
                rewritten[usize::from(target != TIERS[0].target_rows)] += rows;
                fragments = keep;
                fragments.extend(std::iter::repeat_n(Some(target), rows / target));
                if !rows.is_multiple_of(target) {
                    fragments.push(Some(rows % target));
                }
            }
        }
        (fragments, rewritten)
    }

    #[test]
    fn nothing_is_due_below_every_bound() {
        assert_eq!(due(&[Some(10); 8], &TIERS), None);
        assert_eq!(due(&[Some(5_000); 100], &TIERS[..1]), None);
    }

    #[test]
    fn the_tail_tier_compacts_past_its_bound() {
        assert_eq!(due(&[Some(10); 9], &TIERS), Some(1024));
        assert_eq!(due(&[None; 9], &TIERS), Some(1024));
    }

    #[test]
    fn the_highest_due_tier_wins() {
        let mut rows = vec![Some(1024); 41];
        rows.extend([Some(3); 9]);
        assert_eq!(due(&rows, &TIERS), Some(32_768));
        // The tail alone does not make the next tier due.
        rows.truncate(40);
        rows.extend([Some(3); 9]);
        assert_eq!(due(&rows, &TIERS), Some(1024));
    }

    #[test]
    fn fragments_stay_bounded_and_a_higher_tier_rewrites_each_row_about_once() {
        let (commits, per_commit) = (200_000, 4);
        let (fragments, [tail, upper]) = simulate(commits, per_commit);
        let rows = commits * per_commit;
        // Tail-only compaction would leave rows / 1024 = 781 fragments.
        assert!(fragments.len() <= 8 + 40 + rows / 32_768, "{} fragments", fragments.len());
        // The tail tier re-merges its partial fragment each time (at most
        // its target per compaction, one compaction per 8 commits) ...
        assert!(tail <= commits / 8 * 1024, "{tail} rows rewritten by the tail tier");
        // ... and the next tier rewrites each row about once.
        assert!(upper <= rows * 2, "{upper} rows rewritten by the upper tier for {rows}");
        assert!(upper >= rows / 2, "the upper tier never ran ({upper} rows)");
    }
}
