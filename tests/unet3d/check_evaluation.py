"""Checks `unet3d evaluate`'s JSON against a reference computed here with scipy, as MONAI defines
the metrics: edges as a mask XOR its binary erosion (6-neighbour cross, the volume's border counted
as outside), distances by scipy's exact Euclidean distance transform with the files' spacing,
HD95 the larger of the two directed 95th percentiles (numpy's linear interpolation), the surface
Dice the share of edge voxels within the tolerance of the other surface. Other reports given must
hold the same numbers (another mesh's run). With --every-label the report's classes must be
every label value above 0 that its volumes hold, named by number (evaluate without --classes).

    check_evaluation.py [--every-label] REPORT.json [OTHER.json ...]
"""
import json
import math
import sys

import nibabel as nib
import numpy as np
from scipy import ndimage


def canonical(path):
    image = nib.as_closest_canonical(nib.load(path))
    return np.asarray(image.dataobj), image.header.get_zooms()[:3]


def edges(mask):
    return mask ^ ndimage.binary_erosion(mask, border_value=0)


def scores(predicted, truth, spacing, tolerance):
    both, n_p, n_t = (predicted & truth).sum(), predicted.sum(), truth.sum()
    dice = 2 * both / (n_p + n_t) if n_p + n_t else None
    if n_p == 0 or n_t == 0:
        return dice, None, (0.0 if n_p + n_t else None)
    ep, et = edges(predicted), edges(truth)
    to_t = ndimage.distance_transform_edt(~et, sampling=spacing)[ep]
    to_p = ndimage.distance_transform_edt(~ep, sampling=spacing)[et]
    hd95 = max(np.percentile(to_t, 95), np.percentile(to_p, 95))
    nsd = ((to_t <= tolerance).sum() + (to_p <= tolerance).sum()) / (len(to_t) + len(to_p))
    return dice, hd95, nsd


def close(a, b):
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def every_label(report):
    present = set()
    for case in report["cases"]:
        for path in (case["prediction"], case["label"]):
            present |= set(np.unique(canonical(path)[0]).tolist())
    return [str(int(v)) for v in sorted(present) if v > 0]


def main(paths):
    by_number = paths[0] == "--every-label"
    paths = paths[1:] if by_number else paths
    reports = [json.load(open(p)) for p in paths]
    first = reports[0]
    if by_number:
        want = every_label(first)
        assert first["classes"] == want, ("classes", first["classes"], "labels present", want)
        values = [int(name) for name in first["classes"]]
    else:
        values = range(1, len(first["classes"]) + 1)
    checked = 0
    for case in first["cases"]:
        predicted, spacing = canonical(case["prediction"])
        truth, _ = canonical(case["label"])
        for k, name in zip(values, first["classes"]):
            want = scores(predicted == k, truth == k, spacing, first["tolerance_mm"])
            got = case["metrics"][name]
            for metric, value in zip(("dice", "hd95_mm", "nsd"), want):
                assert close(got[metric], value), (case["case"], name, metric, got[metric], value)
                checked += 1
    for path, other in zip(paths[1:], reports[1:]):
        for a, b in zip(first["cases"], other["cases"]):
            assert a["metrics"] == b["metrics"], f"{path}: case {a['case']} differs"
        assert first["mean"] == other["mean"], f"{path}: the means differ"
    print(f"ok: {checked} scores equal scipy's, {len(reports) - 1} other report(s) identical")


if __name__ == "__main__":
    main(sys.argv[1:])
