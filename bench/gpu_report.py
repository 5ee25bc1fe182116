"""bench/gpu.sh's report: its sub-runs' output as results.json and results.md (printed too).

  python3 gpu_report.py LOGS OUT --commit C --gpu G --date D --budget S [--dry-run]

LOGS holds status.tsv (a line per sub-run: impl, size, channels, precision, state, rc, wall_s,
limit_s, plan_s; state ran, skipped or absent) and each sub-run's IMPL-SIZE-C-PRECISION.out/.err.
Needs no package beyond Python's own.
"""
import argparse
import json
import os

IMPLS = ("meshtensor", "torch_eager", "torch_compile")
FAMILIES = ("convolution", "batch_norm", "pooling", "elementwise", "loss", "optimiser", "other")
# bench_unet's gpu_family_s may name meshtensor's own kernel families (kernels/plan/counts.hpp):
# each goes to the column where torch_bench.py puts PyTorch's kernels of that kind (copies and
# concatenation with the element-wise ones, reductions in "other"), and a name unknown here to
# "other".
ALIASES = {"conv": "convolution", "norm": "batch_norm", "pool": "pooling", "copy": "elementwise",
           "resample": "elementwise", "optimizer": "optimiser", "sum": "other"}


def families(seconds):
    if seconds is None:
        return None
    merged = {}
    for name, s in seconds.items():
        name = ALIASES.get(name, name)
        name = name if name in FAMILIES else "other"
        merged[name] = merged.get(name, 0.0) + s
    return merged


def json_lines(path):
    """Every JSON object printed in `path`, merged: bench_unet prints its step, then its breakdown
    (whose repeated fields, step_s, agree with the first)."""
    merged = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.startswith("{"):
                    for key, value in json.loads(line).items():
                        merged.setdefault(key, value)
    return merged


def last_line(*paths):
    for path in paths:
        if os.path.exists(path):
            with open(path, errors="replace") as f:
                lines = [line.strip() for line in f if line.strip()]
            if lines:
                return lines[-1][:300]
    return "(no output)"


def sub_run(logs, fields):
    """One sub-run's figures, or its error: what the row shows for that implementation."""
    impl, size, c, precision, state, rc, wall, limit, plan = fields
    name = os.path.join(logs, f"{impl}-{size}-{c}-{precision}")
    run = {"plan_s": int(plan), "limit_s": int(limit), "wall_s": int(wall)}
    out = json_lines(name + ".out")
    if state == "absent":
        run["error"] = "bench_unet not built here (nor in the bundle): skipped"
    elif state == "skipped":
        run["error"] = f"skipped: {limit} s left of the budget, too few to start"
    elif rc in ("124", "137"):
        run["error"] = f"timed out after {limit} s"
    elif rc != "0":
        run["error"] = f"exit {rc}: {last_line(name + '.err', name + '.out')}"
    elif "step_s" not in out:
        run["error"] = "no step_s in its output: " + last_line(name + ".err", name + ".out")
    else:
        run["output"] = out
    return impl, (int(size), int(c), precision), run


def figures(impl, out):
    """The columns of one implementation's output, by the same names for each. The peaks the
    table shows are the ones issue 71 names (meshtensor's pool peak, PyTorch's allocated peak);
    the like-for-like pairs go beside them: meshtensor's peak in use against PyTorch's allocated,
    its pool peak against PyTorch's reserved."""
    common = {"s": out.get("step_s"), "kernels_per_step": out.get("gpu_kernels_per_step"),
              "waits_per_step": out.get("gpu_waits_per_step"),
              "family_s": families(out.get("gpu_family_s"))}
    if impl == "meshtensor":
        pool, workspace = out.get("pool_peak_mib"), out.get("gpu_workspace_mib")
        return {**common, "peak_mib": None if pool is None else pool + (workspace or 0),
                "pool_peak_mib": pool, "workspace_mib": workspace,
                "in_use_peak_mib": out.get("pool_in_use_peak_mib"),
                # the same steps as one CUDA graph each (bench_unet --graphs both)
                "graphs_s": out.get("graphs_step_s"), "graphs_error": out.get("graphs_error"),
                "host_s": out.get("host_s"), "graphs_host_s": out.get("graphs_host_s")}
    # torch_bench.py on cuda; in a dry run the CPU's resident memory
    return {**common, "peak_mib": out.get("gpu_peak_mib", out.get("step_memory_mib")),
            "reserved_peak_mib": out.get("gpu_reserved_peak_mib")}


def ratio(a, b):
    return a / b if a is not None and b else None


def build_rows(logs):
    runs = {}
    with open(os.path.join(logs, "status.tsv")) as f:
        for line in f:
            impl, key, run = sub_run(logs, line.rstrip("\n").split("\t"))
            runs.setdefault(key, {})[impl] = run
    rows = []
    fp32_first = lambda key: (key[0], key[1], key[2] != "fp32")  # noqa: E731
    for size, c, precision in sorted(runs, key=fp32_first):
        by_impl = runs[(size, c, precision)]
        row = {"size": size, "channels": c, "precision": precision, "errors": {}, "runs": by_impl}
        for impl in IMPLS:
            run = by_impl.get(impl, {"error": "not run"})
            if "error" in run:
                row["errors"][impl] = run["error"]
            for field, value in figures(impl, run.get("output", {})).items():
                row[f"{impl}_{field}"] = value
        # The names results.json promises beside the rest.
        row["torch_peak_mib"] = row["torch_eager_peak_mib"]
        row["torch_compile_time_s"] = by_impl.get("torch_compile", {}).get("output", {}).get(
            "compile_s")
        row["meshtensor_over_torch_eager"] = ratio(row["meshtensor_s"], row["torch_eager_s"])
        row["meshtensor_over_torch_compile"] = ratio(row["meshtensor_s"], row["torch_compile_s"])
        row["meshtensor_graphs_over_torch_eager"] = ratio(row["meshtensor_graphs_s"],
                                                          row["torch_eager_s"])
        row["meshtensor_graphs_over_torch_compile"] = ratio(row["meshtensor_graphs_s"],
                                                            row["torch_compile_s"])
        rows.append(row)
    # bf16 against fp32 of the same size and channels, for each implementation.
    fp32 = {(r["size"], r["channels"]): r for r in rows if r["precision"] == "fp32"}
    for row in rows:
        base = fp32.get((row["size"], row["channels"]))
        if row["precision"] == "bf16" and base:
            row["bf16_over_fp32"] = {i: ratio(row[f"{i}_s"], base[f"{i}_s"]) for i in IMPLS}
    return rows


def num(value, form="{:.4f}"):
    return "n/a" if value is None else form.format(value)


def three(row, field, form):
    return " · ".join(num(row[f"{i}_{field}"], form) for i in IMPLS)


def markdown(meta, rows):
    x = "{:.2f}×"
    what, where = (("a dry run on the CPU (tiny sizes: checks the pipeline, not the speed)",
                    "threads") if meta["dry_run"] else (f"one {meta['gpu']}", "the nccl transport"))
    lines = [f"# U-Net training step, meshtensor beside PyTorch, on {what}", "",
             f"commit {meta['commit']}, {meta['date']}, {meta['torch']}; depth 3, batch 1, "
             "median step in seconds. PyTorch: cudnn.benchmark on, TF32 off, bf16 by "
             "torch.autocast; torch.compile of the model (loss and Adam eager). meshtensor: "
             f"bench_unet on {where}, one processor. Ratios are times: below 1× meshtensor "
             "is faster; bf16 / fp32 below 1× bf16 is faster.", "",
             "| size | C | precision | meshtensor | mt graphs | eager | compile | compile time | "
             "mt / eager | mt / compile | graphs / eager | graphs / compile | "
             "bf16 / fp32 (mt · eager · compile) |",
             "|---" * 13 + "|"]
    for r in rows:
        bf16 = r.get("bf16_over_fp32")
        lines.append(
            f"| {r['size']}³ | {r['channels']} | {r['precision']} | {num(r['meshtensor_s'])} | "
            f"{num(r['meshtensor_graphs_s'])} | "
            f"{num(r['torch_eager_s'])} | {num(r['torch_compile_s'])} | "
            f"{num(r['torch_compile_time_s'], '{:.1f}')} | "
            f"{num(r['meshtensor_over_torch_eager'], x)} | "
            f"{num(r['meshtensor_over_torch_compile'], x)} | "
            f"{num(r['meshtensor_graphs_over_torch_eager'], x)} | "
            f"{num(r['meshtensor_graphs_over_torch_compile'], x)} | "
            + (" · ".join(num(bf16[i], x) for i in IMPLS) if bf16 else "") + " |")
    lines += ["", "Per step, each mt · eager · compile. Peak: meshtensor's pool peak (plus its "
              "GPU workspace where printed), PyTorch's max_memory_allocated. Kernels: launches "
              "(cudaLaunchKernel, cuLaunchKernel); host waits: synchronisations and synchronous "
              "copies (torch_bench.py says which events).", "",
              "| size | C | precision | peak MiB | kernels / step | host waits / step |",
              "|---" * 6 + "|"]
    for r in rows:
        lines.append(f"| {r['size']}³ | {r['channels']} | {r['precision']} | "
                     f"{three(r, 'peak_mib', '{:.0f}')} | "
                     f"{three(r, 'kernels_per_step', '{:.0f}')} | "
                     f"{three(r, 'waits_per_step', '{:.0f}')} |")
    lines += ["", "meshtensor's host time to queue a step, ms: its steps as they are, and as one CUDA "
              "graph each (bench_unet --graphs both):", "",
              "| size | C | precision | as they are | as graphs |", "|---" * 5 + "|"]
    for r in rows:
        graphs = r["meshtensor_graphs_error"] or num(r["meshtensor_graphs_host_s"] and
                                                     1e3 * r["meshtensor_graphs_host_s"], "{:.2f}")
        lines.append(f"| {r['size']}³ | {r['channels']} | {r['precision']} | "
                     f"{num(r['meshtensor_host_s'] and 1e3 * r['meshtensor_host_s'], '{:.2f}')} | "
                     f"{graphs} |")
    lines += ["", "GPU time per step by kernel family, ms (torch_bench.py's FAMILIES says how a "
              "kernel is classed):", "",
              "| size | C | precision | impl | " + " | ".join(FAMILIES) + " | sum |",
              "|---" * (len(FAMILIES) + 5) + "|"]
    for r in rows:
        for impl in IMPLS:
            family = r[f"{impl}_family_s"] or {}
            cells = [f"{1e3 * family.get(f, 0.0):.1f}" if family else "n/a" for f in FAMILIES]
            total = f"{1e3 * sum(family.values()):.1f}" if family else "n/a"
            lines.append(f"| {r['size']}³ | {r['channels']} | {r['precision']} | {impl} | "
                         + " | ".join(cells) + f" | {total} |")
    lines += ["", f"Sub-runs within the {meta['budget_s']} s budget (planned / allowed / taken "
              "seconds) and errors:", ""]
    for r in rows:
        for impl in IMPLS:
            run = r["runs"].get(impl, {})
            error = r["errors"].get(impl, "ok")
            lines.append(f"- {r['size']}³ C={r['channels']} {r['precision']} {impl}: "
                         f"{run.get('plan_s')} / {run.get('limit_s')} / {run.get('wall_s')} s, "
                         f"{error}")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs")
    parser.add_argument("out")
    for flag in ("--commit", "--gpu", "--date"):
        parser.add_argument(flag, default="unknown")
    parser.add_argument("--budget", type=int, default=480)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    rows = build_rows(args.logs)
    impls = [r["runs"].get(i, {}).get("output", {}).get("impl") for r in rows for i in IMPLS]
    meta = {"commit": args.commit, "gpu": args.gpu, "date": args.date,
            "torch": next((i for i in impls if i), "PyTorch n/a"), "budget_s": args.budget,
            "dry_run": args.dry_run}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({**meta, "rows": rows}, f, indent=1)
    text = markdown(meta, rows)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(text)
    print(text, end="")


if __name__ == "__main__":
    main()
