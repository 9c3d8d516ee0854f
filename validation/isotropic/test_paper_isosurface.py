"""Tests of isosurface.py: the marching cubes wired to the grid's coordinates (a sphere of
known radius and area), the shading, and the figure.

    python3 -m unittest discover -s validation/isotropic -p 'test_paper*.py'
"""
import math
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import isosurface  # noqa: E402


class Isosurface(unittest.TestCase):
    def sphere(self, n=48, radius=1.1, centre=(0.3, -0.2, 0.1)):
        import numpy as np

        origin, h = -2.0, 4.0 / (n - 1)
        x = origin + h * np.arange(n)
        X, Y, Z = np.meshgrid(x, x, x, indexing="ij")
        f = radius - np.sqrt((X - centre[0]) ** 2 + (Y - centre[1]) ** 2 + (Z - centre[2]) ** 2)
        return f, origin, h

    def test_a_sphere_has_its_radius_and_area(self):
        import numpy as np

        f, o, h = self.sphere()
        verts, faces, step = isosurface.surface(f, 0.0, (h, h, h), (o, o, o))
        self.assertEqual(step, 1)
        r = np.linalg.norm(verts - np.array([0.3, -0.2, 0.1]), axis=1)
        self.assertLess(np.max(np.abs(r - 1.1)), 0.02 * 1.1)
        area = isosurface.mesh_area(verts, faces)
        self.assertLess(abs(area / (4 * math.pi * 1.1 ** 2) - 1), 0.02)
        # a coarser marching-cubes step where the faces are too many, the same sphere
        v2, f2, step2 = isosurface.surface(f, 0.0, (h, h, h), (o, o, o), max_faces=len(faces) // 2)
        self.assertGreater(step2, 1)
        self.assertLess(len(f2), len(faces))
        self.assertLess(abs(isosurface.mesh_area(v2, f2) / area - 1), 0.05)
        # a level outside the values: no triangles, no error
        v0, f0, _ = isosurface.surface(f, 10.0, (h, h, h))
        self.assertEqual(len(f0), 0)

    def test_shading_and_figure(self):
        import numpy as np

        f, o, h = self.sphere(24)
        verts, faces, _ = isosurface.surface(f, 0.0, (h, h, h), (o, o, o))
        c = isosurface.shaded(verts, faces, (0.2, 0.45, 0.8))
        self.assertEqual(c.shape, (len(faces), 3))
        self.assertTrue(np.all(c >= 0.35 * 0.2 - 1e-12) and np.all(c <= 1.0))
        self.assertGreater(np.ptp(c[:, 2]), 0.3)  # lit and unlit sides differ
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "iso.png")
            info = isosurface.plot_isosurfaces([("a", f), ("b", f * 0.5)], 0.0, (h, h, h),
                                               (o, o, o), p, "test")
            self.assertEqual([x[0] for x in info], ["a", "b"])
            self.assertTrue(all(x[1] > 100 for x in info))
            with open(p, "rb") as fh:
                self.assertEqual(fh.read(8)[1:4], b"PNG")


if __name__ == "__main__":
    unittest.main()
