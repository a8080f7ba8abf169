//! Classifying a sidecar, table by table, from what Lance shows, and the
//! all-or-nothing decision over the whole sidecar. Pure: `resolve` gathers
//! the evidence and carries the decision out.
//!
//! The class names are the seed's (NoMovement, RolledPastExpected,
//! UnexpectedAtP1, UnexpectedMultistep, IncompletePhaseB,
//! InvariantViolation), plus the two shapes a first touch on a named branch
//! adds (an untouched fork) and a compensation that already landed.

use std::fmt;

use crate::engine::storage::TxnIdentity;

/// What Lance shows for one table of a sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    /// The table's manifest pin (for a first touch: the inherited version).
    pub pin: u64,
    /// Lance HEAD on the ref the write targets; `None` for a first touch
    /// whose fork does not exist.
    pub head: Option<u64>,
    /// The transactions at `pin + 1`, `pin + 2`, … up to HEAD (at most one
    /// more than the planned chain is long); `None` where Lance has none.
    pub txns: Vec<Option<TxnIdentity>>,
    /// For a first touch: whether the existing fork is the planned one
    /// (same parent ref and inherited version).
    pub fork_matches: Option<bool>,
}

/// One table's class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TableClass {
    /// HEAD == pin (a first touch: no fork exists).
    NoMovement,
    /// A first touch whose fork exists at exactly the inherited version.
    UntouchedFork,
    /// HEAD == pin + the chain's length, every version carrying the planned
    /// transaction: the whole effect is ours, on top.
    RolledPastExpected {
        /// The HEAD version.
        head: u64,
    },
    /// A contiguous prefix of the planned chain landed, and nothing else:
    /// ours, incomplete (roll back only).
    PartialChain {
        /// The HEAD version.
        head: u64,
        /// How many of the chain's transactions landed.
        landed: usize,
    },
    /// Our effect (all or a prefix of the chain) with our compensating
    /// restore on top of it.
    Compensated {
        /// The HEAD version (the restore).
        head: u64,
    },
    /// HEAD == pin + 1 but a foreign transaction: never ours to touch.
    UnexpectedAtP1,
    /// HEAD beyond pin + 1 and not our compensation: an effect buried under
    /// others, or foreign steps.
    UnexpectedMultistep {
        /// The HEAD version.
        head: u64,
    },
    /// HEAD below the pin, or a fork that is not the planned one.
    InvariantViolation(String),
}

impl TableClass {
    /// Whether recovery may never act on this table.
    pub fn is_foreign(&self) -> bool {
        matches!(
            self,
            TableClass::UnexpectedAtP1 | TableClass::UnexpectedMultistep { .. } | TableClass::InvariantViolation(_)
        )
    }
}

impl fmt::Display for TableClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TableClass::NoMovement => f.write_str("NoMovement"),
            TableClass::UntouchedFork => f.write_str("UntouchedFork"),
            TableClass::RolledPastExpected { head } => write!(f, "RolledPastExpected(v{head})"),
            TableClass::PartialChain { head, landed } => write!(f, "PartialChain(v{head}, {landed} landed)"),
            TableClass::Compensated { head } => write!(f, "Compensated(v{head})"),
            TableClass::UnexpectedAtP1 => f.write_str("UnexpectedAtP1"),
            TableClass::UnexpectedMultistep { head } => write!(f, "UnexpectedMultistep(v{head})"),
            TableClass::InvariantViolation(why) => write!(f, "InvariantViolation({why})"),
        }
    }
}

/// Classify one table: `chain` is the sidecar's pre-minted identities in
/// commit order (one for a mutation or load), `compensation` the uuid
/// recovery's own restore carries. Only a contiguous prefix of the chain is
/// ever accepted as ours.
pub fn classify(e: &Evidence, chain: &[TxnIdentity], compensation: &str) -> TableClass {
    if e.fork_matches == Some(false) {
        return TableClass::InvariantViolation("the branch ref is not the fork this write planned".into());
    }
    let Some(head) = e.head else { return TableClass::NoMovement };
    if head < e.pin {
        return TableClass::InvariantViolation(format!("Lance HEAD v{head} is below the manifest pin v{}", e.pin));
    }
    if head == e.pin {
        return if e.fork_matches.is_some() { TableClass::UntouchedFork } else { TableClass::NoMovement };
    }
    let landed = chain.iter().zip(&e.txns).take_while(|(planned, found)| found.as_ref() == Some(*planned)).count();
    let top = e.pin + landed as u64;
    if landed > 0 && head == top {
        return if landed == chain.len() {
            TableClass::RolledPastExpected { head }
        } else {
            TableClass::PartialChain { head, landed }
        };
    }
    let restore = TxnIdentity { read_version: top, uuid: compensation.to_string() };
    // A fork is never compensated by a restore (recovery removes it instead).
    if landed > 0 && head == top + 1 && e.txns.get(landed) == Some(&Some(restore)) && e.fork_matches.is_none() {
        return TableClass::Compensated { head };
    }
    if landed == 0 && head == e.pin + 1 {
        return TableClass::UnexpectedAtP1;
    }
    TableClass::UnexpectedMultistep { head }
}

/// The whole sidecar's class and what recovery does with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Every table is exactly ours, confirmed, and the authority still
    /// holds: publish the write's own commit.
    RollForward,
    /// Nothing moved anywhere: discard the sidecar (and any clone-only tree).
    NoMovement,
    /// Some effects landed but the write cannot be published (still Armed,
    /// i.e. IncompletePhaseB, or the authority moved): compensate them all.
    RollBack {
        /// Why the write is not rolled forward.
        why: &'static str,
    },
    /// A foreign or buried effect, or a broken invariant: touch nothing,
    /// keep the sidecar for an operator.
    FailClosed(String),
}

/// Decide over every table class (all-or-nothing).
pub fn decide(confirmed: bool, authority_holds: bool, classes: &[(&str, TableClass)]) -> Decision {
    if classes.is_empty() {
        // Only pointers (a merge adopting published versions): nothing to
        // compensate, so a confirmed intent under a live authority publishes.
        return if confirmed && authority_holds { Decision::RollForward } else { Decision::NoMovement };
    }
    if let Some((table, class)) = classes.iter().find(|(_, c)| c.is_foreign()) {
        return Decision::FailClosed(format!("{table}: {class}; kept for an operator"));
    }
    if classes.iter().all(|(_, c)| *c == TableClass::NoMovement) {
        return Decision::NoMovement;
    }
    let all_ours = classes.iter().all(|(_, c)| matches!(c, TableClass::RolledPastExpected { .. }));
    match (confirmed, authority_holds, all_ours) {
        (true, true, true) => Decision::RollForward,
        (false, _, _) => Decision::RollBack { why: "IncompletePhaseB: effects were never confirmed" },
        (true, false, _) => Decision::RollBack { why: "the branch authority moved since the write prepared" },
        (true, true, false) => Decision::RollBack { why: "a confirmed effect is missing or already compensated" },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMP: &str = "omni-rollback";

    fn id(read_version: u64, uuid: &str) -> TxnIdentity {
        TxnIdentity { read_version, uuid: uuid.into() }
    }

    fn ev(head: Option<u64>, txns: &[TxnIdentity]) -> Evidence {
        Evidence { pin: 5, head, txns: txns.iter().cloned().map(Some).collect(), fork_matches: None }
    }

    #[test]
    fn each_table_class() {
        let ours = [id(5, "ours")];
        let comp = id(6, COMP);
        assert_eq!(classify(&ev(Some(5), &[]), &ours, COMP), TableClass::NoMovement);
        assert_eq!(classify(&ev(Some(6), &ours), &ours, COMP), TableClass::RolledPastExpected { head: 6 });
        assert_eq!(classify(&ev(Some(6), &[id(5, "x")]), &ours, COMP), TableClass::UnexpectedAtP1);
        assert_eq!(
            classify(&ev(Some(7), &[ours[0].clone(), comp.clone()]), &ours, COMP),
            TableClass::Compensated { head: 7 }
        );
        assert_eq!(
            classify(&ev(Some(7), &[ours[0].clone(), id(6, "other")]), &ours, COMP),
            TableClass::UnexpectedMultistep { head: 7 }
        );
        assert_eq!(
            classify(&ev(Some(8), &[id(5, "x"), id(6, "y")]), &ours, COMP),
            TableClass::UnexpectedMultistep { head: 8 }
        );
        assert!(matches!(classify(&ev(Some(4), &[]), &ours, COMP), TableClass::InvariantViolation(_)));
    }

    #[test]
    fn only_a_contiguous_prefix_of_a_chain_is_ours() {
        let chain = [id(5, "a"), id(6, "b"), id(7, "c")];
        assert_eq!(classify(&ev(Some(8), &chain), &chain, COMP), TableClass::RolledPastExpected { head: 8 });
        assert_eq!(classify(&ev(Some(7), &chain[..2]), &chain, COMP), TableClass::PartialChain { head: 7, landed: 2 });
        assert_eq!(classify(&ev(Some(6), &chain[..1]), &chain, COMP), TableClass::PartialChain { head: 6, landed: 1 });
        // A foreign step on top of our prefix.
        assert_eq!(
            classify(&ev(Some(7), &[chain[0].clone(), id(6, "foreign")]), &chain, COMP),
            TableClass::UnexpectedMultistep { head: 7 }
        );
        // Our later step without the first: not a prefix.
        assert_eq!(
            classify(&ev(Some(7), &[id(5, "foreign"), chain[1].clone()]), &chain, COMP),
            TableClass::UnexpectedMultistep { head: 7 }
        );
        // A prefix, then our restore: compensated, at any prefix length.
        let restored = [chain[0].clone(), chain[1].clone(), id(7, COMP)];
        assert_eq!(classify(&ev(Some(8), &restored), &chain, COMP), TableClass::Compensated { head: 8 });
        let complete = [chain[0].clone(), chain[1].clone(), chain[2].clone(), id(8, COMP)];
        assert_eq!(classify(&ev(Some(9), &complete), &chain, COMP), TableClass::Compensated { head: 9 });
        // A restore recorded at the wrong read version is not ours.
        let wrong = [chain[0].clone(), id(5, COMP)];
        assert_eq!(classify(&ev(Some(7), &wrong), &chain, COMP), TableClass::UnexpectedMultistep { head: 7 });
    }

    #[test]
    fn first_touch_classes() {
        let ours = [id(5, "ours")];
        let fork = |head, matches, txns: &[TxnIdentity]| Evidence { fork_matches: Some(matches), ..ev(head, txns) };
        assert_eq!(classify(&ev(None, &[]), &ours, COMP), TableClass::NoMovement);
        assert_eq!(classify(&fork(Some(5), true, &[]), &ours, COMP), TableClass::UntouchedFork);
        assert!(matches!(classify(&fork(Some(5), false, &[]), &ours, COMP), TableClass::InvariantViolation(_)));
        assert_eq!(classify(&fork(Some(6), true, &ours), &ours, COMP), TableClass::RolledPastExpected { head: 6 });
        let restored = fork(Some(7), true, &[ours[0].clone(), id(6, COMP)]);
        assert_eq!(classify(&restored, &ours, COMP), TableClass::UnexpectedMultistep { head: 7 });
    }

    #[test]
    fn the_decision_is_all_or_nothing() {
        let ours = TableClass::RolledPastExpected { head: 6 };
        let t = |c: TableClass| vec![("a", c.clone()), ("b", ours.clone())];
        assert_eq!(decide(true, true, &t(ours.clone())), Decision::RollForward);
        assert!(
            matches!(decide(false, true, &t(ours.clone())), Decision::RollBack { why } if why.contains("IncompletePhaseB"))
        );
        assert!(matches!(decide(true, false, &t(ours.clone())), Decision::RollBack { .. }));
        assert!(matches!(decide(true, true, &t(TableClass::NoMovement)), Decision::RollBack { .. }));
        let partial = TableClass::PartialChain { head: 6, landed: 1 };
        assert!(matches!(decide(true, true, &t(partial)), Decision::RollBack { .. }));
        assert!(
            matches!(decide(true, true, &t(TableClass::UnexpectedAtP1)), Decision::FailClosed(m) if m.contains("UnexpectedAtP1"))
        );
        let none = vec![("a", TableClass::NoMovement), ("b", TableClass::NoMovement)];
        assert_eq!(decide(false, false, &none), Decision::NoMovement);
        let fork = vec![("a", TableClass::UntouchedFork), ("b", TableClass::NoMovement)];
        assert!(matches!(decide(false, true, &fork), Decision::RollBack { .. }));
        // Pointer-only intents: publish when confirmed and the authority holds.
        assert_eq!(decide(true, true, &[]), Decision::RollForward);
        assert_eq!(decide(true, false, &[]), Decision::NoMovement);
        assert_eq!(decide(false, true, &[]), Decision::NoMovement);
    }
}
