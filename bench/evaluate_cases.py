"""Cases for the evaluation benchmark: phantom label volumes (from `unet3d generate`) as NIfTI
label files with 0.8 x 0.8 x 2 mm voxels, and predictions made from them the way a network errs:
the organ shifted by a few voxels, the tumours grown by one voxel, some tumour voxels lost.

    evaluate_cases.py OUT_DIR LABELS_0.npy [LABELS_1.npy ...]
"""
import os
import sys

import nibabel as nib
import numpy as np
from scipy import ndimage


def main(out, label_files):
    os.makedirs(os.path.join(out, "labels"), exist_ok=True)
    os.makedirs(os.path.join(out, "predictions"), exist_ok=True)
    affine = np.diag([0.8, 0.8, 2.0, 1.0])
    rng = np.random.default_rng(7)
    for n, path in enumerate(label_files):
        truth = np.load(path).astype(np.uint8)
        organ = np.roll(truth >= 1, shift=(2, -1, 1), axis=(0, 1, 2))
        tumour = ndimage.binary_dilation(truth == 2) & (rng.random(truth.shape) > 0.1)
        predicted = np.where(tumour, 2, np.where(organ, 1, 0)).astype(np.uint8)
        name = f"case_{n:03d}.nii.gz"
        nib.save(nib.Nifti1Image(truth, affine), os.path.join(out, "labels", name))
        nib.save(nib.Nifti1Image(predicted, affine), os.path.join(out, "predictions", name))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
