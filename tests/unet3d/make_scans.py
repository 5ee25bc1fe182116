"""Turns phantom volumes (.npy, HU, from `unet3d generate`) into a folder of NIfTI scans the way
CT data come: LiTS names, int16 with a scale slope and intercept, axes stored L, P, S with 0.8 x
0.8 x 2 mm voxels, gz and not; a Medical Segmentation Decathlon dataset of two MRI-like channels
(4-D files, a dataset.json), the same test case as nnU-Net's one file per channel; label volumes
of more classes; and a few broken folders for the error tests.

    make_scans.py WORK VOLUME_0.npy LABELS_0.npy VOLUME_1.npy LABELS_1.npy ...
"""
import json
import os
import shutil
import sys

import nibabel as nib
import numpy as np


def lps_affine(spacing):
    return np.array([[-spacing[0], 0, 0, 30.0], [0, -spacing[1], 0, 20.0],
                     [0, 0, spacing[2], -40.0], [0, 0, 0, 1]])


def write_pair(folder, n, hu, labels, gz):
    aff = lps_affine((0.8, 0.8, 2.0))
    # Stored as int16 with slope 0.5 and intercept -1024 (HU = 0.5 * stored - 1024), rounded.
    stored = np.round((hu + 1024.0) / 0.5).astype(np.int16)
    image = nib.Nifti1Image(stored, aff)
    image.header.set_slope_inter(0.5, -1024.0)
    ext = ".nii.gz" if gz else ".nii"
    nib.save(image, os.path.join(folder, f"volume-{n}{ext}"))
    nib.save(nib.Nifti1Image(labels.astype(np.uint8), aff),
             os.path.join(folder, f"segmentation-{n}.nii"))


def main(work, pairs):
    scans = os.path.join(work, "scans")
    os.makedirs(scans, exist_ok=True)
    for n in range(len(pairs) // 2):
        hu, labels = np.load(pairs[2 * n]), np.load(pairs[2 * n + 1])
        write_pair(scans, n, hu, labels, gz=n % 2 == 0)
    # Broken folders.
    os.makedirs(os.path.join(work, "empty"), exist_ok=True)
    unlabelled = os.path.join(work, "unlabelled")
    os.makedirs(unlabelled, exist_ok=True)
    shutil.copy(os.path.join(scans, "volume-0.nii.gz"), unlabelled)
    mismatch = os.path.join(work, "mismatch")
    os.makedirs(mismatch, exist_ok=True)
    with open(os.path.join(mismatch, "pairs.csv"), "w") as f:
        f.write("image,label\n")
        f.write(f"{os.path.join(scans, 'volume-0.nii.gz')},{os.path.join(scans, 'segmentation-1.nii')}\n")
        f.write(f"{os.path.join(scans, 'volume-1.nii')},{os.path.join(scans, 'segmentation-1.nii')}\n")
    # Same grid size, but the label volume is shifted 5 mm: its voxels are not the image's.
    misaligned = os.path.join(work, "misaligned")
    os.makedirs(misaligned, exist_ok=True)
    shutil.copy(os.path.join(scans, "volume-1.nii"), misaligned)
    shifted = nib.load(os.path.join(scans, "segmentation-1.nii"))
    moved = shifted.affine.copy()
    moved[2, 3] += 5.0
    nib.save(nib.Nifti1Image(np.asarray(shifted.dataobj), moved),
             os.path.join(misaligned, "segmentation-1.nii"))
    # A label volume with a value that is no class.
    strange = os.path.join(work, "strange_labels")
    os.makedirs(strange, exist_ok=True)
    shutil.copy(os.path.join(scans, "volume-1.nii"), strange)
    labels = np.asarray(shifted.dataobj).copy()
    labels[-1, -1, -1] = 7
    nib.save(nib.Nifti1Image(labels, shifted.affine), os.path.join(strange, "segmentation-1.nii"))
    with open(os.path.join(scans, "volume-1.nii"), "rb") as f:
        data = f.read()
    with open(os.path.join(work, "truncated.nii"), "wb") as f:
        f.write(data[: len(data) // 2])


def mri_channels(hu):
    """Two MRI-like channels of a phantom: positive intensities in the body, exactly 0 in the air
    around it (what the z-score over the body leaves out)."""
    body = hu > -500
    flair = np.where(body, hu + 1100.0, 0.0)
    t1 = np.where(body, 2400.0 - 0.8 * flair, 0.0)
    return np.stack([flair, t1], axis=-1).astype(np.float32)


def write_decathlon(work, pairs):
    """decathlon/: imagesTr, labelsTr, imagesTs as the Decathlon ships them, with its dataset.json;
    nnunet_ts/: the test case as one file per channel (CASE_0000, CASE_0001)."""
    root = os.path.join(work, "decathlon")
    for sub in ("imagesTr", "labelsTr", "imagesTs"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    aff = lps_affine((0.8, 0.8, 2.0))
    cases = len(pairs) // 2
    training, test = [], []
    for n in range(cases):
        hu, labels = np.load(pairs[2 * n]), np.load(pairs[2 * n + 1])
        name = f"mri_{n:03d}.nii.gz"
        image = nib.Nifti1Image(mri_channels(hu), aff)
        if n < cases - 1:
            nib.save(image, os.path.join(root, "imagesTr", name))
            nib.save(nib.Nifti1Image(labels.astype(np.uint8), aff),
                     os.path.join(root, "labelsTr", name))
            training.append({"image": f"./imagesTr/{name}", "label": f"./labelsTr/{name}"})
        else:
            nib.save(image, os.path.join(root, "imagesTs", name))
            test.append(f"./imagesTs/{name}")
            nnunet = os.path.join(work, "nnunet_ts")
            os.makedirs(nnunet, exist_ok=True)
            channels = mri_channels(hu)
            for c in range(channels.shape[-1]):
                nib.save(nib.Nifti1Image(channels[..., c], aff),
                         os.path.join(nnunet, f"mri_{n:03d}_{c:04d}.nii.gz"))
    description = {"name": "phantom MRI", "tensorImageSize": "4D",
                   "modality": {"0": "FLAIR", "1": "T1w"},
                   "labels": {"0": "background", "1": "organ", "2": "tumour"},
                   "numTraining": len(training), "numTest": len(test),
                   "training": training, "test": test}
    with open(os.path.join(root, "dataset.json"), "w") as f:
        json.dump(description, f, indent=2)
    # Broken: a file listed that is not there; a case with one channel of the two.
    missing = os.path.join(work, "decathlon_missing")
    shutil.copytree(root, missing, dirs_exist_ok=True)
    os.remove(os.path.join(missing, "labelsTr", "mri_000.nii.gz"))
    one_channel = os.path.join(work, "decathlon_one_channel")
    shutil.copytree(root, one_channel, dirs_exist_ok=True)
    first = nib.load(os.path.join(root, "imagesTr", "mri_001.nii.gz"))
    nib.save(nib.Nifti1Image(np.asarray(first.dataobj)[..., 0], first.affine),
             os.path.join(one_channel, "imagesTr", "mri_001.nii.gz"))


def write_more_classes(work, pairs):
    """more_classes/{labels,predicted}: label volumes of classes 1, 2, 3 (the organ's upper half
    made class 3) and predictions of them shifted by a voxel, one of which also holds a class 5:
    what `unet3d evaluate` scores without --classes."""
    aff = lps_affine((0.8, 0.8, 2.0))
    for sub in ("labels", "predicted"):
        os.makedirs(os.path.join(work, "more_classes", sub), exist_ok=True)
    for n in range(len(pairs) // 2):
        labels = np.load(pairs[2 * n + 1]).astype(np.uint8)
        upper = np.zeros(labels.shape, bool)
        upper[..., labels.shape[2] // 2:] = True
        labels[(labels == 1) & upper] = 3
        predicted = np.roll(labels, 1, axis=0)
        if n == 0:
            predicted[:3, :3, :3] = 5
        for sub, volume in (("labels", labels), ("predicted", predicted)):
            nib.save(nib.Nifti1Image(volume, aff),
                     os.path.join(work, "more_classes", sub, f"case_{n}.nii.gz"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
    write_decathlon(sys.argv[1], sys.argv[2:])
    write_more_classes(sys.argv[1], sys.argv[2:])
