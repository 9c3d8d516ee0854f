"""A checkpoint of several ranks (a manifest and one piece per rank) read by
`pyvortex.read_checkpoint`: the whole state in global-id order, the state one rank writes for
the same run (round-off apart: the evaluations of one and several ranks differ in the last
bits), and a missing or corrupt piece refused naming it."""
import os

import numpy as np
import pytest

import pyvortex as pv
from conftest import run_cli

# a free-space ring without re-interpolation: the runs of 1 and 3 ranks agree to round-off
RING_TOML = """
nu = 0.001
dt = 0.05
t_end = 0.1
[evaluation]
method = "fmm"
order = 4
leaf_size = 32
[initial]
kind = "ring"
radius = 1.0
circulation = 1.0
core = 0.3
spacing = 0.3
[reinterpolation]
ratio = 0.0
every = 0
strain = 0.0
[output]
diagnostics_every = 1
progress = false
plots = false
"""

ARRAYS = ("position", "strength", "sigma", "sigma0", "previous_velocity",
          "previous_stretching")


@pytest.fixture(scope="module")
def rings(tmp_path_factory, vortex_bin, ranks_run_bin):
    d = tmp_path_factory.mktemp("pieces")
    (d / "ring.toml").write_text(RING_TOML)
    run_cli(vortex_bin, "run", d / "ring.toml", "--out", d / "one", "--backend", "cpu",
            "--threads", "2")
    run_cli(ranks_run_bin, d / "ring.toml", "--ranks", "3", "--out", d / "three")
    return d / "one", d / "three"


def test_a_manifest_reads_as_the_one_rank_checkpoint(rings):
    one, three = rings
    pieces = sorted(f for f in os.listdir(three) if f.startswith("checkpoint-s"))
    assert len(pieces) == 3 and not (three / "checkpoint.bin").exists(), pieces
    run = pv.load_run(three)
    assert run.checkpoint == str(three / "checkpoint.manifest")
    a = pv.read_checkpoint(one / "checkpoint.bin")
    b = pv.read_checkpoint(run.checkpoint)
    c = pv.read_checkpoint(three)  # the directory: its current checkpoint
    for k in ("solver", "step", "t", "step_reset", "reinterpolations", "config"):
        assert a[k] == b[k] == c[k], k
    assert b["step"] == 2 and abs(b["initial_energy"] / a["initial_energy"] - 1) < 1e-12
    n = a["position"].shape[0]
    assert n > 100 and b["previous_velocity"] is not None
    for k in ARRAYS:
        x, y = a[k], b[k]
        assert x.shape == y.shape and np.array_equal(y, c[k]), k
        # particle i of one rank is particle i of three: the global-id order
        scale = np.abs(x).max()
        assert np.abs(x - y).max() <= 1e-12 * scale, (k, np.abs(x - y).max() / scale)


def test_a_missing_or_corrupt_piece_is_refused_naming_it(rings, tmp_path):
    _, three = rings
    for f in os.listdir(three):
        (tmp_path / f).write_bytes((three / f).read_bytes())
    pieces = sorted(f for f in os.listdir(tmp_path) if f.startswith("checkpoint-s"))
    last = [f for f in pieces if f.startswith("checkpoint-s00000002")]
    assert len(last) == 3, pieces
    p = tmp_path / last[1]
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 1
    p.write_bytes(bytes(b))
    with pytest.raises(ValueError, match=f"{last[1]}.*checksum mismatch"):
        pv.read_checkpoint(tmp_path / "checkpoint.manifest")
    p.unlink()
    with pytest.raises(ValueError, match=f"{last[1]}.*missing"):
        pv.read_checkpoint(tmp_path)
