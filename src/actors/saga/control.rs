//! Control operations: branch create and delete, tag create and delete.
//! No sidecar and no commit, but the writers' way up to their effects: a
//! typestate (planned → gated → checked → applied) under the schema →
//! branch → table gates, so nothing they must not race is in flight.

use tracing::{Instrument, info_span};

use super::gates::Gates;
use crate::actors::lease::LeaseSet;
use crate::actors::runtime::Runtime;
use crate::protocol::Result;

/// A control operation: no sidecar and no commit, but the writers' way up to
/// its effects. [`Planned`] names its gates, [`Gated`] holds them (taken in
/// gate order), [`Checked`] has refused what must not happen under them and
/// holds the table gates its effects need; only `apply` makes effects,
/// through the owning actors, each presenting a lease the step holds.
pub(crate) trait ControlOp: Sized {
    /// What the checks found, for the effects.
    type Checked;
    /// What the operation answers.
    type Output;
    /// The gates taken before anything is read.
    fn gates(&self) -> Gates;
    /// Under the gates: refuse what must not happen, and name the table
    /// gates the effects need.
    async fn check(self, rt: &Runtime) -> Result<(Self::Checked, Gates)>;
    /// The effects, under every gate.
    async fn apply(checked: Self::Checked, rt: &Runtime, leases: LeaseSet) -> Result<Self::Output>;
}

/// A control operation with no gate taken.
pub(crate) struct Planned<'a, O> {
    rt: &'a Runtime,
    op: O,
}

impl<'a, O: ControlOp> Planned<'a, O> {
    pub(crate) fn new(rt: &'a Runtime, op: O) -> Self {
        Planned { rt, op }
    }

    /// Take the operation's gates in gate order.
    pub(crate) async fn lease(self) -> Result<Gated<'a, O>> {
        let leases = self.op.gates().acquire(self.rt).instrument(info_span!("control.lease")).await?;
        Ok(Gated { rt: self.rt, op: self.op, leases })
    }
}

/// A control operation holding its gates.
pub(crate) struct Gated<'a, O> {
    rt: &'a Runtime,
    op: O,
    leases: LeaseSet,
}

impl<'a, O: ControlOp> Gated<'a, O> {
    /// Check the preconditions under the gates, then take the table gates
    /// the effects need (after the branch gates, in order).
    pub(crate) async fn check(self) -> Result<Checked<'a, O>> {
        let Gated { rt, op, mut leases } = self;
        let (checked, tables) = op.check(rt).instrument(info_span!("control.check")).await?;
        tables.take(rt, &mut leases).instrument(info_span!("control.table_gates")).await?;
        Ok(Checked { rt, checked, leases })
    }
}

/// A control operation checked under its gates: ready for its effects.
pub(crate) struct Checked<'a, O: ControlOp> {
    rt: &'a Runtime,
    checked: O::Checked,
    leases: LeaseSet,
}

impl<O: ControlOp> Checked<'_, O> {
    /// Make the effects; the gates are released when they are done.
    pub(crate) async fn apply(self) -> Result<O::Output> {
        O::apply(self.checked, self.rt, self.leases).instrument(info_span!("control.apply")).await
    }
}
