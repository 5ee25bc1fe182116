"""Checks scripts/to_pytorch.py's model against `unet3d predict`: the class probabilities of the
exported PyTorch model on a volume equal those predict wrote, within a tolerance.

    check_pytorch.py OUT.pt VOLUME.npy PROBABILITIES.npy [TOLERANCE]   (default 1e-5)

VOLUME is [x, y, z] (or [x, y, z, channels]); PROBABILITIES predict's [x, y, z, classes].
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
from to_pytorch import load, prepare  # noqa: E402


def main(out, volume, expected, tolerance=1e-5):
    model, task = load(out)
    with torch.no_grad():
        p = torch.softmax(model(prepare(np.load(volume), task)), dim=1)[0]
    got = p.permute(1, 2, 3, 0).numpy()
    want = np.load(expected)
    assert got.shape == want.shape, (got.shape, want.shape)
    largest = float(np.abs(got - want).max())
    print(f"PyTorch against unet3d predict: largest difference of a probability {largest:.3g}"
          f" (tolerance {tolerance})")
    assert largest <= float(tolerance), "the exported model's probabilities differ"


if __name__ == "__main__":
    main(*sys.argv[1:])
