#!/usr/bin/env python3
"""A unet3d checkpoint as a PyTorch model, for deploying with PyTorch or MONAI.

    scripts/to_pytorch.py CHECKPOINT OUT.pt [--pick best|latest]

CHECKPOINT is a `unet3d train --checkpoint` directory (its best checkpoint by validation Dice
where it has one, else its latest). OUT.pt holds {"state_dict", "config", "task"}: the weights of
the module UNet3D defined here, its constructor's arguments, and how inputs are prepared (classes,
channels, CT windows). To use it:

    import torch, sys; sys.path.insert(0, "scripts"); from to_pytorch import load, prepare
    model, task = load("OUT.pt")                      # eval mode
    x = prepare(volume, task)                         # volume: [x, y, z] or [x, y, z, channels]
    probabilities = torch.softmax(model(x), dim=1)    # [1, classes, x, y, z]

The network is the one of examples/unet3d/model.hpp: per level two 3x3x3 convolutions, each with
normalisation (batch, instance, group of 4, or none) and ReLU; 2x2x2 max pooling down; a 2x2x2
stride-2 transposed convolution up, concatenated after the level's skip; a 1x1x1 head. Tensor dims
x, y, z are PyTorch's D, H, W. Needs numpy and torch only.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
from torch import nn


def norm_layer(kind, channels):
    if kind == "batch":
        return nn.BatchNorm3d(channels, eps=1e-5, momentum=0.1)
    if kind == "instance":
        return nn.InstanceNorm3d(channels, eps=1e-5, affine=True)
    if kind == "group":
        return nn.GroupNorm(4, channels, eps=1e-5)
    return nn.Identity()


class DoubleConv(nn.Sequential):
    def __init__(self, inputs, outputs, norm, bias):
        super().__init__(nn.Conv3d(inputs, outputs, 3, padding=1, bias=bias),
                         norm_layer(norm, outputs), nn.ReLU(inplace=True),
                         nn.Conv3d(outputs, outputs, 3, padding=1, bias=bias),
                         norm_layer(norm, outputs), nn.ReLU(inplace=True))


def biased_before_norm(norm, biases_before_norm):
    """Whether the convolutions a norm follows have biases: unet3d drops those a batch or instance
    norm cancels (its checkpoints' flags say "biases_before_norm": false; older ones have them)."""
    return biases_before_norm or norm not in ("batch", "instance")


class UNet3D(nn.Module):
    """Logits [N, classes, X, Y, Z] of prepared inputs [N, inputs, X, Y, Z]; X, Y, Z multiples of
    2**depth."""

    def __init__(self, depth=3, channels=8, classes=3, inputs=1, norm="batch",
                 biases_before_norm=True):
        super().__init__()
        bias = biased_before_norm(norm, biases_before_norm)
        self.down = nn.ModuleList()
        width = inputs
        for level in range(depth):
            self.down.append(DoubleConv(width, channels << level, norm, bias))
            width = channels << level
        self.bottom = DoubleConv(width, channels << depth, norm, bias)
        self.up = nn.ModuleList()
        self.merge = nn.ModuleList()
        for level in reversed(range(depth)):
            width = channels << level
            self.up.append(nn.ConvTranspose3d(2 * width, width, 2, stride=2))
            self.merge.append(DoubleConv(2 * width, width, norm, bias))
        self.head = nn.Conv3d(channels, classes, 1)

    def forward(self, x):
        skips = []
        for level in self.down:
            x = level(x)
            skips.append(x)
            x = nn.functional.max_pool3d(x, 2)
        x = self.bottom(x)
        for up, merge in zip(self.up, self.merge):
            x = merge(torch.cat([skips.pop(), up(x)], dim=1))
        return self.head(x)


def conv_weight(array, transposed):
    """[kx, ky, kz, in, out] (meshtensor) to Conv3d's [out, in, kx, ky, kz] or ConvTranspose3d's
    [in, out, kx, ky, kz]."""
    return torch.from_numpy(np.ascontiguousarray(
        array.transpose((3, 4, 0, 1, 2) if transposed else (4, 3, 0, 1, 2))))


def manifest_of(checkpoint, pick):
    for pointer in ([pick, "latest"] if pick == "best" else [pick]):
        path = os.path.join(checkpoint, pointer)
        if os.path.isfile(path):
            with open(path) as f:
                where = os.path.join(checkpoint, f.read().strip())
            with open(os.path.join(where, "manifest.json")) as f:
                return json.load(f), where
    sys.exit(f"to_pytorch.py: {checkpoint}: no checkpoint here ({pick} and latest are missing)")


def task_of(flags):
    classes = flags.get("classes", 3)
    if isinstance(classes, int):  # before tasks: the phantoms' three classes
        classes = ["background", "organ", "tumour"]
    inputs = flags.get("inputs", [{"modality": "CT", "window": [-160.0, 240.0]}])
    return {"classes": classes, "inputs": inputs}


def convert(checkpoint, pick="best"):
    """(state_dict, config, task, the checkpoint directory read) of a unet3d checkpoint."""
    manifest, where = manifest_of(checkpoint, pick)
    flags = manifest["flags"]
    task = task_of(flags)
    config = {"depth": flags["depth"], "channels": flags["channels"], "norm": flags["norm"],
              "classes": len(task["classes"]), "inputs": len(task["inputs"]),
              "biases_before_norm": flags.get("biases_before_norm", True)}
    bias = biased_before_norm(config["norm"], config["biases_before_norm"])
    tensors = {t["name"]: np.load(os.path.join(where, t["file"]))
               for t in manifest["tensors"] if t["kind"] != "optimizer"}
    state = {}

    def double_conv(prefix, ours):
        for k, conv, norm in ((1, 0, 1), (2, 3, 4)):
            state[f"{prefix}.{conv}.weight"] = conv_weight(tensors[f"{ours}/conv{k}/weight"], False)
            if bias:
                state[f"{prefix}.{conv}.bias"] = torch.from_numpy(tensors[f"{ours}/conv{k}/bias"])
            if config["norm"] == "none":
                continue
            state[f"{prefix}.{norm}.weight"] = torch.from_numpy(tensors[f"{ours}/norm{k}/gamma"])
            state[f"{prefix}.{norm}.bias"] = torch.from_numpy(tensors[f"{ours}/norm{k}/beta"])
            if config["norm"] == "batch":
                state[f"{prefix}.{norm}.running_mean"] = torch.from_numpy(
                    tensors[f"{ours}/norm{k}/running_mean"])
                state[f"{prefix}.{norm}.running_var"] = torch.from_numpy(
                    tensors[f"{ours}/norm{k}/running_var"])
                state[f"{prefix}.{norm}.num_batches_tracked"] = torch.tensor(
                    manifest["step"], dtype=torch.long)

    depth = config["depth"]
    for level in range(depth):
        double_conv(f"down.{level}", f"down{level}")
    double_conv("bottom", "bottom")
    for i, level in enumerate(reversed(range(depth))):
        state[f"up.{i}.weight"] = conv_weight(tensors[f"up{level}/transposed/weight"], True)
        state[f"up.{i}.bias"] = torch.from_numpy(tensors[f"up{level}/transposed/bias"])
        double_conv(f"merge.{i}", f"up{level}")
    state["head.weight"] = conv_weight(tensors["head/weight"], False)
    state["head.bias"] = torch.from_numpy(tensors["head/bias"])
    return state, config, task, where


def load(path):
    """The model of an OUT.pt (in eval mode) and its task."""
    saved = torch.load(path)
    model = UNet3D(**saved["config"])
    model.load_state_dict(saved["state_dict"])
    return model.eval(), saved["task"]


def prepare(volume, task):
    """A volume [x, y, z] (one channel) or [x, y, z, channels] as the network's input [1,
    channels, x, y, z], each channel prepared as unet3d prepares it: CT windowed to [-1, 1], any
    other modality z-scored over its voxels that are not 0 (which stay 0)."""
    volume = np.asarray(volume, dtype=np.float64)
    if volume.ndim == 3:
        volume = volume[..., None]
    channels = []
    for c, channel in enumerate(task["inputs"]):
        v = volume[..., c]
        if channel["modality"].upper() == "CT":
            low, high = channel["window"]
            middle, half = 0.5 * (low + high), 0.5 * (high - low)
            v = (np.clip(v, low, high) - middle) / half
        else:
            body = v != 0
            mean = v[body].mean()
            std = np.sqrt(((v[body] - mean) ** 2).mean())
            v = np.where(body, (v - mean) / (std if std > 0 else 1.0), 0.0)
        channels.append(v.astype(np.float32))
    return torch.from_numpy(np.stack(channels)[None])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="a unet3d train --checkpoint directory")
    parser.add_argument("out", help="the PyTorch file to write (.pt)")
    parser.add_argument("--pick", choices=["best", "latest"], default="best",
                        help="which checkpoint: best by validation Dice (latest where none), or "
                             "latest")
    args = parser.parse_args()
    state, config, task, where = convert(args.checkpoint, args.pick)
    model = UNet3D(**config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        sys.exit(f"to_pytorch.py: {where}: tensors missing {missing}, unexpected {unexpected}")
    temporary = args.out + ".partial"
    torch.save({"state_dict": model.state_dict(), "config": config, "task": task}, temporary)
    os.replace(temporary, args.out)  # never a half-written OUT.pt
    print(json.dumps({"checkpoint": where, "out": args.out, "config": config,
                      "classes": task["classes"],
                      "parameters": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    main()
