//! A backend that computes nothing (zeros for multipoles and fields), to time or count the
//! decomposition alone.

use vortex_fmm::backend::{Backend, PhaseTimes, Plan};
use vortex_fmm::{Expansions, FarMethod, Fields, FmmError, Sources, Targets};

/// A backend that computes nothing: zeros for multipoles and fields.
pub struct NullBackend;

impl Backend for NullBackend {
    type State = usize;
    fn name(&self) -> String {
        "null".into()
    }
    fn prepare(&self, _: &Plan, _: &Sources, targets: &Targets) -> Result<usize, FmmError> {
        Ok(targets.len())
    }
    fn upward(&self, _: &Plan, _: &mut usize, _: &mut PhaseTimes) -> Result<(), FmmError> {
        Ok(())
    }
    fn downward(&self, _: &Plan, _: &mut usize, _: &mut PhaseTimes) -> Result<(), FmmError> {
        Ok(())
    }
    fn near_field(&self, _: &Plan, _: &mut usize, _: &mut PhaseTimes) -> Result<(), FmmError> {
        Ok(())
    }
    fn fields(&self, _: &Plan, n: usize) -> Result<Fields, FmmError> {
        Ok(Fields::zeros(n))
    }
    fn multipoles(&self, plan: &Plan, _: &usize, cells: &[usize]) -> Result<Expansions, FmmError> {
        Ok(FarMethod::of_plan(plan).zeros(cells.len()))
    }
    fn add_locals(
        &self,
        _: &Plan,
        _: &mut usize,
        _: &[usize],
        _: &Expansions,
    ) -> Result<(), FmmError> {
        Ok(())
    }
    fn set_multipoles(
        &self,
        _: &Plan,
        _: &mut usize,
        _: &[usize],
        _: &Expansions,
    ) -> Result<(), FmmError> {
        Ok(())
    }
}
