"""Checks predicted label volumes of a scan: each on the scan's own grid and header (shape,
affine, orientation; a 4-D scan's channels left out), uint8 labels of the classes with the label
intent, all equal to the first; and the probability volumes, 4-D with one volume per class
summing to 1, equal to the first within 1e-5.

    check_scans.py [--classes N] SCAN LABELS... -- PROBABILITIES...      (N: 3 by default)
"""
import sys

import nibabel as nib
import numpy as np


def main(args):
    classes = 3
    if args[0] == "--classes":
        classes, args = int(args[1]), args[2:]
    split = args.index("--")
    scan, labels, probabilities = nib.load(args[0]), args[1:split], args[split + 1:]
    grid = scan.shape[:3]
    first = None
    for path in labels:
        out = nib.load(path)
        assert out.shape == grid, (path, out.shape, grid)
        assert np.allclose(out.affine, scan.affine, atol=1e-5), (path, out.affine, scan.affine)
        assert out.get_data_dtype() == np.uint8, (path, out.get_data_dtype())
        assert out.header["intent_code"] == 1002, path
        data = np.asarray(out.dataobj)
        assert data.max() < classes, path
        if first is None:
            first = data
        assert np.array_equal(data, first), f"{path} differs from {labels[0]}"
    first = None
    for path in probabilities:
        out = nib.load(path)
        assert out.shape == grid + (classes,), (path, out.shape)
        assert np.allclose(out.affine, scan.affine, atol=1e-5), path
        data = out.get_fdata()
        assert np.allclose(data.sum(axis=3), 1, atol=1e-5), path
        if first is None:
            first = data
        assert np.allclose(data, first, atol=1e-5), f"{path} differs from {probabilities[0]}"
    print(f"ok: {len(labels)} label volumes and {len(probabilities)} probability volumes agree")


if __name__ == "__main__":
    main(sys.argv[1:])
