"""Checks with nibabel the NIfTI files test_nifti wrote: the input's geometry and header kept
(affines, qform and sform codes, voxel sizes, units), the voxels in the input's axis order, label
intent and display range, and 4-D class volumes in canonical order.

    verify_outputs.py CASES_DIR
"""
import os
import sys

import nibabel as nib
import numpy as np


def same_geometry(out, source):
    a, b = out.header, source.header
    for field in ("qform_code", "sform_code", "xyzt_units"):
        assert a[field] == b[field], f"{field}: {a[field]} != {b[field]}"
    assert np.allclose(a["pixdim"][1:4], b["pixdim"][1:4]), (a["pixdim"], b["pixdim"])
    assert np.allclose(out.affine, source.affine, atol=1e-5), (out.affine, source.affine)
    assert np.allclose(out.get_qform(), source.get_qform(), atol=1e-5)
    if b["sform_code"] > 0:
        assert np.allclose(out.get_sform(), source.get_sform(), atol=1e-5)


def main(cases):
    failures = []

    def check(name, test):
        try:
            test()
            print(f"ok: {name}")
        except AssertionError as e:
            failures.append(f"{name}: {e}")

    def ct():
        out = nib.load(os.path.join(cases, "out_ct_float32.nii.gz"))
        source = nib.load(os.path.join(cases, "ct_int16.nii.gz"))
        same_geometry(out, source)
        assert out.get_data_dtype() == np.float32, out.get_data_dtype()
        assert np.array_equal(out.get_fdata(), source.get_fdata())

    def labels():
        out = nib.load(os.path.join(cases, "out_labels.nii"))
        source = nib.load(os.path.join(cases, "labels_uint8.nii"))
        same_geometry(out, source)
        assert out.get_data_dtype() == np.uint8
        assert out.header["intent_code"] == 1002, out.header["intent_code"]
        assert out.header["descrip"].tobytes().rstrip(b"\0") == b"labels again"
        assert out.header["cal_max"] == 2
        assert np.array_equal(np.asarray(out.dataobj), np.asarray(source.dataobj))

    def scores():
        out = nib.load(os.path.join(cases, "out_scores.nii.gz"))
        source = nib.load(os.path.join(cases, "labels_uint8.nii"))
        same_geometry(out, source)
        assert out.shape == source.shape + (3,), out.shape
        canonical = nib.as_closest_canonical(out).get_fdata()
        x, y, z, c = np.indices(canonical.shape)
        assert np.array_equal(canonical, 100 * c + 10 * x + y - z)

    check("float32 volume in the input's geometry", ct)
    check("uint8 labels with the label intent", labels)
    check("4-D class volumes", scores)
    leftovers = [f for f in os.listdir(cases) if ".partial" in f]
    if leftovers:
        failures.append(f"temporary files left behind: {leftovers}")
    if failures:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1])
