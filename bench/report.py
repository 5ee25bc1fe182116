"""Turns bench/run.sh's JSON lines into results.json and a Markdown report with the targets of
issue 5 beside each figure.

  python3 report.py raw.jsonl results.json results.md
"""
import json
import sys


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
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
             "Target: meshtensor ≥ 0.9x the raw oneDNN primitives on every shape, ≥ 1.0x PyTorch.",
             "",
             "| size | C | meshtensor | raw oneDNN (blocked) | raw oneDNN (ndhwc) | "
             + " | ".join(impls) + " | meshtensor / raw blocked | meshtensor / raw best | "
             "meshtensor / best PyTorch | % of peak |",
             "|---" * (9 + len(impls)) + "|"]
    for s, c in shapes:
        get = lambda impl: by.get((impl, s, c), {}).get("gflops")
        ours, blocked, ndhwc = get("meshtensor"), get("onednn_raw"), get("onednn_raw_ndhwc")
        torch = [get(i) for i in impls]
        best_torch = max([t for t in torch if t] or [None]) if any(torch) else None
        best_raw = max(v for v in (blocked, ndhwc) if v) if (blocked or ndhwc) else None
        ratio = lambda a, b: f"{a / b:.2f}x" if a and b else "–"
        lines.append(f"| {s}³ | {c} | {fmt(ours)} | {fmt(blocked)} | {fmt(ndhwc)} | "
                     + " | ".join(fmt(t) for t in torch)
                     + f" | {ratio(ours, blocked)} | {ratio(ours, best_raw)} | "
                     f"{ratio(ours, best_torch)} | "
                     f"{fmt(100 * ours / peak if ours and peak else None)}% |")
    return lines


def unet_section(rows):
    ours = [r for r in rows if r["bench"] == "unet_step" and "impl" not in r
            and r["processors"] == 1 and r["transport"] == "threads"]
    torch = [r for r in rows if r["bench"] == "unet_step" and "impl" in r]
    lines = ["", "## U-Net training step, one processor (C=8, depth 3, batch norm, batch 1)", "",
             "Training-step memory: peak RSS minus RSS before the model is built (for meshtensor "
             "also the library's own count, pool). Targets: time ≤ 0.5x and memory ≤ 0.6x the "
             "faster / smaller PyTorch.", "",
             "| size | meshtensor | step (s) | memory (MiB, RSS / pool) | PyTorch | "
             "PyTorch step (s) | PyTorch memory (MiB) | time ratio | memory ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    seen = set()
    for r in ours:
        key = (r["size"], r.get("recompute", False))
        if key in seen:
            continue
        seen.add(key)
        memory = r["rss_peak_mib"] - r["rss_before_model_mib"]
        variant = "--recompute" if r.get("recompute") else "activations kept"
        for t in [t for t in torch if t["size"] == r["size"]]:
            lines.append(f"| {r['size']}³ | {variant} | {r['step_s']:.3f} | {memory:.0f} / "
                         f"{r['pool_step_mib']:.0f} | {t['impl']} | {t['step_s']:.3f} | "
                         f"{t['step_memory_mib']:.0f} | {r['step_s'] / t['step_s']:.2f}x | "
                         f"{memory / t['step_memory_mib']:.2f}x |")
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
    return lines


def main():
    raw, json_out, md_out = sys.argv[1:4]
    rows = load(raw)
    peak = next((r["gflops"] for r in rows if r["bench"] == "fma_peak"), None)
    lines = ["# meshtensor benchmarks", "",
             "Produced by `bash bench/run.sh`; every figure beside its PyTorch counterpart from "
             "the same run, same shapes, same thread count."]
    lines += [f"> {r['text']}" for r in rows if r["bench"] == "note"]
    lines += [""] + conv_section(rows, peak) + unet_section(rows) + scaling_section(rows)
    with open(json_out, "w") as f:
        json.dump(rows, f, indent=1)
    with open(md_out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
