//! A backend that computes nothing (zeros for multipoles and fields), to time or count the
//! decomposition alone.

use fmm::backend::{Backend, FarField, PhaseTimes, Plan};
use fmm::expansions::expansion_len;
use fmm::{Fields, FmmError, Sources, Targets};

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
    fn multipoles(&self, plan: &Plan, _: &usize, cells: &[usize]) -> Result<Vec<f64>, FmmError> {
        let len = match plan.far_field {
            FarField::Ppm => fmm::ppm::PseudoParticles::new(plan.order).len(),
            _ => 2 * expansion_len(plan.order),
        };
        Ok(vec![0.0; cells.len() * len])
    }
    fn add_locals(&self, _: &Plan, _: &mut usize, _: &[usize], _: &[f64]) -> Result<(), FmmError> {
        Ok(())
    }
    fn set_multipoles(
        &self,
        _: &Plan,
        _: &mut usize,
        _: &[usize],
        _: &[f64],
    ) -> Result<(), FmmError> {
        Ok(())
    }
}
