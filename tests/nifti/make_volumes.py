"""Writes the NIfTI files the NIfTI tests read, with nibabel (Debian: python3-nibabel), so that
meshtensor is checked against files it did not write itself, and the values nibabel reads from
them: <name>.file.npy (the file's axis order), <name>.canonical.npy (nibabel's
as_closest_canonical), <name>.json (affines, sizes).

    make_volumes.py OUT_DIR
"""
import gzip
import json
import math
import os
import sys

import nibabel as nib
import numpy as np


def rotation(axis, degrees):
    c, s = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    m = np.eye(3)
    a, b = [(1, 2), (0, 2), (0, 1)][axis]
    m[a, a], m[a, b], m[b, a], m[b, b] = c, -s, s, c
    return m


def affine(directions, spacing, origin):
    out = np.eye(4)
    out[:3, :3] = directions * np.asarray(spacing)[None, :]
    out[:3, 3] = origin
    return out


def save(out, name, data, aff, version=1, endianness="<", slope=None, inter=None, qform_only=False):
    cls = nib.Nifti2Image if version == 2 else nib.Nifti1Image
    header = (nib.Nifti2Header if version == 2 else nib.Nifti1Header)(endianness=endianness)
    header.set_data_dtype(data.dtype)
    image = cls(data, None, header)
    if qform_only:
        image.set_qform(aff, code=1)
        image.set_sform(None, code=0)
    else:
        image.set_sform(aff, code=2)
        image.set_qform(aff, code=1)
    if slope is not None:
        image.header.set_slope_inter(slope, inter)
    path = os.path.join(out, name)
    nib.save(image, path)
    # What nibabel reads back from the file is the reference.
    back = nib.load(path)
    base = name.split(".nii")[0]
    np.save(os.path.join(out, base + ".file.npy"), np.ascontiguousarray(back.get_fdata(), dtype=np.float64))
    canonical = nib.as_closest_canonical(back)
    np.save(os.path.join(out, base + ".canonical.npy"),
            np.ascontiguousarray(canonical.get_fdata(), dtype=np.float64))
    with open(os.path.join(out, base + ".json"), "w") as f:
        json.dump({"file": name, "shape": list(back.shape[:3]),
                   "affine": back.affine.tolist(),
                   "canonical_shape": list(canonical.shape[:3]),
                   "canonical_affine": canonical.affine.tolist(),
                   "codes": "".join(nib.aff2axcodes(back.affine))}, f)
    return path


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    # CT-like int16 with a slope and intercept, oblique (20 degrees about z), axes L, P, S.
    ct = rng.integers(-1200, 3000, size=(13, 10, 7)).astype(np.int16)
    lps = np.diag([-1.0, -1.0, 1.0]) @ rotation(2, 20)
    save(out, "ct_int16.nii.gz", ct, affine(lps, (0.8, 0.9, 2.5), (40, 30, -60)),
         slope=0.5, inter=-1024.0)
    # uint8 labels, qform only, axes permuted: file i is S, j is R, k is P (an oblique tilt too).
    labels = rng.integers(0, 3, size=(6, 11, 9)).astype(np.uint8)
    psr = np.array([[0.0, 1, 0], [0, 0, -1], [1, 0, 0]]) @ rotation(0, 8)
    save(out, "labels_uint8.nii", labels, affine(psr, (3.0, 1.0, 1.5), (-5, 7, 11)),
         qform_only=True)
    # int32, NIfTI-2, compressed; identity-like RAS.
    save(out, "int32_nifti2.nii.gz", rng.integers(-100000, 100000, size=(5, 8, 10)).astype(np.int32),
         affine(np.eye(3), (1.0, 1.0, 1.0), (0, 0, 0)), version=2)
    # float32 stored as a 4-D file with one volume, axes R, I, A (y and z swapped, z reversed).
    vol = rng.normal(size=(7, 9, 5, 1)).astype(np.float32)
    ria = np.array([[1.0, 0, 0], [0, 0, 1], [0, -1, 0]])
    save(out, "float32_4d.nii", vol, affine(ria, (1.2, 0.7, 0.7), (1, 2, 3)))
    # float64, big-endian, NIfTI-2, uncompressed.
    save(out, "float64_big.nii", rng.normal(size=(6, 5, 4)).astype(np.float64) * 1e3,
         affine(rotation(1, -15), (2.0, 2.0, 2.0), (-3, 4, -5)), version=2, endianness=">")

    # Bad inputs.
    with open(os.path.join(out, "ct_int16.nii.gz"), "rb") as f:
        packed = f.read()
    raw = gzip.decompress(packed)
    with open(os.path.join(out, "bad_truncated.nii"), "wb") as f:
        f.write(raw[: len(raw) - 100])
    with open(os.path.join(out, "bad_truncated.nii.gz"), "wb") as f:
        f.write(gzip.compress(raw)[: len(packed) * 2 // 3])
    damaged = bytearray(packed)
    for i in range(len(damaged) * 3 // 4, len(damaged) * 3 // 4 + 64):
        damaged[i] ^= 0x5A
    with open(os.path.join(out, "bad_corrupt.nii.gz"), "wb") as f:
        f.write(bytes(damaged))
    with open(os.path.join(out, "bad_not_nifti.nii"), "wb") as f:
        f.write(b"this is a text file, not a NIfTI volume\n" * 20)
    with open(os.path.join(out, "bad_short.nii"), "wb") as f:
        f.write(raw[:100])
    image = nib.Nifti1Image(np.zeros((4, 4, 4), dtype=np.complex64), np.eye(4))
    nib.save(image, os.path.join(out, "bad_complex.nii"))
    image = nib.Nifti1Image(np.zeros((6, 5), dtype=np.float32), np.eye(4))
    nib.save(image, os.path.join(out, "bad_2d.nii"))
    image = nib.Nifti1Image(np.zeros((4, 4, 4, 3), dtype=np.float32), np.eye(4))
    nib.save(image, os.path.join(out, "bad_4d.nii.gz"))
    with open(os.path.join(out, "bad_name.img"), "wb") as f:
        f.write(raw)


if __name__ == "__main__":
    main(sys.argv[1])
