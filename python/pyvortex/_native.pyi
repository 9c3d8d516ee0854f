"""Type stubs of the compiled module ``pyvortex._native`` (Rust, PyO3). Use the wrappers of
``pyvortex``, which convert the inputs to float64 arrays and document the arguments."""
from typing import Any, Dict, Optional, Tuple

import numpy as np
import numpy.typing as npt

DEFAULT_ORDER: int
DEFAULT_THETA: float
DEFAULT_LEAF_SIZE: int
DEFAULT_BOX_LENGTH: float
DEFAULT_IMAGE_LEVELS: int
__version__: str

def evaluate(
    x: npt.NDArray[np.float64],
    alpha: npt.NDArray[np.float64],
    sigma: npt.NDArray[np.float64],
    targets: Optional[npt.NDArray[np.float64]],
    method: str,
    order: int,
    theta: float,
    leaf_size: int,
    core_cutoff: Optional[float],
    periodic: bool,
    box_length: float,
    image_levels: int,
    backend: str,
    grid: str,
    device: int,
    threads: Optional[int],
) -> Tuple[
    npt.NDArray[np.float64],
    Optional[npt.NDArray[np.float64]],
    Dict[str, Any],
]: ...
def particles(
    n: int, seed: int, periodic: bool, distribution: str
) -> Tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]: ...
def read_checkpoint(path: str) -> Dict[str, Any]: ...
