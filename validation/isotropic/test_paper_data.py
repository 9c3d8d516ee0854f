"""Tests of paper_data.py: the blob-filter arithmetic against a synthetic spectrum whose filtered
form is known in closed form, the second invariant against analytic velocity gradients, and the
derived configurations of the Section 5.1 reproduction.

    python3 -m unittest discover -s validation/isotropic -p 'test_paper*.py'
"""
import math
import os
import sys
import tomllib
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paper_data as pd  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def synthetic(k, k0):
    """E(k) = k^4 exp(-2 (k / k0)^2): times exp(-k^2 sigma^2) it is the same form with
    2 / k0'^2 = 2 / k0^2 + sigma^2."""
    return [x ** 4 * math.exp(-2.0 * (x / k0) ** 2) for x in k]


class BlobFilter(unittest.TestCase):
    k = [float(x) for x in range(0, 129)]

    def test_filtered_synthetic_spectrum_is_closed_form(self):
        for k0, sigma in ((4.0, 0.0196), (4.0, 0.0236), (7.5, 0.05)):
            filtered = [e * f for e, f in zip(synthetic(self.k, k0), pd.blob_filter(self.k, sigma))]
            k0f = math.sqrt(2.0 / (2.0 / k0 ** 2 + sigma ** 2))
            exact = synthetic(self.k, k0f)
            for a, b in zip(filtered, exact):
                self.assertLessEqual(abs(a - b), 1e-12 * max(abs(b), 1e-300))
            # the filter removes a visible part at high k: the check is not vacuous
            d, where = pd.max_rel_diff(self.k, filtered, synthetic(self.k, k0), 40)
            self.assertEqual(where, 40.0)
            self.assertAlmostEqual(d, 1.0 - math.exp(-(40 * sigma) ** 2), places=12)

    def test_gap_share(self):
        es = synthetic(self.k, 4.0)
        sigma = 0.02
        for sigma_v in (0.02, 0.03, 0.045):
            ev = [e * math.exp(-(x * sigma_v) ** 2) for x, e in zip(self.k, es)]
            share = pd.gap_share(self.k, ev, es, sigma, 10, 42)
            self.assertAlmostEqual(share, (sigma / sigma_v) ** 2, places=10)
        # no gap: no share
        self.assertIsNone(pd.gap_share(self.k, es, es, sigma, 10, 42))
        # the whole gap is the filter: the filtered spectrum equals the vortex one
        ev = [e * f for e, f in zip(es, pd.blob_filter(self.k, sigma))]
        ef = [e * f for e, f in zip(es, pd.blob_filter(self.k, sigma))]
        self.assertLess(pd.max_rel_diff(self.k, ev, ef, 42)[0], 1e-14)

    def test_max_rel_diff_finds_the_worst_k(self):
        es = synthetic(self.k, 4.0)
        ev = [e * (1.0 + 0.01 * x) for x, e in zip(self.k, es)]
        d, where = pd.max_rel_diff(self.k, ev, es, 10)
        self.assertAlmostEqual(d, 0.10, places=12)
        self.assertEqual(where, 10.0)


class SecondInvariant(unittest.TestCase):
    # u_c = amp_c sin(s k_c . x + phase_c), s = 2 pi / L: one Fourier mode per component
    modes = [((1, 2, 1), 0.3), ((1, -1, 3), 1.1), ((2, 0, 1), -0.4)]
    amps = [1.0, 0.7, -1.3]

    def fields(self, n, length, sigma=None):
        import numpy as np

        s = 2 * math.pi / length
        x = -0.5 * length + length * np.arange(n) / n
        X, Y, Z = np.meshgrid(x, x, x, indexing="ij")
        u = np.zeros((n, n, n, 3))
        g = [[None] * 3 for _ in range(3)]
        for c, ((kx, ky, kz), ph) in enumerate(self.modes):
            f = self.amps[c]
            if sigma:
                f *= math.exp(-0.5 * sigma ** 2 * s ** 2 * (kx ** 2 + ky ** 2 + kz ** 2))
            arg = s * (kx * X + ky * Y + kz * Z) + ph
            u[..., c] = f * np.sin(arg)
            for j, kj in enumerate((kx, ky, kz)):
                g[c][j] = f * s * kj * np.cos(arg)
        ii = sum(g[i][j] * g[j][i] for i in range(3) for j in range(3))
        return u, ii

    def test_against_analytic_gradients(self):
        import numpy as np

        for n, length in ((16, 2 * math.pi), (12, 3.0)):
            u, exact = self.fields(n, length)
            got = pd.second_invariant(u, length)
            self.assertGreater(np.abs(exact).max(), 0.5)
            self.assertLess(np.abs(got - exact).max(), 1e-10 * np.abs(exact).max())

    def test_blob_filtered(self):
        import numpy as np

        length, sigma = 2 * math.pi, 0.3
        u, _ = self.fields(16, length)
        _, exact = self.fields(16, length, sigma)
        got = pd.second_invariant(u, length, sigma)
        self.assertLess(np.abs(got - exact).max(), 1e-10 * np.abs(exact).max())

    def test_field_stats(self):
        import numpy as np

        a = np.sin(np.linspace(0, 6, 1000))
        s = pd.field_stats(1.1 * a, a)
        self.assertAlmostEqual(s["rel_l2"], 0.1, places=12)
        self.assertAlmostEqual(s["correlation"], 1.0, places=12)


class Configs(unittest.TestCase):
    def shipped(self):
        with open(os.path.join(ROOT, "runs/vortex-isotropic-256.toml")) as f:
            v = f.read()
        with open(os.path.join(ROOT, "runs/isotropic-256.toml")) as f:
            s = f.read()
        return v, s

    def test_times(self):
        # T = 0.61245: 10 T = 6.1245 -> the vortex step at t = 6.13
        self.assertEqual(pd.comparison_times(pd.T_256, 0.01), [0.62, 1.84, 3.68, 6.13])
        self.assertEqual(pd.comparison_times(0.5, 0.1, (1, 2)), [0.5, 1.0])

    def test_paper_configs_change_only_the_outputs_and_t_end(self):
        v, s = self.shipped()
        vt, st, times = pd.paper_configs(v, s, pd.T_256)
        v0, v1 = tomllib.loads(v), tomllib.loads(vt)
        s0, s1 = tomllib.loads(s), tomllib.loads(st)
        self.assertEqual(v1["t_end"], 6.13)
        self.assertEqual(s1["t_end"], 6.13)
        self.assertEqual(s1["spectrum_times"], [0.0] + times)
        self.assertEqual(s1["field_times"], [0.0, 6.13])
        self.assertEqual(v1["output"]["diagnostics_interval"], pd.T_256)
        for key in ("nu", "dt", "domain", "evaluation", "initial", "reinterpolation"):
            self.assertEqual(v0[key], v1[key], key)
        for key in ("n", "nu", "dealias", "cfl", "dt_max", "initial", "diagnostics_interval"):
            self.assertEqual(s0[key], s1[key], key)
        # kept outputs of the shipped file
        self.assertEqual(v1["output"]["checkpoint_every"], v0["output"]["checkpoint_every"])

    def test_set_key_inserts_where_missing(self):
        text = "a = 1\n\n[x]\nb = 2\n\n[y]\nc = 3\n"
        out = pd.set_key(pd.set_key(pd.set_key(text, "x", "d", 4.5), None, "e", [1.0, 2.0]),
                         "z", "f", "g")
        doc = tomllib.loads(out)
        self.assertEqual(doc, {"a": 1, "e": [1.0, 2.0], "x": {"b": 2, "d": 4.5},
                               "y": {"c": 3}, "z": {"f": "g"}})
        self.assertEqual(tomllib.loads(pd.set_key(text, "y", "c", 7))["y"]["c"], 7)


if __name__ == "__main__":
    unittest.main()
