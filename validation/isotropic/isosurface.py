"""Isosurfaces of a scalar field on a periodic grid, drawn off-screen: the marching cubes of
scikit-image (Lewiner et al. 2003) and matplotlib's 3-D axes (Agg), Lambert-shaded triangles.

The core paper's Fig. 13 shows isosurfaces of the second invariant of the velocity gradient
of both runs at t/T = 10; `paper_report.py` draws them from the cubes of II that `collect`
keeps (`fields.npz`: `vortex_cube`, `spectral_cube`), at one level for both,
`Q = -II / 2 = rms(II of the spectral run)` (vortex cores: `Q > 0`).
"""


def surface(volume, level, spacing, origin=(0.0, 0.0, 0.0), max_faces=250_000):
    """Triangles of the isosurface `volume == level` (volume[i, j, k] at origin + spacing *
    (i, j, k)): vertices (V, 3) in the coordinates of the grid, faces (F, 3), and the
    marching-cubes step (1, or 2, 3 ... where the full resolution gives more than `max_faces`
    triangles: too many for matplotlib). No triangles where the level is outside the values."""
    import numpy as np
    from skimage.measure import marching_cubes

    if not volume.min() < level < volume.max():
        return np.zeros((0, 3)), np.zeros((0, 3), dtype=int), 1
    step = 1
    while True:
        verts, faces, _, _ = marching_cubes(volume, level=level, spacing=spacing,
                                            step_size=step, allow_degenerate=False)
        if len(faces) <= max_faces or step >= 4:
            break
        step += 1
    return verts + np.asarray(origin), faces, step


def mesh_area(verts, faces):
    """Area of a triangle mesh."""
    import numpy as np

    a, b, c = verts[faces[:, 0]], verts[faces[:, 1]], verts[faces[:, 2]]
    return float(0.5 * np.linalg.norm(np.cross(b - a, c - a), axis=1).sum())


def shaded(verts, faces, rgb, light=(0.4, -0.5, 0.77)):
    """Face colours of `rgb` under a directional light (ambient 0.35, Lambert 0.65, both sides
    lit: the surface has no inside here)."""
    import numpy as np

    a, b, c = verts[faces[:, 0]], verts[faces[:, 1]], verts[faces[:, 2]]
    n = np.cross(b - a, c - a)
    n /= np.maximum(np.linalg.norm(n, axis=1, keepdims=True), 1e-300)
    lam = np.abs(n @ (np.asarray(light) / np.linalg.norm(light)))
    shade = 0.35 + 0.65 * lam
    return np.clip(shade[:, None] * np.asarray(rgb)[None, :], 0.0, 1.0)


def plot_isosurfaces(panels, level, spacing, origin, path, title):
    """One 3-D panel per `(name, volume)` of `panels`, the isosurface `volume == level` of each
    (same level, same box, same view), written to `path` (PNG). Returns the number of
    triangles and the marching-cubes step of each panel."""
    import matplotlib.pyplot as plt
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    fig = plt.figure(figsize=(7.2 * len(panels), 7.0))
    info = []
    for i, (name, vol) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1, projection="3d")
        verts, faces, step = surface(vol, level, spacing, origin)
        info.append((name, len(faces), step))
        if len(faces):
            colors = shaded(verts, faces, (0.85, 0.45, 0.15) if i == 0 else (0.2, 0.45, 0.8))
            ax.add_collection3d(Poly3DCollection(verts[faces], facecolors=colors,
                                                 edgecolor="none"))
        lo = origin
        hi = [o + s * (m - 1) for o, s, m in zip(origin, spacing, vol.shape)]
        ax.set_xlim(lo[0], hi[0])
        ax.set_ylim(lo[1], hi[1])
        ax.set_zlim(lo[2], hi[2])
        ax.set_box_aspect((1, 1, 1))
        ax.set_xlabel("x")
        ax.set_ylabel("y")
        ax.set_zlabel("z")
        ax.view_init(elev=24, azim=-58)
        sub = f", marching-cubes step {step}" if step > 1 else ""
        ax.set_title(f"{name}: {len(faces)} triangles{sub}")
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return info
