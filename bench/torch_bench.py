"""PyTorch baselines for bench/run.sh, same shapes and thread count as the C++ benchmarks.

  python torch_bench.py conv --channels 8,16 --sizes 32,64 --threads 2
  python torch_bench.py unet --size 64 --threads 2 [--precision bf16]

Prints one JSON object per line. `unet` builds the same network as examples/unet3d (3x3x3 conv
without bias, batch norm, ReLU twice per level, 2x2x2 max pooling, 2x2x2 stride-2 transposed
convolutions, skip concatenation, 1x1 head; weighted cross-entropy + tumour soft Dice; Adam) and
reports its training step time and memory: peak RSS minus RSS before the model is built, as for
meshtensor.
With --precision bf16 the forward pass and the loss run under torch.autocast("cpu", bfloat16), as
PyTorch's mixed precision trains (fp32 master weights and optimiser).
"""
import argparse
import os
import sys
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def status_mib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def median_phases(seconds, run):
    run()  # warm-up
    runs, start = [], time.perf_counter()
    while len(runs) < 2 or (time.perf_counter() - start < seconds and len(runs) < 50):
        runs.append(run())
    return [statistics.median(r[i] for r in runs) for i in range(len(runs[0]))]


def conv(args):
    for s in args.sizes:
        for c in args.channels:
            x = torch.rand(1, c, s, s, s, requires_grad=True)
            w = (torch.rand(c, c, 3, 3, 3) * 0.2 - 0.1).requires_grad_()
            dy = torch.rand(1, c, s, s, s)

            def run():
                x.grad = None
                w.grad = None
                t0 = time.perf_counter()
                y = F.conv3d(x, w, padding=1)
                t1 = time.perf_counter()
                y.backward(dy)
                t2 = time.perf_counter()
                return t1 - t0, t2 - t1

            forward, backward = median_phases(args.seconds, run)
            total = forward + backward
            flops = 3 * 2.0 * c * c * 27 * s**3
            print(json.dumps({"bench": "conv", "impl": "pytorch-" + torch.__version__,
                              "channels": c, "size": s, "threads": args.threads,
                              "forward_s": forward, "backward_data_s": backward,
                              "backward_weights_s": 0.0, "total_s": total,
                              "gflops": flops / total / 1e9}), flush=True)


# The model unet3d trains, as scripts/to_pytorch.py defines it for exported checkpoints.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from to_pytorch import UNet3D  # noqa: E402


def segmentation_loss(logits, labels, class_weights):
    """unet3d's loss: weighted cross-entropy plus 1 - the mean soft Dice of the foreground classes."""
    ce = F.cross_entropy(logits, labels, weight=class_weights)
    p = logits.softmax(1)[:, 1:]
    t = F.one_hot(labels, logits.shape[1]).permute(0, 4, 1, 2, 3)[:, 1:].float()
    dims = (0, 2, 3, 4)
    dice = 2 * (p * t).sum(dims) / (p.sum(dims) + t.sum(dims) + 1e-6)
    return ce + (1 - dice.mean())


def unet(args):
    s = args.size
    g = torch.Generator().manual_seed(1)
    x = torch.rand(1, 1, s, s, s, generator=g)
    labels = torch.randint(0, 3, (1, s, s, s), generator=g)
    weights = torch.tensor([1.0, 3.0, 3.0])
    rss_before_model = status_mib("VmRSS")
    net = UNet3D(depth=args.depth, channels=args.channels, classes=3, inputs=1, norm="batch",
                 biases_before_norm=False)
    adam = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step():
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = net(x)
        loss = segmentation_loss(logits.float(), labels, weights)
        loss.backward()
        adam.step()
        adam.zero_grad(set_to_none=True)
        return (time.perf_counter() - t0,)

    step()
    times = [step()[0] for _ in range(args.steps)]
    peak = status_mib("VmHWM")
    print(json.dumps({"bench": "unet_step", "impl": "pytorch-" + torch.__version__,
                      "threads": args.threads, "size": s, "channels": args.channels,
                      "depth": args.depth, "precision": args.precision,
                      "step_s": statistics.median(times),
                      "rss_before_model_mib": rss_before_model, "rss_peak_mib": peak,
                      "step_memory_mib": peak - rss_before_model}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["conv", "unet"])
    ints = lambda text: [int(v) for v in text.split(",")]
    parser.add_argument("--channels", type=ints, default=[8, 16, 32, 64])
    parser.add_argument("--sizes", type=ints, default=[32, 64, 128])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.what == "conv":
        conv(args)
    else:
        args.channels = args.channels[0] if len(args.channels) == 1 else 8
        unet(args)


if __name__ == "__main__":
    main()
