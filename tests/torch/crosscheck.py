"""Recomputes the cases written by torch_cases with PyTorch and compares outputs and gradients.

meshtensor arrays are [batch, x, y, z, channels]; PyTorch's are [batch, channels, x, y, z].
Exit status: 0 all agree, 1 a mismatch, 77 PyTorch or NumPy is missing (the test is skipped).
"""
import json
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch.nn.utils.stateless import functional_call
except ImportError as missing:  # pragma: no cover
    print(f"skipped: {missing}; install python3-torch and python3-numpy (Debian) to run this check")
    sys.exit(77)

torch.set_default_dtype(torch.float64)
directory = sys.argv[1]


def load(case, key):
    return torch.from_numpy(np.load(f"{directory}/{case['name']}.{key}.npy"))


def to_torch(a):  # [b, x, y, z, c] -> [b, c, x, y, z]
    return a.permute(0, 4, 1, 2, 3).contiguous()


def from_torch(a):
    return a.permute(0, 2, 3, 4, 1)


def conv_weight(w):  # [kx, ky, kz, in, out] -> [out, in, kx, ky, kz]
    return w.permute(4, 3, 0, 1, 2).contiguous()


def transposed_weight(w):  # [kx, ky, kz, in, out] -> [in, out, kx, ky, kz]
    return w.permute(3, 4, 0, 1, 2).contiguous()


def conv_module(w, case, padding_mode):
    """nn.Conv3d with weight w ([out, in, kx, ky, kz]) and the case's window."""
    module = torch.nn.Conv3d(w.shape[1], w.shape[0], tuple(w.shape[2:]), stride=case["stride"],
                             dilation=case["dilation"], padding=case["padding"],
                             padding_mode=padding_mode, bias=False)
    return lambda x: functional_call(module, {"weight": w}, (x,))


def run(case):
    op = case["op"]
    inputs = {k: load(case, k).requires_grad_() for k in case["arrays"]
              if k not in ("out", "r") and not k.startswith("grad_")}
    x = inputs.get("x")
    if op == "conv":
        pads = [p for pair in reversed(case["pad"]) for p in pair]
        out = from_torch(F.conv3d(F.pad(to_torch(x), pads), conv_weight(inputs["w"]),
                                  stride=case["stride"], dilation=case["dilation"]))
    elif op == "conv_module":
        out = from_torch(conv_module(conv_weight(inputs["w"]), case, case["padding_mode"])(to_torch(x)))
    elif op == "conv_transpose_circular":  # the input gradient of nn.Conv3d's circular convolution
        w = transposed_weight(inputs["w"])  # a Conv3d weight from the out channels to the in ones
        size = load(case, "out").shape[1:4]
        z = torch.zeros(x.shape[0], w.shape[1], *size, requires_grad=True)
        y = conv_module(w, case, "circular")(z)
        out = from_torch(torch.autograd.grad(y, z, grad_outputs=to_torch(x), create_graph=True)[0])
    elif op == "conv_transpose":
        out = from_torch(F.conv_transpose3d(to_torch(x), transposed_weight(inputs["w"]), stride=case["stride"],
                                            padding=case["padding"], output_padding=case["output_padding"],
                                            dilation=case["dilation"]))
    elif op == "max_pool" and "padding_mode" in case:  # the input padded so, pooled unpadded
        pads = [p for p in reversed(case["padding"]) for _ in range(2)]
        out = from_torch(F.max_pool3d(F.pad(to_torch(x), pads, mode=case["padding_mode"]),
                                      case["kernel"], case["stride"]))
    elif op == "max_pool":
        out = from_torch(F.max_pool3d(to_torch(x), case["kernel"], case["stride"], case["padding"]))
    elif op == "avg_pool":
        out = from_torch(F.avg_pool3d(to_torch(x), case["kernel"], case["stride"], case["padding"],
                                      count_include_pad=case["count_include_pad"]))
    elif op == "upsample":
        mode = case["mode"]
        out = from_torch(F.interpolate(to_torch(x), scale_factor=case["factor"], mode=mode,
                                       **({} if mode == "nearest" else {"align_corners": False})))
    elif op == "pad":
        pads = [p for pair in reversed(case["pad"]) for p in pair]
        out = from_torch(F.pad(to_torch(x), pads, mode=case["mode"]))
    elif op == "batch_norm":
        out = from_torch(F.batch_norm(to_torch(x), None, None, inputs["gamma"], inputs["beta"], training=True, eps=1e-5))
    elif op == "instance_norm":
        out = from_torch(F.instance_norm(to_torch(x), weight=inputs["gamma"], bias=inputs["beta"], eps=1e-5))
    elif op == "group_norm":
        out = from_torch(F.group_norm(to_torch(x), case["groups"], inputs["gamma"], inputs["beta"], eps=1e-5))
    elif op == "cross_entropy":
        logits = to_torch(inputs["logits"])
        target = to_torch(inputs["labels"].detach()).argmax(dim=1)
        out = F.cross_entropy(logits, target, weight=inputs["weights"].detach())
    else:
        raise ValueError(f"unknown op {op}")
    (out * load(case, "r")).sum().backward()
    results = {"out": out}
    for key, t in inputs.items():
        if f"grad_{key}" in case["arrays"] and key not in ("labels", "weights"):
            results[f"grad_{key}"] = t.grad
    return results


failures = 0
cases = json.load(open(f"{directory}/manifest.json"))
for case in cases:
    for key, got in run(case).items():
        want = load(case, key)
        if tuple(got.shape) != tuple(want.shape):
            print(f"{case['name']}.{key}: PyTorch shape {tuple(got.shape)}, meshtensor {tuple(want.shape)}")
            failures += 1
            continue
        err = (got.detach() - want).abs().max().item() / max(1.0, want.abs().max().item())
        status = "ok" if err < 1e-9 else "MISMATCH"
        failures += status != "ok"
        print(f"{case['name']:24s} {key:8s} max relative difference {err:.2e}  {status}")
print(f"{len(cases)} cases, {failures} mismatches")
sys.exit(1 if failures else 0)
