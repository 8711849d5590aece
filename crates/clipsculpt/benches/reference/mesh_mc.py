"""Marching cubes of `cargo bench --bench mesh` in scikit-image and VTK, for a side-by-side run.

Same workload: the sphere SDF `0.8 − |p|` sampled on n³ points spanning [−1, 1]³ (n = 128, 256),
iso-level 0; best wall time of 15 (128³) or 7 (256³) runs, as the Rust bench does. Prints one
markdown row per library and size with the vertex and face counts (they should match the Rust
bench's). scikit-image's `marching_cubes` is single-threaded; VTK's `vtkFlyingEdges3D` uses its
SMP backend (all cores unless VTK_SMP_MAX_THREADS says otherwise).

Setup: `python3 -m venv venv/mesh && venv/mesh/bin/pip install numpy scikit-image vtk`.
Run: `venv/mesh/bin/python benches/reference/mesh_mc.py`.
"""

import time

import numpy as np


def grid(n):
    axis = np.linspace(-1.0, 1.0, n, dtype=np.float32)
    z, y, x = np.meshgrid(axis, axis, axis, indexing="ij")
    return (0.8 - np.sqrt(x * x + y * y + z * z)).astype(np.float32)


def best_ms(reps, f):
    best, out = float("inf"), None
    for _ in range(reps):
        t = time.perf_counter()
        out = f()
        best = min(best, (time.perf_counter() - t) * 1e3)
    return best, out


def skimage_mc(vol):
    from skimage.measure import marching_cubes

    verts, faces, _, _ = marching_cubes(vol, level=0.0)
    return len(verts), len(faces)


def vtk_image(vol):
    import vtk
    from vtk.util import numpy_support

    n = vol.shape[0]
    image = vtk.vtkImageData()
    image.SetDimensions(n, n, n)
    image.SetSpacing(2.0 / (n - 1), 2.0 / (n - 1), 2.0 / (n - 1))
    image.SetOrigin(-1.0, -1.0, -1.0)
    data = numpy_support.numpy_to_vtk(vol.ravel(order="C"), deep=True)
    image.GetPointData().SetScalars(data)
    return image


def vtk_mc(image):
    import vtk

    fe = vtk.vtkFlyingEdges3D()
    fe.SetInputData(image)
    fe.SetValue(0, 0.0)
    fe.ComputeNormalsOff()
    fe.ComputeGradientsOff()
    fe.ComputeScalarsOff()
    fe.Update()
    out = fe.GetOutput()
    return out.GetNumberOfPoints(), out.GetNumberOfPolys()


def main():
    import skimage
    import vtk

    print(f"scikit-image {skimage.__version__}, VTK {vtk.vtkVersion.GetVTKVersion()}\n")
    print("| library | grid | best ms | V | F |")
    print("|---|---|---:|---:|---:|")
    for n in (128, 256):
        vol = grid(n)
        reps = 15 if n == 128 else 7
        ms, (v, f) = best_ms(reps, lambda: skimage_mc(vol))
        print(f"| scikit-image marching_cubes | {n}³ | {ms:.1f} | {v} | {f} |")
        image = vtk_image(vol)
        ms, (v, f) = best_ms(reps, lambda: vtk_mc(image))
        print(f"| VTK vtkFlyingEdges3D | {n}³ | {ms:.1f} | {v} | {f} |")


if __name__ == "__main__":
    main()
