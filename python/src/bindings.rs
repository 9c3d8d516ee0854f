//! The `pyvortex._native` module: numpy arrays in (read in place, float64), numpy arrays out
//! (the engine's buffers handed over without a copy), the GIL released while the engine runs.
//! Errors become Python exceptions: `ValueError` for bad input (the messages of `vortex eval`),
//! `RuntimeError` for a backend that cannot run.

use crate::checkpoints::{self, AnyCheckpoint};
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::borrow::Cow;
use std::path::PathBuf;
use vortex_engine::EngineError;
use vortex_fmm::planner::Cause;
use vortex_fmm::testsets::{generate, Distribution};
use vortex_fmm::{BackendChoice, GridChoice, Method};

/// The Python exception of an engine error: `ValueError` for bad input (a state placement that
/// does not apply included) and for requests the planner refuses as such (the uniform grid for
/// separate targets, another method, a clustered set), `RuntimeError` for what the machine
/// cannot do (no GPU) and device failures. A refusal names the argument that asked for it
/// (`grid="uniform"`, `backend="cuda"`).
fn to_py(e: EngineError, grid: GridChoice, backend: BackendChoice) -> PyErr {
    match e {
        EngineError::Input(_) | EngineError::State(_) => PyValueError::new_err(e.to_string()),
        EngineError::Fmm(vortex_fmm::FmmError::Backend(_)) => {
            PyRuntimeError::new_err(e.to_string())
        }
        EngineError::Fmm(_) => PyValueError::new_err(e.to_string()),
        EngineError::Refused(r) => {
            let arg = if grid == GridChoice::Uniform && r.reason.contains("uniform grid") {
                format!("grid=\"{grid}\"")
            } else {
                format!("backend=\"{backend}\"")
            };
            let msg = format!("{arg}: {r}");
            match r.cause {
                Cause::Machine => PyRuntimeError::new_err(msg),
                Cause::Request => PyValueError::new_err(msg),
            }
        }
        EngineError::Domain(_) | EngineError::Backend(_) => PyRuntimeError::new_err(e.to_string()),
    }
}

/// The values of an array in row-major order: the numpy buffer itself when it is
/// C-contiguous, else a copy.
fn values<'a>(a: &'a PyReadonlyArrayDyn<'_, f64>) -> Cow<'a, [f64]> {
    // (`as_slice` also accepts Fortran order, whose buffer is not in row-major order)
    match a.as_slice() {
        Ok(s) if a.is_c_contiguous() => Cow::Borrowed(s),
        _ => Cow::Owned(a.as_array().iter().copied().collect()),
    }
}

/// Velocity, stretching (None at plain targets) and the phase times of one evaluation.
type EvalOutput<'py> = (
    Bound<'py, PyArray2<f64>>,
    Option<Bound<'py, PyArray2<f64>>>,
    Bound<'py, PyDict>,
);

/// Positions, strengths and core radii of a particle set.
type ParticleArrays<'py> = (
    Bound<'py, PyArray2<f64>>,
    Bound<'py, PyArray2<f64>>,
    Bound<'py, PyArray1<f64>>,
);

fn vectors<'py>(py: Python<'py>, v: Vec<[f64; 3]>) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let n = v.len();
    v.into_flattened().into_pyarray(py).reshape([n, 3])
}

/// Velocity and stretching (see `pyvortex.evaluate`, which converts the inputs and documents
/// the arguments).
#[pyfunction]
#[pyo3(signature = (x, alpha, sigma, targets, method, order, theta, leaf_size, core_cutoff,
                    periodic, box_length, image_levels, backend, grid, device, threads))]
#[allow(clippy::too_many_arguments)]
fn evaluate<'py>(
    py: Python<'py>,
    x: PyReadonlyArrayDyn<'py, f64>,
    alpha: PyReadonlyArrayDyn<'py, f64>,
    sigma: PyReadonlyArrayDyn<'py, f64>,
    targets: Option<PyReadonlyArrayDyn<'py, f64>>,
    method: &str,
    order: usize,
    theta: f64,
    leaf_size: usize,
    core_cutoff: Option<f64>,
    periodic: bool,
    box_length: f64,
    image_levels: usize,
    backend: &str,
    grid: &str,
    device: usize,
    threads: Option<usize>,
) -> PyResult<EvalOutput<'py>> {
    let method: Method = method.parse().map_err(PyValueError::new_err)?;
    let choice: BackendChoice = backend.parse().map_err(PyValueError::new_err)?;
    let grid: GridChoice = grid.parse().map_err(PyValueError::new_err)?;
    let params = vortex_engine::eval_params(
        method,
        order,
        theta,
        leaf_size,
        // pyvortex.evaluate takes the Gaussian core (`vortex eval --core` the others)
        vortex_fmm::kernel::CoreOrder::Second,
        core_cutoff,
        grid,
        periodic.then_some((box_length, image_levels)),
    );
    let (xs, al, sg) = (values(&x), values(&alpha), values(&sigma));
    let (xsh, alsh, sgsh) = (x.shape(), alpha.shape(), sigma.shape());
    let tv = targets.as_ref().map(|t| (values(t), t.shape()));
    let with_stretching = tv.is_none();
    let run = py
        .detach(|| {
            let sources =
                vortex_engine::input::sources_from_arrays((&xs, xsh), (&al, alsh), (&sg, sgsh))?;
            let targets = match &tv {
                Some((t, shape)) => Some(vortex_engine::input::targets_from_array(
                    "targets",
                    (t, shape),
                )?),
                None => None,
            };
            crate::evaluate(
                choice,
                grid,
                device,
                &params,
                &sources,
                targets.as_ref(),
                threads,
            )
        })
        .map_err(|e| to_py(e, grid, choice))?;
    let times = PyDict::new(py);
    for (k, v) in run.evaluation.times.entries() {
        times.set_item(k, v)?;
    }
    times.set_item("backend", run.backend)?;
    times.set_item("engine", format!("{:?}", run.choice.engine))?;
    times.set_item("planner", run.choice.reasons)?;
    let f = run.evaluation.fields;
    let velocity = vectors(py, f.velocity)?;
    let stretching = if with_stretching {
        Some(vectors(py, f.stretching)?)
    } else {
        None
    };
    Ok((velocity, stretching, times))
}

/// A test particle set of `vortex_fmm::testsets` (the sets of `vortex particles`).
#[pyfunction]
#[pyo3(signature = (n, seed, periodic, distribution))]
fn particles<'py>(
    py: Python<'py>,
    n: usize,
    seed: u64,
    periodic: bool,
    distribution: &str,
) -> PyResult<ParticleArrays<'py>> {
    if n == 0 {
        return Err(PyValueError::new_err("n must be at least 1"));
    }
    let dist: Distribution = distribution.parse().map_err(PyValueError::new_err)?;
    let s = py.detach(|| generate(dist, n, seed, periodic));
    Ok((
        vectors(py, s.position)?,
        vectors(py, s.strength)?,
        s.sigma.into_pyarray(py),
    ))
}

/// A checkpoint of either solver as a dict (see `pyvortex.read_checkpoint`).
#[pyfunction]
fn read_checkpoint(py: Python<'_>, path: PathBuf) -> PyResult<Bound<'_, PyDict>> {
    let ck = py
        .detach(|| checkpoints::read(&path))
        .map_err(PyValueError::new_err)?;
    let d = PyDict::new(py);
    match ck {
        AnyCheckpoint::Vortex(c) => {
            let s = c.state;
            d.set_item("solver", "vortex")?;
            d.set_item("step", s.step)?;
            let dt = checkpoints::config_dt(&c.config);
            d.set_item("dt", dt)?;
            d.set_item("t", dt.map(|dt| s.step as f64 * dt))?;
            d.set_item("step_reset", s.step_reset)?;
            d.set_item("reinterpolations", s.reinterpolations)?;
            d.set_item("initial_energy", c.initial_energy)?;
            d.set_item("config", c.config)?;
            let p = s.particles;
            d.set_item("position", vectors(py, p.position)?)?;
            d.set_item("strength", vectors(py, p.strength)?)?;
            d.set_item("sigma", p.sigma.into_pyarray(py))?;
            d.set_item("sigma0", p.sigma0.into_pyarray(py))?;
            match s.previous {
                Some(f) => {
                    d.set_item("previous_velocity", vectors(py, f.velocity)?)?;
                    d.set_item("previous_stretching", vectors(py, f.stretching)?)?;
                }
                None => {
                    d.set_item("previous_velocity", py.None())?;
                    d.set_item("previous_stretching", py.None())?;
                }
            }
        }
        AnyCheckpoint::Spectral(c) => {
            let n = c.n;
            d.set_item("solver", "spectral")?;
            d.set_item("n", n)?;
            d.set_item("nu", c.nu)?;
            d.set_item("dealias", format!("{:?}", c.dealias))?;
            d.set_item("t", c.t)?;
            d.set_item("step", c.steps)?;
            let field = py.detach(|| c.state().to_physical());
            let u: Vec<f64> = field.u.into_iter().flatten().collect();
            let u = u.into_pyarray(py).reshape([3, n, n, n])?;
            d.set_item("velocity", u)?;
            let half: Vec<f64> = c.data;
            let uhat = half
                .into_pyarray(py)
                .reshape([3, n, n, n / 2 + 1, 2])?
                .into_any();
            d.set_item("velocity_hat_re_im", uhat)?;
        }
    }
    Ok(d)
}

/// The module `pyvortex._native`.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(particles, m)?)?;
    m.add_function(wrap_pyfunction!(read_checkpoint, m)?)?;
    m.add("DEFAULT_ORDER", vortex_engine::DEFAULT_ORDER)?;
    m.add("DEFAULT_THETA", vortex_engine::default_theta())?;
    m.add("DEFAULT_LEAF_SIZE", vortex_engine::DEFAULT_LEAF_SIZE)?;
    m.add("DEFAULT_BOX_LENGTH", vortex_engine::DEFAULT_BOX_LENGTH)?;
    m.add("DEFAULT_IMAGE_LEVELS", vortex_engine::DEFAULT_IMAGE_LEVELS)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
