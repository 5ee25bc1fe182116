"""Checks predicted label volumes of a scan: each on the scan's own grid and header (shape,
affine, orientation), uint8 labels 0..2 with the label intent, all equal to the first; and the
probability volumes, 4-D with one volume per class summing to 1, equal to the first within 1e-5.

    check_scans.py SCAN LABELS... -- PROBABILITIES...
"""
import sys

import nibabel as nib
import numpy as np


def main(args):
    split = args.index("--")
    scan, labels, probabilities = nib.load(args[0]), args[1:split], args[split + 1:]
    first = None
    for path in labels:
        out = nib.load(path)
        assert out.shape == scan.shape, (path, out.shape, scan.shape)
        assert np.allclose(out.affine, scan.affine, atol=1e-5), (path, out.affine, scan.affine)
        assert out.get_data_dtype() == np.uint8, (path, out.get_data_dtype())
        assert out.header["intent_code"] == 1002, path
        data = np.asarray(out.dataobj)
        assert data.max() <= 2, path
        if first is None:
            first = data
        assert np.array_equal(data, first), f"{path} differs from {labels[0]}"
    first = None
    for path in probabilities:
        out = nib.load(path)
        assert out.shape == scan.shape + (3,), (path, out.shape)
        assert np.allclose(out.affine, scan.affine, atol=1e-5), path
        data = out.get_fdata()
        assert np.allclose(data.sum(axis=3), 1, atol=1e-5), path
        if first is None:
            first = data
        assert np.allclose(data, first, atol=1e-5), f"{path} differs from {probabilities[0]}"
    print(f"ok: {len(labels)} label volumes and {len(probabilities)} probability volumes agree")


if __name__ == "__main__":
    main(sys.argv[1:])
