"""PyTorch baselines for bench/run.sh (CPU) and bench/gpu.sh (one NVIDIA GPU), same shapes as the
C++ benchmarks.

  python torch_bench.py conv --channels 8,16 --sizes 32,64 --threads 2
  python torch_bench.py matmul --shapes 512x2048x2048,64x512x2048 --threads 2 [--precision bf16]
  python torch_bench.py transformer --steps 12 --threads 2 [--model 256 --layers 4 ...]
  python torch_bench.py unet --size 64 --threads 2 [--precision bf16]
  python torch_bench.py unet --device cuda --size 128 --channels 32 [--precision bf16] [--compile]

Prints one JSON object per line. `unet` builds the same network as examples/unet3d (3x3x3 conv
without bias, batch norm, ReLU twice per level, 2x2x2 max pooling, 2x2x2 stride-2 transposed
convolutions, skip concatenation, 1x1 head; weighted cross-entropy + tumour soft Dice; Adam) and
reports its training step time and memory: on the CPU peak RSS minus RSS before the model is
built, as for meshtensor; on a GPU torch.cuda.max_memory_allocated over the timed steps.
With --precision bf16 the forward pass and the loss run under torch.autocast(device, bfloat16), as
PyTorch's mixed precision trains (fp32 master weights and optimiser).
On cuda: cudnn.benchmark on (PyTorch's fastest algorithms per shape), TF32 off (fp32 convolutions
in FMA math, as meshtensor's cuDNN calls; the line says "tf32": false), each timed step between
torch.cuda.synchronize() calls. --compile wraps the model in torch.compile (the loss and Adam stay
eager); the first step's extra time is "compile_s", apart from the median step. --profile-steps N
(default 2 on cuda, 0 on cpu) then profiles N more steps with torch.profiler: kernel launches,
host waits and GPU time per kernel family per step (see profile_steps).
"""
import argparse
import os
import sys
import json
import statistics
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # said plainly: bench/gpu.sh records this line as the row's error
    sys.exit(f"torch_bench.py: PyTorch does not import with {sys.executable}: {e}")


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


def matmul(args):
    """bench_einsum's dense layer: y = x @ w, x [rows, in], w [in, out], forward and backward."""
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    for rows, n_in, n_out in args.shapes:
        x = (torch.rand(rows, n_in) * 2 - 1).to(dtype).requires_grad_()
        w = (torch.rand(n_in, n_out) * 0.2 - 0.1).to(dtype).requires_grad_()
        dy = (torch.rand(rows, n_out) * 2 - 1).to(dtype)

        def run():
            x.grad = None
            w.grad = None
            t0 = time.perf_counter()
            y = x @ w
            t1 = time.perf_counter()
            y.backward(dy)
            t2 = time.perf_counter()
            return t1 - t0, t2 - t1

        forward, backward = median_phases(args.seconds, run)
        flops = 2.0 * rows * n_in * n_out
        print(json.dumps({"bench": "einsum", "impl": "pytorch-" + torch.__version__,
                          "kernel": "matmul", "precision": args.precision, "rows": rows,
                          "in": n_in, "out": n_out, "threads": args.threads,
                          "forward_s": forward, "backward_s": backward,
                          "forward_gflops": flops / forward / 1e9,
                          "step_gflops": 3 * flops / (forward + backward) / 1e9}), flush=True)


class Transformer(nn.Module):
    """examples/transformer's model: pre-norm decoder blocks (causal multi-head attention without
    biases, then Linear-GELU-Linear), learned positions, a final LayerNorm and a Linear head."""

    def __init__(self, vocab, length, model, heads, d_head, d_ff, layers):
        super().__init__()
        self.heads, self.d_head = heads, d_head
        self.embed = nn.Embedding(vocab, model)
        self.position = nn.Parameter(torch.randn(length, model) * 0.02)
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            self.blocks.append(nn.ModuleDict({
                "attention_norm": nn.LayerNorm(model),
                "qkv": nn.Linear(model, 3 * heads * d_head, bias=False),
                "out": nn.Linear(heads * d_head, model, bias=False),
                "ff_norm": nn.LayerNorm(model),
                "up": nn.Linear(model, d_ff), "down": nn.Linear(d_ff, model)}))
        self.final_norm = nn.LayerNorm(model)
        self.head = nn.Linear(model, vocab)
        self.register_buffer("mask", torch.triu(torch.full((length, length), -1e9), 1))

    def forward(self, tokens):
        b, n = tokens.shape
        x = self.embed(tokens) + self.position
        for blk in self.blocks:
            q, k, v = blk["qkv"](blk["attention_norm"](x)).view(
                b, n, 3, self.heads, self.d_head).permute(2, 0, 3, 1, 4)
            scores = q @ k.transpose(-1, -2) / self.d_head ** 0.5 + self.mask
            attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, n, -1)
            x = x + blk["out"](attended)
            x = x + blk["down"](F.gelu(blk["up"](blk["ff_norm"](x))))
        return self.head(self.final_norm(x))


def transformer(args):
    """examples/transformer's training step (sorting digits; Adam), its median time and memory."""
    vocab, length = args.values + 1, 2 * args.digits
    rss_before = status_mib("VmRSS")
    net = Transformer(vocab, length, args.model, args.heads, args.d_head, args.d_ff, args.layers)
    adam = torch.optim.Adam(net.parameters(), lr=3e-3)
    digits = torch.randint(0, args.values, (args.batch, args.digits))
    sequence = torch.cat([digits, torch.full((args.batch, 1), args.values),
                          digits.sort(dim=1).values], dim=1)
    tokens, targets = sequence[:, :-1], sequence[:, 1:].clone()
    targets[:, :args.digits] = -1
    seconds = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = F.cross_entropy(net(tokens).reshape(-1, vocab), targets.reshape(-1),
                               ignore_index=-1)
        loss.backward()
        adam.step()
        adam.zero_grad()
        seconds.append(time.perf_counter() - t0)
    print(json.dumps({"bench": "transformer", "impl": "pytorch-" + torch.__version__,
                      "threads": args.threads, "batch": args.batch, "length": length,
                      "model": args.model, "heads": args.heads, "d_head": args.d_head,
                      "d_ff": args.d_ff, "layers": args.layers,
                      "median_step_s": statistics.median(seconds[2:] or seconds),
                      "peak_rss_over_start_mib": status_mib("VmHWM") - rss_before}), flush=True)


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


# Kernel families, by the kernel's base name (on the CPU: the aten op's), lower-cased: "void ",
# "(anonymous namespace)::", template arguments and parameters dropped, so that a functor named in
# a template argument (a cast inside a copy, say) cannot decide. The first family with a matching
# substring wins, in this order: the optimiser's multi-tensor kernels first, batch norm before
# convolution (cuDNN's batch norm kernels are cudnn::bn_*), matrix products (gemm) as
# convolutions (the U-Net has no other); so torch.compile's fused Triton kernels go by the first
# family in this order that their fused ops' names show (triton_poi_fused_<batch norm>_relu is
# batch norm, triton_poi_fused_relu element-wise).
# What matches nothing (reductions such as the Dice sums, indexing) is "other".
FAMILIES = [
    ("optimiser", ("multi_tensor_apply", "adam", "foreach")),
    ("loss", ("softmax", "nll_loss", "cross_entropy")),
    ("batch_norm", ("batch_norm", "batchnorm", "bn_")),
    ("pooling", ("pool",)),
    ("convolution", ("conv", "cudnn", "xmma", "gemm", "cutlass", "fprop", "dgrad", "wgrad",
                     "nchwtonhwc", "nhwctonchw")),
    ("elementwise", ("elementwise", "triton_poi", "copy", "memcpy", "memset", "fill", "cat")),
]


def family_of(name):
    base = name.replace("(anonymous namespace)::", "").removeprefix("void ")
    base = base.split("<")[0].split("(")[0].lower()
    return next((family for family, keys in FAMILIES if any(k in base for k in keys)), "other")


# What the profiler's CUDA runtime and driver events count as. Launches: every kernel launch call
# (cudaLaunchKernel[ExC], cuLaunchKernel[Ex] as Triton launches, cooperative launches); a CUDA
# graph's replay would be one cudaGraphLaunch, counted apart. Host waits: the calls that block the
# host until the GPU has finished queued work: stream, event and device synchronisation and the
# synchronous cudaMemcpy (a device-to-host copy the host reads); asynchronous copies are not
# waits, but device-to-host copies are counted apart from the copy events on the GPU.
LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
            "cudaLaunchCooperativeKernel")
WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
         "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cudaMemcpy",
         "cuMemcpyDtoH", "cuMemcpyDtoH_v2")


def profile_steps(step, steps, cuda):
    """Per step over `steps` profiled steps: kernel launches, host waits, device-to-host copies and
    seconds per kernel family (each kernel's time on the GPU; on the CPU, each aten op's self time,
    which only checks the pipeline)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize()  # outside the profile: the steps alone are counted
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step()
    launches = waits = graphs = d2h = runs = 0
    families = {family: 0.0 for family, _ in FAMILIES + [("other", ())]}
    for e in prof.events():
        on_gpu = e.device_type == DeviceType.CUDA
        launches += e.name in LAUNCHES
        graphs += e.name == "cudaGraphLaunch"
        waits += e.name in WAITS
        d2h += on_gpu and e.name.startswith("Memcpy DtoH")
        if on_gpu:
            runs += not e.name.startswith(("Memcpy", "Memset"))
            families[family_of(e.name)] += e.time_range.elapsed_us() / 1e6
        elif not cuda and e.name.startswith("aten::"):
            families[family_of(e.name)] += e.self_cpu_time_total / 1e6
    return {"profiled_steps": steps, "gpu_kernels_per_step": launches / steps,
            "gpu_kernel_runs_per_step": runs / steps, "graph_launches_per_step": graphs / steps,
            "gpu_waits_per_step": waits / steps, "d2h_copies_per_step": d2h / steps,
            "gpu_family_s": {f: seconds / steps for f, seconds in families.items()}}


def set_up_cuda():
    """The GPU, as bench/gpu.sh compares it: cuDNN's fastest algorithm per shape, no TF32."""
    if not torch.cuda.is_available():
        sys.exit(f"torch_bench.py: --device cuda: no GPU that PyTorch can use here "
                 f"(torch.cuda.is_available() is False; torch {torch.__version__}, "
                 f"built for CUDA {torch.version.cuda})")
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return {"gpu": torch.cuda.get_device_name(), "tf32": False, "cudnn_benchmark": True}


def compiled(net):
    if not hasattr(torch, "compile"):
        sys.exit(f"torch_bench.py: --compile: torch.compile needs PyTorch 2.0 or newer; this is "
                 f"torch {torch.__version__}")
    return torch.compile(net)


def unet(args):
    cuda = args.device == "cuda"
    record = {"bench": "unet_step", "impl": "pytorch-" + torch.__version__,
              "device": args.device, "threads": args.threads, "size": args.size,
              "channels": args.channels, "depth": args.depth, "precision": args.precision}
    if cuda:
        record.update(set_up_cuda())
    device = torch.device(args.device)
    s = args.size
    g = torch.Generator().manual_seed(1)
    x = torch.rand(1, 1, s, s, s, generator=g).to(device)
    labels = torch.randint(0, 3, (1, s, s, s), generator=g).to(device)
    weights = torch.tensor([1.0, 3.0, 3.0], device=device)
    rss_before_model = status_mib("VmRSS")
    net = UNet3D(depth=args.depth, channels=args.channels, classes=3, inputs=1, norm="batch",
                 biases_before_norm=False).to(device)
    model = compiled(net) if args.compile else net
    adam = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step():
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            logits = model(x)
        loss = segmentation_loss(logits.float(), labels, weights)
        loss.backward()
        adam.step()
        adam.zero_grad(set_to_none=True)

    def timed():  # the GPU's queue empty before and after, so the time is the step's own
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    warmups = [timed() for _ in range(args.warmup or (2 if cuda else 1))]
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = [timed() for _ in range(args.steps)]
    record.update(steps=args.steps, step_s=statistics.median(times))
    if args.compile:  # the first step traced and compiled forward and backward
        record.update(compile=True, compile_s=warmups[0] - record["step_s"])
    if cuda:
        mib = 1 << 20
        record.update(gpu_peak_mib=torch.cuda.max_memory_allocated() / mib,
                      gpu_reserved_peak_mib=torch.cuda.max_memory_reserved() / mib)
    else:
        peak = status_mib("VmHWM")
        record.update(rss_before_model_mib=rss_before_model, rss_peak_mib=peak,
                      step_memory_mib=peak - rss_before_model)
    profiled = args.profile_steps if args.profile_steps is not None else (2 if cuda else 0)
    if profiled:
        record.update(profile_steps(step, profiled, cuda))
    print(json.dumps(record), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["conv", "unet", "matmul", "transformer"])
    ints = lambda text: [int(v) for v in text.split(",")]
    shapes = lambda text: [tuple(int(v) for v in s.split("x")) for s in text.split(",")]
    parser.add_argument("--shapes", type=shapes,
                        default=[(512, 2048, 2048), (64, 512, 2048), (1024, 1024, 1024)],
                        help="matmul: ROWSxINxOUT,...")
    parser.add_argument("--channels", type=ints, default=[8, 16, 32, 64])
    parser.add_argument("--sizes", type=ints, default=[32, 64, 128])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    for flag, default in [("--model", 256), ("--heads", 8), ("--d-head", 32), ("--d-ff", 1024),
                          ("--layers", 4), ("--batch", 32), ("--digits", 32), ("--values", 10)]:
        parser.add_argument(flag, type=int, default=default, help="transformer")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="unet only")
    parser.add_argument("--compile", action="store_true", help="unet: torch.compile the model")
    parser.add_argument("--warmup", type=int, help="unet: untimed steps (default 1 cpu, 2 cuda)")
    parser.add_argument("--profile-steps", type=int,
                        help="unet: steps under torch.profiler after the timed ones "
                             "(default 0 cpu, 2 cuda)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.what == "conv":
        conv(args)
    elif args.what == "matmul":
        matmul(args)
    elif args.what == "transformer":
        transformer(args)
    else:
        args.channels = args.channels[0] if len(args.channels) == 1 else 8
        unet(args)


if __name__ == "__main__":
    main()
