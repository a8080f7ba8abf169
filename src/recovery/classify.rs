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
    /// The transaction at `pin + 1`, when HEAD is past the pin.
    pub at_next: Option<TxnIdentity>,
    /// The transaction at HEAD, when HEAD is past `pin + 1`.
    pub at_head: Option<TxnIdentity>,
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
    /// HEAD == pin + 1, carrying the planned transaction: ours, on top.
    RolledPastExpected {
        /// The HEAD version.
        head: u64,
    },
    /// Our effect at pin + 1 with our compensating restore on top of it.
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
            TableClass::Compensated { head } => write!(f, "Compensated(v{head})"),
            TableClass::UnexpectedAtP1 => f.write_str("UnexpectedAtP1"),
            TableClass::UnexpectedMultistep { head } => write!(f, "UnexpectedMultistep(v{head})"),
            TableClass::InvariantViolation(why) => write!(f, "InvariantViolation({why})"),
        }
    }
}

/// Classify one table: `planned` is the sidecar's pre-minted identity and
/// `compensation` the identity recovery's own restore would carry.
pub fn classify(e: &Evidence, planned: &TxnIdentity, compensation: &TxnIdentity) -> TableClass {
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
    if e.at_next.as_ref() != Some(planned) {
        return if head == e.pin + 1 { TableClass::UnexpectedAtP1 } else { TableClass::UnexpectedMultistep { head } };
    }
    if head == e.pin + 1 {
        return TableClass::RolledPastExpected { head };
    }
    // A fork is never compensated by a restore (recovery removes it instead).
    if head == e.pin + 2 && e.at_head.as_ref() == Some(compensation) && e.fork_matches.is_none() {
        return TableClass::Compensated { head };
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

    fn id(read_version: u64, uuid: &str) -> TxnIdentity {
        TxnIdentity { read_version, uuid: uuid.into() }
    }

    fn ev(head: Option<u64>, at_next: Option<TxnIdentity>, at_head: Option<TxnIdentity>) -> Evidence {
        Evidence { pin: 5, head, at_next, at_head, fork_matches: None }
    }

    #[test]
    fn each_table_class() {
        let (ours, comp) = (id(5, "ours"), id(6, "omni-rollback"));
        assert_eq!(classify(&ev(Some(5), None, None), &ours, &comp), TableClass::NoMovement);
        assert_eq!(
            classify(&ev(Some(6), Some(ours.clone()), None), &ours, &comp),
            TableClass::RolledPastExpected { head: 6 }
        );
        assert_eq!(classify(&ev(Some(6), Some(id(5, "x")), None), &ours, &comp), TableClass::UnexpectedAtP1);
        assert_eq!(
            classify(&ev(Some(7), Some(ours.clone()), Some(comp.clone())), &ours, &comp),
            TableClass::Compensated { head: 7 }
        );
        assert_eq!(
            classify(&ev(Some(7), Some(ours.clone()), Some(id(6, "other"))), &ours, &comp),
            TableClass::UnexpectedMultistep { head: 7 }
        );
        assert_eq!(
            classify(&ev(Some(8), Some(id(5, "x")), None), &ours, &comp),
            TableClass::UnexpectedMultistep { head: 8 }
        );
        assert!(matches!(classify(&ev(Some(4), None, None), &ours, &comp), TableClass::InvariantViolation(_)));
    }

    #[test]
    fn first_touch_classes() {
        let (ours, comp) = (id(5, "ours"), id(6, "omni-rollback"));
        let fork = |head, matches| Evidence { fork_matches: Some(matches), ..ev(head, None, None) };
        assert_eq!(
            classify(&Evidence { fork_matches: None, ..ev(None, None, None) }, &ours, &comp),
            TableClass::NoMovement
        );
        assert_eq!(classify(&fork(Some(5), true), &ours, &comp), TableClass::UntouchedFork);
        assert!(matches!(classify(&fork(Some(5), false), &ours, &comp), TableClass::InvariantViolation(_)));
        let owned = Evidence { at_next: Some(ours.clone()), ..fork(Some(6), true) };
        assert_eq!(classify(&owned, &ours, &comp), TableClass::RolledPastExpected { head: 6 });
        let restored = Evidence { at_head: Some(comp.clone()), ..Evidence { head: Some(7), ..owned } };
        assert_eq!(classify(&restored, &ours, &comp), TableClass::UnexpectedMultistep { head: 7 });
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
        assert!(
            matches!(decide(true, true, &t(TableClass::UnexpectedAtP1)), Decision::FailClosed(m) if m.contains("UnexpectedAtP1"))
        );
        let none = vec![("a", TableClass::NoMovement), ("b", TableClass::NoMovement)];
        assert_eq!(decide(false, false, &none), Decision::NoMovement);
        let fork = vec![("a", TableClass::UntouchedFork), ("b", TableClass::NoMovement)];
        assert!(matches!(decide(false, true, &fork), Decision::RollBack { .. }));
    }
}
