"""Whole-scan prediction (meshtensor's `unet3d predict`) beside MONAI's sliding_window_inference
with the same weights in the PyTorch copy of the model, on a CT scan in NIfTI: for several window
sizes and overlaps, the Dice between MONAI's labels and ours (and of each against the true labels),
the time and the peak memory of each.

    scan_bench.py run --unet3d BUILD/examples/unet3d/unet3d --venv-python PY --out DIR [--quick]
    scan_bench.py monai ...     (one MONAI run, started by `run` in the virtual environment)

`run` trains a small model on phantoms, writes a phantom scan as NIfTI the way CT comes (int16 with
a scale slope, L-P-S axes, 0.8 x 0.8 x 2 mm), predicts it with meshtensor on 1 and 2 processors and
with MONAI, and writes DIR/scans.json and DIR/scans.md. Each prediction runs in its own process;
peak memory is that process's peak RSS, time its wall time (MONAI's inference alone beside it).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np


def run_measured(command, env=None):
    """Runs a command; returns (seconds, peak RSS MiB, stdout)."""
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        sys.exit(f"failed ({status}): {' '.join(command)}")
    return seconds, usage.ru_maxrss / 1024.0, out


def dice(a, b, label):
    x, y = a == label, b == label
    total = x.sum() + y.sum()
    return float(2 * (x & y).sum() / total) if total else 1.0


def write_scan(volume_npy, labels_npy, out_dir):
    import nibabel as nib
    affine = np.array([[-0.8, 0, 0, 60.0], [0, -0.8, 0, 40.0], [0, 0, 2.0, -90.0], [0, 0, 0, 1]])
    hu = np.load(volume_npy)
    stored = np.round((hu + 1024.0) / 0.5).astype(np.int16)
    image = nib.Nifti1Image(stored, affine)
    image.header.set_slope_inter(0.5, -1024.0)
    scan = os.path.join(out_dir, "scan.nii.gz")
    nib.save(image, scan)
    truth = os.path.join(out_dir, "truth.nii.gz")
    nib.save(nib.Nifti1Image(np.load(labels_npy).astype(np.uint8), affine), truth)
    return scan, truth


def run(args):
    import nibabel as nib
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    threads = os.cpu_count() or 2
    shape = "96,96,48" if args.quick else "192,160,96"
    steps = "10" if args.quick else "200"
    env = dict(os.environ, MESHTENSOR_THREADS_PER_PROCESSOR=str(threads))
    checkpoint = os.path.join(out, "checkpoint")
    print("training a model on phantoms ...", flush=True)
    subprocess.run([args.unet3d, "train", "--size", "64", "--steps", steps, "--threads", "1",
                    "--validate-every", "1000", "--checkpoint", checkpoint,
                    "--out", os.path.join(out, "train")], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([args.unet3d, "generate", "--shape", shape, "--index", "0", "--threads", "1",
                    "--output", os.path.join(out, "volume.npy"),
                    "--labels", os.path.join(out, "labels.npy")], check=True,
                   stdout=subprocess.DEVNULL)
    scan, truth_path = write_scan(os.path.join(out, "volume.npy"), os.path.join(out, "labels.npy"),
                                  out)
    truth = np.asarray(nib.load(truth_path).dataobj)
    rows = []
    ours = {}
    for processors in (1, 2):
        labels = os.path.join(out, f"meshtensor_p{processors}.nii.gz")
        per = max(1, threads // processors)
        seconds, peak, text = run_measured(
            [args.unet3d, "predict", "--checkpoint", checkpoint, "--input", scan, "--output", labels,
             "--threads", str(processors)],
            env=dict(os.environ, MESHTENSOR_THREADS_PER_PROCESSOR=str(per)))
        ours[processors] = np.asarray(nib.load(labels).dataobj)
        rows.append({"method": "meshtensor", "processors": processors, "threads": per * processors,
                     "window": "whole scan", "overlap": 0, "total_s": seconds,
                     "inference_s": json.loads(text.strip().splitlines()[-1])["network_s"],
                     "peak_rss_mib": peak,
                     "dice_vs_meshtensor": [dice(ours[processors], ours[1], c) for c in (1, 2)],
                     "dice_vs_truth": [dice(ours[processors], truth, c) for c in (1, 2)]})
        print(json.dumps(rows[-1]), flush=True)
    # Window 0: the whole scan in one window, the same computation as meshtensor's (a check that
    # the weights and the preprocessing agree: its Dice against meshtensor should be 1).
    windows = [32, 64] if args.quick else [32, 64, 96]
    for window in [0] + windows:
        for overlap in ((0,) if window == 0 else (0.25, 0.5)):
            labels = os.path.join(out, f"monai_w{window}_o{overlap}.nii.gz")
            seconds, peak, text = run_measured(
                [args.venv_python, os.path.abspath(__file__), "monai", "--checkpoint", checkpoint,
                 "--scan", scan, "--output", labels, "--window", str(window),
                 "--overlap", str(overlap), "--threads", str(threads)])
            inference = json.loads(text.strip().splitlines()[-1])["inference_s"]
            monai = np.asarray(nib.load(labels).dataobj)
            rows.append({"method": "MONAI sliding_window_inference", "processors": 1,
                         "threads": threads, "window": window, "overlap": overlap,
                         "total_s": seconds, "inference_s": inference, "peak_rss_mib": peak,
                         "dice_vs_meshtensor": [dice(monai, ours[1], c) for c in (1, 2)],
                         "dice_vs_truth": [dice(monai, truth, c) for c in (1, 2)]})
            print(json.dumps(rows[-1]), flush=True)
    versions = subprocess.run([args.venv_python, "-c",
                               "import monai, torch; print(monai.__version__, torch.__version__)"],
                              capture_output=True, text=True).stdout.split()
    result = {"scan_shape": [int(s) for s in shape.split(",")], "threads": threads,
              "monai": versions[0] if versions else None,
              "torch": versions[1] if len(versions) > 1 else None, "rows": rows}
    with open(os.path.join(out, "scans.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = [
        "## Whole-scan prediction vs MONAI sliding windows",
        "",
        f"A {shape.replace(',', 'x')} phantom CT scan (NIfTI, int16 with slope, LPS, gz), a U-Net "
        f"(C=8, depth 3, batch norm) trained briefly on phantoms, the same weights in both; "
        f"{threads} threads. MONAI {result['monai']} with PyTorch {result['torch']}, Gaussian "
        "blending. Time: the whole process (reading, inference, writing), MONAI's inference "
        "alone in brackets (meshtensor's includes creating its oneDNN kernels for each shape, "
        "which a single prediction pays once). Memory: the process's peak RSS. Dice: organ / tumour.",
        "",
        "| method | window | overlap | processors | time (s) | peak RSS (MiB) | Dice vs meshtensor | "
        "Dice vs truth |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        time_text = f"{r['total_s']:.2f}" + (f" ({r['inference_s']:.2f})" if r["inference_s"] else "")
        window = (r["window"] if isinstance(r["window"], str) else
                  "whole scan" if r["window"] == 0 else f"{r['window']}³")
        lines.append(
            f"| {r['method']} | {window} | {r['overlap']} | {r['processors']} | {time_text} | "
            f"{r['peak_rss_mib']:.0f} | {r['dice_vs_meshtensor'][0]:.4f} / "
            f"{r['dice_vs_meshtensor'][1]:.4f} | {r['dice_vs_truth'][0]:.3f} / "
            f"{r['dice_vs_truth'][1]:.3f} |")
    with open(os.path.join(out, "scans.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def monai(args):
    import nibabel as nib
    import torch
    from monai.inferers import sliding_window_inference
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
    from to_pytorch import UNet3D, convert
    torch.set_num_threads(args.threads)
    state, config, _, _ = convert(args.checkpoint, "latest")
    model = UNet3D(**config)
    model.load_state_dict(state)
    model.eval()
    image = nib.load(args.scan)
    # The network sees the canonical (RAS) volume, windowed as meshtensor does.
    canonical = nib.as_closest_canonical(image)
    hu = canonical.get_fdata(dtype=np.float32)
    x = torch.from_numpy((np.clip(hu, -160, 240) - 40) / 200)[None, None].float()
    start = time.perf_counter()
    with torch.no_grad():
        window = tuple(x.shape[2:]) if args.window == 0 else (args.window,) * 3
        logits = sliding_window_inference(x, window, 1, model, overlap=args.overlap,
                                          mode="gaussian")
    inference = time.perf_counter() - start
    labels = logits.argmax(1)[0].numpy().astype(np.uint8)
    # Back to the scan's own axis order.
    ornt = nib.orientations.ornt_transform(nib.orientations.io_orientation(canonical.affine),
                                           nib.orientations.io_orientation(image.affine))
    labels = nib.orientations.apply_orientation(labels, ornt)
    nib.save(nib.Nifti1Image(labels, image.affine), args.output)
    print(json.dumps({"inference_s": inference}))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--unet3d", required=True)
    r.add_argument("--venv-python", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--quick", action="store_true")
    m = sub.add_parser("monai")
    m.add_argument("--checkpoint", required=True)
    m.add_argument("--scan", required=True)
    m.add_argument("--output", required=True)
    m.add_argument("--window", type=int, required=True)
    m.add_argument("--overlap", type=float, required=True)
    m.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    run(args) if args.command == "run" else monai(args)


if __name__ == "__main__":
    main()
