"""Turns bench/run.sh's JSON lines into results.json and a Markdown report with the targets
beside each figure.

  python3 report.py raw.jsonl results.json results.md
"""
import json
import statistics
import sys


def load(path):
    """The JSON lines of `path`; each unet_step_breakdown line goes to the unet_step before it."""
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            if row["bench"] == "unet_step_breakdown":
                steps = [r for r in rows if r["bench"] == "unet_step" and "impl" not in r]
                if steps:
                    steps[-1]["breakdown"] = row
                continue
            rows.append(row)
    return rows


def fmt(value, digits=0):
    return "–" if value is None else f"{value:.{digits}f}"


def conv_section(rows, peak):
    convs = [r for r in rows if r["bench"] == "conv"]
    impls = sorted({r["impl"] for r in convs if r["impl"].startswith("pytorch")})
    shapes = sorted({(r["size"], r["channels"]) for r in convs})
    by = {(r["impl"], r["size"], r["channels"]): r for r in convs}
    lines = ["## 3x3x3 convolution, forward + backward (GFLOP/s, batch 1, same padding)", "",
             f"Machine FMA peak by a plain FMA loop: **{fmt(peak, 1)} GFLOP/s**. "
             "Target: meshtensor ≥ 0.9x the raw oneDNN primitives on every shape, ≥ 1.0x PyTorch. "
             "bf16: meshtensor's bfloat16 kernels pass by pass (the roads training takes), against "
             "the fp32 op.",
             "",
             "| size | C | meshtensor | raw oneDNN (blocked) | raw oneDNN (ndhwc) | "
             + " | ".join(impls) + " | meshtensor / raw blocked | meshtensor / raw best | "
             "meshtensor / best PyTorch | % of peak | meshtensor bf16 kernels | bf16 / fp32 |",
             "|---" * (11 + len(impls)) + "|"]
    for s, c in shapes:
        get = lambda impl: by.get((impl, s, c), {}).get("gflops")
        ours, blocked, ndhwc = get("meshtensor"), get("onednn_raw"), get("onednn_raw_ndhwc")
        bf16 = get("meshtensor_kernels_bf16")
        torch = [get(i) for i in impls]
        best_torch = max([t for t in torch if t] or [None]) if any(torch) else None
        best_raw = max(v for v in (blocked, ndhwc) if v) if (blocked or ndhwc) else None
        ratio = lambda a, b: f"{a / b:.2f}x" if a and b else "–"
        lines.append(f"| {s}³ | {c} | {fmt(ours)} | {fmt(blocked)} | {fmt(ndhwc)} | "
                     + " | ".join(fmt(t) for t in torch)
                     + f" | {ratio(ours, blocked)} | {ratio(ours, best_raw)} | "
                     f"{ratio(ours, best_torch)} | "
                     f"{fmt(100 * ours / peak if ours and peak else None)}% | "
                     f"{fmt(bf16)} | {ratio(bf16, ours)} |")
    return lines


def einsum_section(rows, peak):
    products = [r for r in rows if r["bench"] == "einsum"]
    if not products:
        return []
    impls = sorted({r["impl"] for r in products if r["impl"].startswith("pytorch")})
    shapes = sorted({(r["rows"], r["in"], r["out"]) for r in products})
    by = {(r["impl"], r["precision"], r["rows"], r["in"], r["out"]): r for r in products}
    lines = ["", "## einsum as a dense layer, forward + backward (GFLOP/s of the step)", "",
             "`einsum({x[rows, in], w[in, out]}, \"rows, out\")` and its two gradient products, "
             "one processor; PyTorch's `x @ w` beside it. Target: ≥ 70% of the FMA peak from "
             "512 × 2048 × 2048 up, ahead of PyTorch.",
             "",
             "| rows × in × out | meshtensor fp32 | " + " | ".join(impls)
             + " | meshtensor / best PyTorch | % of peak | meshtensor bf16 | bf16 / fp32 |",
             "|---" * (6 + len(impls)) + "|"]
    for shape in shapes:
        get = lambda impl, precision="fp32": by.get((impl, precision) + shape, {}).get("step_gflops")
        ours, bf16 = get("meshtensor"), get("meshtensor", "bf16")
        torch = [get(i) for i in impls]
        best_torch = max([t for t in torch if t] or [None]) if any(torch) else None
        ratio = lambda a, b: f"{a / b:.2f}x" if a and b else "–"
        lines.append(f"| {shape[0]} × {shape[1]} × {shape[2]} | {fmt(ours)} | "
                     + " | ".join(fmt(t) for t in torch)
                     + f" | {ratio(ours, best_torch)} | "
                     f"{fmt(100 * ours / peak if ours and peak else None)}% | {fmt(bf16)} | "
                     f"{ratio(bf16, ours)} |")
    return lines


def variant(r):
    """How a run of ours differs from the plain fp32 one."""
    if r.get("precision", "fp32") == "bf16":
        return "bf16"
    return "fp32 --recompute" if r.get("recompute") else "fp32"


def unet_section(rows, peak, pairs=()):
    ours = [r for r in rows if r["bench"] == "unet_step" and "impl" not in r
            and r["processors"] == 1 and r["transport"] == "threads"]
    torch = [r for r in rows if r["bench"] == "unet_step" and "impl" in r]
    lines = ["", "## U-Net training step, one processor (C=8, depth 3, batch norm, batch 1)", "",
             "Training-step memory: peak RSS minus RSS before the model is built (for meshtensor "
             "also the library's own count, pool). % of peak: the model's convolution FLOPs per "
             "step (forward and both backward passes) over the step time, against the FMA loop. "
             "Ratios against the faster PyTorch at the same precision (bf16: PyTorch's "
             "`autocast(bfloat16)`). Targets: fp32 ≤ 0.25x PyTorch fp32 and ≥ 50% of peak; bf16 "
             "≤ 0.6x our fp32 step, memory ≤ 0.55x our fp32, ≤ 0.5x PyTorch bf16.", "",
             "| size | run | step (s) | % of peak | memory (MiB, RSS / pool) | "
             "time / PyTorch | memory / PyTorch |",
             "|---|---|---|---|---|---|---|"]
    for size in sorted({r["size"] for r in ours + torch}):
        def fastest_torch(precision):
            same = [t for t in torch if t["size"] == size and t.get("precision", "fp32") == precision]
            return min(same, key=lambda t: t["step_s"]) if same else None
        seen = set()
        for r in [r for r in ours if r["size"] == size]:
            if variant(r) in seen:
                continue
            seen.add(variant(r))
            memory = r["rss_peak_mib"] - r["rss_before_model_mib"]
            t = fastest_torch(r.get("precision", "fp32"))
            percent = 100 * r["conv_gflops"] / peak if peak and r.get("conv_gflops") else None
            lines.append(
                f"| {size}³ | meshtensor {variant(r)} | {r['step_s']:.3f} | {fmt(percent, 1)}% | "
                f"{memory:.0f} / {r['pool_step_mib']:.0f} | "
                + (f"{r['step_s'] / t['step_s']:.2f}x | {memory / t['step_memory_mib']:.2f}x |"
                   if t else "– | – |"))
        for t in sorted([t for t in torch if t["size"] == size],
                        key=lambda t: (t["impl"], t.get("precision", "fp32"))):
            lines.append(f"| {size}³ | {t['impl']} {t.get('precision', 'fp32')} | "
                         f"{t['step_s']:.3f} | – | {t['step_memory_mib']:.0f} | – | – |")
        by = {}  # the rows the table shows: the first of each variant (the scaling runs follow)
        for r in ours:
            if r["size"] == size:
                by.setdefault(variant(r), r)
        if "fp32" in by and "bf16" in by:
            f32, b16 = by["fp32"], by["bf16"]
            mem = lambda r: r["rss_peak_mib"] - r["rss_before_model_mib"]
            lines += ["", f"{size}³: bf16 / fp32 step {b16['step_s'] / f32['step_s']:.2f}x "
                      f"in the table{paired_ratios(pairs, size)} (target ≤ 0.6x), memory "
                      f"{mem(b16) / mem(f32):.2f}x RSS, "
                      f"{b16['pool_step_mib'] / f32['pool_step_mib']:.2f}x pool "
                      f"(target ≤ 0.55x).", ""]
    return lines + breakdown_section(ours)


def paired_ratios(pairs, size):
    """', X in alternated steps (A to B)': the median of bf16 / fp32 over the steps of both models
    run in turn in one process (bench_unet --precision pair), or nothing where there is none."""
    for r in pairs:
        if r["size"] == size:
            return (f"; {r['bf16_over_fp32']:.2f}x in {r['steps']} alternated steps "
                    f"({r['bf16_over_fp32_low']:.2f}–{r['bf16_over_fp32_high']:.2f})")
    return ""


def breakdown_section(ours):
    """Where our one-processor steps' time goes: kernels by family, halo, the rest."""
    lines = ["", "### Where the step goes (one processor; seconds per step, each kernel call "
             "timed in extra steps)", "",
             "| size | run | step | convolutions (forward / input grad / weight grad) | "
             "other kernels | communication | rest (ops' own work, waiting) |",
             "|---|---|---|---|---|---|---|"]
    seen = set()
    for r in ours:
        b = r.get("breakdown")
        if not b or (r["size"], variant(r)) in seen:
            continue  # the first run of each: the all-cores one, not the scaling table's
        seen.add((r["size"], variant(r)))
        conv = b["kernel_s"].get("conv", 0.0)
        passes = b.get("conv_pass_s", {})
        others = b["kernels_s"] - conv
        lines.append(
            f"| {r['size']}³ | {variant(r)} | {b['step_s']:.3f} | {conv:.3f} "
            f"({passes.get('forward', 0):.3f} / {passes.get('backward_input', 0):.3f} / "
            f"{passes.get('backward_weight', 0):.3f}) | {others:.3f} | {b['halo_s']:.3f} | "
            f"{b['rest_s']:.3f} |")
    return lines


def scaling_section(rows):
    runs = [r for r in rows if r["bench"] == "unet_step" and "impl" not in r]
    sizes = sorted({r["size"] for r in runs})
    size = sizes[-1] if sizes else None
    lines = ["", f"## Spatial scaling at {size}³ (x split over P processors)", "",
             "Per-processor peak: the library's pool count (threads share one process, so RSS "
             "says nothing per processor; under MPI the rank's peak RSS is shown too). Bound: "
             "1.15 x (1-processor peak / P) + parameters and Adam state. Halo share: time spent in "
             "halo exchanges per step that computation did not hide (posting, waiting, unpacking), "
             "with the convolutions' overlap and without it (MESHTENSOR_HALO_OVERLAP=off: "
             "exchanged before computing), "
             "and bytes sent per processor (mean) vs the analytic minimum (one plane each way per cut, per conv, forward "
             "and backward).", "",
             "| transport | P | threads/P | step (s) | speed-up | peak/processor (MiB) | bound | "
             "within | rank RSS peak | halo share | without overlap | halo bytes / minimum |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    runs = [r for r in runs if r.get("mesh", "p:").startswith("p:")
            and r.get("deep_halos", "off") in ("off", "none", "")
            and r.get("precision", "fp32") == "fp32"]
    for transport in ("threads", "mpi"):
        def scaling_runs(overlap):
            # the scaling runs, not the one-processor table's
            return {r["processors"]: r for r in runs
                    if r["transport"] == transport and r["size"] == size
                    and not r.get("recompute") and r.get("halo_overlap", True) == overlap}
        latest, unhidden = scaling_runs(True), scaling_runs(False)
        series = [latest[p] for p in sorted(latest)]
        if not series or series[0]["processors"] != 1:
            continue
        base = series[0]
        for r in series:
            p = r["processors"]
            bound = 1.15 * base["pool_peak_mib"] / p + r["parameters_and_state_mib"]
            within = "yes" if r["pool_peak_mib"] <= bound or p == 1 else \
                f"no (+{100 * (r['pool_peak_mib'] / bound - 1):.0f}%)"
            minimum = r["halo_bytes_minimum"]
            halo_ratio = f"{r['halo_bytes'] / minimum:.3f}" if minimum else "–"
            rss = f"{r['rss_peak_mib']:.0f}" if transport == "mpi" else "–"
            off = unhidden.get(p)
            without = f"{100 * off['halo_s'] / off['step_s']:.1f}%" if off else "–"
            lines.append(f"| {transport} | {p} | {r['threads']} | {r['step_s']:.3f} | "
                         f"{base['step_s'] / r['step_s']:.2f}x | {r['pool_peak_mib']:.0f} | "
                         f"{bound:.0f} | {within} | {rss} | "
                         f"{100 * r['halo_s'] / r['step_s']:.1f}% | {without} | {halo_ratio} |")
    threads = {r["processors"]: r for r in runs
               if r["transport"] == "threads" and r["size"] == size
               and r.get("halo_overlap", True)}
    if 1 in threads and 2 in threads:
        one_by_two, two_by_one = threads[1], threads[2]
        lines += ["", f"2 processors x {two_by_one['threads']} thread vs 1 processor x "
                  f"{one_by_two['threads']} threads: efficiency "
                  f"{one_by_two['step_s'] / two_by_one['step_s']:.2f} (target ≥ 0.90)."]
    return lines + exposed_halo_section(rows, size)


def exposed_halo_section(rows, size):
    """At P = 8: the halo share with and without overlap, with deep halos, and on a 2x2x2 split."""
    runs = [r for r in rows if r["bench"] == "unet_step" and "impl" not in r
            and r["processors"] == 8 and r["size"] == size
            and r.get("precision", "fp32") == "fp32"]
    if not runs:
        return []
    lines = ["", f"### Exposed halo at P = 8, {size}³ (target ≤ 2% of the step)", "",
             "Halo share: halo-exchange time per step that computation did not hide (the "
             "largest over processors). Deep halos: a level's two convolutions share one "
             "exchange of a halo as wide as both windows.", "",
             "| transport | split | overlap | deep halos | step (s) | halo share | "
             "halo exchanges / step | peak/processor (MiB) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in sorted(runs, key=lambda r: (r["transport"], r.get("mesh", ""),
                                          not r.get("halo_overlap", True),
                                          r.get("deep_halos", "off"))):
        split = r.get("layouts") or "x"
        lines.append(
            f"| {r['transport']} | {split} over {r.get('mesh', 'p:8')} | "
            f"{'on' if r.get('halo_overlap', True) else 'off'} | {r.get('deep_halos', 'off')} | "
            f"{r['step_s']:.3f} | {100 * r['halo_s'] / r['step_s']:.1f}% | "
            f"{r.get('halo_exchanges', 0):.0f} | {r['pool_peak_mib']:.0f} |")
    return lines


def main():
    raw, json_out, md_out = sys.argv[1:4]
    every = load(raw)
    rows = [r for r in every if r["bench"] != "unet_precision_pair"]  # a line of their own
    pairs = [r for r in every if r["bench"] == "unet_precision_pair"]
    peak = next((r["gflops"] for r in rows if r["bench"] == "fma_peak"), None)
    lines = ["# meshtensor benchmarks", "",
             "Produced by `bash bench/run.sh`; every figure beside its PyTorch counterpart from "
             "the same run, same shapes, same thread count."]
    lines += [f"> {r['text']}" for r in rows if r["bench"] == "note"]
    lines += [""] + conv_section(rows, peak) + einsum_section(rows, peak)
    lines += unet_section(rows, peak, pairs) + scaling_section(rows)
    with open(json_out, "w") as f:
        json.dump(every, f, indent=1)
    with open(md_out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
