"""`unet3d evaluate`'s report beside MONAI's metrics on the same files: Dice (DiceMetric), the 95%
Hausdorff distance (HausdorffDistanceMetric, percentile 95) and the normalised surface Dice
(SurfaceDiceMetric), with the files' voxel spacing. Prints a Markdown table and the largest
differences, and the seconds MONAI took.

    evaluate_monai.py REPORT.json
"""
import json
import sys
import time

import nibabel as nib
import numpy as np
import torch
from monai.metrics import DiceMetric, HausdorffDistanceMetric, SurfaceDiceMetric


def one_hot(labels, classes):
    return torch.from_numpy(np.stack([labels == c for c in range(classes)])[None].astype(np.float32))


def main(path):
    report = json.load(open(path))
    names = report["classes"]
    classes = len(names) + 1
    tolerance = report["tolerance_mm"]
    rows, largest, seconds = [], {"dice": 0.0, "hd95_mm": 0.0, "nsd": 0.0}, 0.0
    for case in report["cases"]:
        pred = nib.as_closest_canonical(nib.load(case["prediction"]))
        truth = nib.as_closest_canonical(nib.load(case["label"]))
        spacing = [float(s) for s in truth.header.get_zooms()[:3]]
        p = one_hot(np.asarray(pred.dataobj), classes)
        t = one_hot(np.asarray(truth.dataobj), classes)
        start = time.perf_counter()
        dice = DiceMetric(include_background=False, reduction="none")(p, t)[0]
        hd95 = HausdorffDistanceMetric(include_background=False, percentile=95,
                                       reduction="none")(p, t, spacing=spacing)[0]
        nsd = SurfaceDiceMetric(class_thresholds=[tolerance] * (classes - 1),
                                include_background=False, reduction="none")(p, t, spacing=spacing)[0]
        seconds += time.perf_counter() - start
        for k, name in enumerate(names):
            ours = case["metrics"][name]
            theirs = {"dice": float(dice[k]), "hd95_mm": float(hd95[k]), "nsd": float(nsd[k])}
            for metric in largest:
                if ours[metric] is not None:
                    largest[metric] = max(largest[metric], abs(ours[metric] - theirs[metric]))
            rows.append(f"| {case['case']} | {name} | {ours['dice']:.6f} | {theirs['dice']:.6f} | "
                        f"{ours['hd95_mm']:.4f} | {theirs['hd95_mm']:.4f} | {ours['nsd']:.6f} | "
                        f"{theirs['nsd']:.6f} |")
    print("| case | class | Dice | MONAI Dice | HD95 mm | MONAI HD95 mm | NSD | MONAI NSD |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nlargest differences: Dice {largest['dice']:.2g}, HD95 {largest['hd95_mm']:.2g} mm, "
          f"NSD {largest['nsd']:.2g}; MONAI took {seconds:.2f} s")
    print(json.dumps({"monai_seconds": seconds, "largest_difference": largest}))


if __name__ == "__main__":
    main(sys.argv[1])
