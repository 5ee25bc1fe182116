"""Turns bench_resolution's JSON lines (one per resolution) into a Markdown report and an SVG plot,
with the standard library only.

  python3 resolution_report.py resolution.jsonl resolution.md resolution.svg [--wall-seconds S]
"""
import json
import os
import sys

# Tumour radii in 64ths of the field of view (phantom.hpp draws 2 to 8): small, medium, large.
RADIUS_BINS = [(2, 4), (4, 6), (6, 8.001)]
DETECTED = 0.5  # a tumour counts as detected when at least this share of its voxels is found
COLOURS = {32: "#e66101", 64: "#5e3c99", 128: "#1b7837"}


def load(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.startswith("{")]
    return sorted(rows, key=lambda r: r["size"])


def cpu_text():
    model, avx512 = "unknown CPU", False
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and " avx512f" in line:
                avx512 = True
    vectors = "AVX-512" if avx512 else "no AVX-512"
    return f"{model}, {os.cpu_count()} cores, {vectors}"


def found_share(t):
    return t["found_voxels"] / t["truth_voxels"] if t["truth_voxels"] else 0.0


def in_bin(t, low, high):
    return low <= t["radius_fraction"] * 64 < high


def dice_table(rows):
    truth = rows[0]["truth_size"]
    lines = [f"| resolution | voxel edge (of {truth}³ voxels) | steps | training time | "
             f"median s/step | tumour Dice vs {truth}³ truth | organ Dice vs {truth}³ truth | "
             "tumour / organ Dice at own resolution | sampled truth: tumour / organ Dice |",
             "|---" * 9 + "|"]
    for r in rows:
        lines.append(
            f"| {r['size']}³ | {truth // r['size']} | {r['steps']} | {r['train_s']:.0f} s | "
            f"{r['step_s']:.2f} | **{r['dice_tumour']:.3f}** | **{r['dice_organ']:.3f}** | "
            f"{r['native_dice_tumour']:.3f} / {r['native_dice_organ']:.3f} | "
            f"{r['sampled_dice_tumour']:.3f} / {r['sampled_dice_organ']:.3f} |")
    return lines


def detection_table(rows):
    sizes = [r["size"] for r in rows]
    lines = ["| tumour radius (of the field of view) | radius in voxels at "
             + ", ".join(f"{s}³" for s in sizes) + " | "
             + " | ".join(f"{s}³: detected (mean share found)" for s in sizes) + " |",
             "|---" * (2 + len(sizes)) + "|"]
    for low, high in RADIUS_BINS:
        cells = []
        for r in rows:
            chosen = [t for t in r["tumours"] if in_bin(t, low, high)]
            detected = sum(found_share(t) >= DETECTED for t in chosen)
            mean = sum(map(found_share, chosen)) / len(chosen) if chosen else 0.0
            cells.append(f"{detected}/{len(chosen)} ({mean:.0%})")
        voxels = ", ".join(f"{low * s / 64:g}–{min(high, 8) * s / 64:g}" for s in sizes)
        lines.append(f"| {low}/64–{min(high, 8):g}/64 | {voxels} | " + " | ".join(cells) + " |")
    return lines


def markdown(rows, wall_seconds):
    r0 = rows[0]
    lines = [
        f"The example's U-Net (C={r0['channels']}, depth {r0['depth']}, batch norm, batch 1, "
        f"lr {r0['lr']:g} cosine-decayed) trained for {r0['steps']} steps at each resolution on "
        f"the same phantoms (seed {r0['seed']}: the same anatomy sampled on each grid), then "
        f"scored on {r0['volumes']} held-out volumes against the {r0['truth_size']}³ truth: "
        "class probabilities upsampled trilinearly, argmax. Global Dice over the volumes. "
        "'Sampled truth': the true labels at that resolution, repeated to the full grid, "
        "against the full-resolution truth (what the grid alone allows).",
        "",
        *dice_table(rows),
        "",
        f"Tumours of the held-out volumes by radius; detected: at least {DETECTED:.0%} of its "
        f"{r0['truth_size']}³ voxels labelled tumour; mean share found in brackets.",
        "",
        *detection_table(rows),
        "",
        f"CPU: {cpu_text()}; {r0['processors']} processor(s) x {r0['threads']} compute threads, "
        "at nice 19 beside other work.",
    ]
    if wall_seconds is not None:
        lines.append(f"Whole run (build included): {wall_seconds / 60:.1f} minutes.")
    return "\n".join(lines) + "\n"


class Panel:
    """A plot area mapping data coordinates to SVG pixels."""

    def __init__(self, left, top, width, height, xs, ys):
        self.left, self.top, self.width, self.height = left, top, width, height
        self.xs, self.ys = xs, ys

    def x(self, value):
        return self.left + (value - self.xs[0]) / (self.xs[1] - self.xs[0]) * self.width

    def y(self, value):
        share = (value - self.ys[0]) / (self.ys[1] - self.ys[0])
        return self.top + self.height - share * self.height

    def frame(self, title, xlabel, ylabel, xticks, yticks):
        out = [f'<rect x="{self.left}" y="{self.top}" width="{self.width}" '
               f'height="{self.height}" fill="none" stroke="#444"/>',
               f'<text x="{self.left + self.width / 2}" y="{self.top - 10}" '
               f'text-anchor="middle" font-weight="bold">{title}</text>',
               f'<text x="{self.left + self.width / 2}" y="{self.top + self.height + 36}" '
               f'text-anchor="middle">{xlabel}</text>',
               f'<text transform="translate({self.left - 40},{self.top + self.height / 2}) '
               f'rotate(-90)" text-anchor="middle">{ylabel}</text>']
        for value, text in xticks:
            out.append(f'<text x="{self.x(value):.1f}" y="{self.top + self.height + 16}" '
                       f'text-anchor="middle">{text}</text>')
        for value in yticks:
            out.append(f'<line x1="{self.left}" x2="{self.left + self.width}" '
                       f'y1="{self.y(value):.1f}" y2="{self.y(value):.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{self.left - 6}" y="{self.y(value) + 4:.1f}" '
                       f'text-anchor="end">{value:g}</text>')
        return out


def polyline(panel, points, colour, dashed=False):
    path = " ".join(f"{panel.x(x):.1f},{panel.y(y):.1f}" for x, y in points)
    dash = ' stroke-dasharray="6,4"' if dashed else ""
    dots = [f'<circle cx="{panel.x(x):.1f}" cy="{panel.y(y):.1f}" r="3.5" fill="{colour}"/>'
            for x, y in points]
    return [f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>',
            *dots]


def legend(x, y, entries):
    out = []
    for i, (colour, dashed, text) in enumerate(entries):
        dash = ' stroke-dasharray="6,4"' if dashed else ""
        out.append(f'<line x1="{x}" x2="{x + 24}" y1="{y + 16 * i}" y2="{y + 16 * i}" '
                   f'stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{x + 30}" y="{y + 16 * i + 4}">{text}</text>')
    return out


def dice_panel(rows):
    levels = list(range(len(rows)))  # resolutions evenly spaced: each doubles the last
    panel = Panel(70, 40, 330, 250, (-0.3, len(rows) - 0.7), (0, 1))
    out = panel.frame(f"Dice against the {rows[0]['truth_size']}³ truth",
                      "resolution (same field of view)", "Dice",
                      [(i, f"{r['size']}³") for i, r in zip(levels, rows)],
                      [0, 0.2, 0.4, 0.6, 0.8, 1])
    for key, colour, dashed in [("dice_tumour", "#c51b7d", False),
                                ("dice_organ", "#1b7837", False),
                                ("sampled_dice_tumour", "#c51b7d", True),
                                ("sampled_dice_organ", "#1b7837", True)]:
        out += polyline(panel, [(i, r[key]) for i, r in zip(levels, rows)], colour, dashed)
    out += legend(panel.left + 10, panel.top + panel.height - 64,
                  [("#c51b7d", False, "tumour, predicted"), ("#1b7837", False, "organ, predicted"),
                   ("#c51b7d", True, "tumour, sampled truth"),
                   ("#1b7837", True, "organ, sampled truth")])
    return out


def tumour_panel(rows):
    panel = Panel(500, 40, 330, 250, (1.5, 8.5), (0, 1))
    out = panel.frame("Share of each tumour found", "tumour radius (64ths of the field of view)",
                      "share of its voxels labelled tumour", [(v, str(v)) for v in range(2, 9)],
                      [0, 0.2, 0.4, 0.6, 0.8, 1])
    threshold = panel.y(DETECTED)
    out.append(f'<line x1="{panel.left}" x2="{panel.left + panel.width}" y1="{threshold:.1f}" '
               f'y2="{threshold:.1f}" stroke="#888" stroke-dasharray="4,4"/>')
    out.append(f'<text x="{panel.left + panel.width - 6}" y="{threshold + 14:.1f}" fill="#666" '
               'text-anchor="end">detected above the line</text>')
    for i, r in enumerate(rows):
        colour = COLOURS.get(r["size"], "#333")
        shift = 0.12 * (i - (len(rows) - 1) / 2)  # one tumour's dots side by side, not on top
        for t in r["tumours"]:
            out.append(f'<circle cx="{panel.x(t["radius_fraction"] * 64 + shift):.1f}" '
                       f'cy="{panel.y(found_share(t)):.1f}" r="4" fill="{colour}" '
                       'fill-opacity="0.75"/>')
    for i, r in enumerate(rows):
        colour = COLOURS.get(r["size"], "#333")
        x, y = panel.left + panel.width - 70, panel.top + panel.height - 48 + 16 * i
        out.append(f'<circle cx="{x}" cy="{y}" r="4" fill="{colour}"/>')
        out.append(f'<text x="{x + 10}" y="{y + 4}">{r["size"]}³</text>')
    return out


def svg(rows):
    body = dice_panel(rows) + tumour_panel(rows)
    return ('<svg xmlns="http://www.w3.org/2000/svg" width="860" height="340" '
            'font-family="sans-serif" font-size="12">\n'
            '<rect width="860" height="340" fill="white"/>\n'
            + "\n".join(body) + "\n</svg>\n")


def main(argv):
    if len(argv) not in (4, 6):
        sys.exit(__doc__)
    wall_seconds = float(argv[5]) if len(argv) == 6 and argv[4] == "--wall-seconds" else None
    rows = load(argv[1])
    with open(argv[2], "w") as f:
        f.write(markdown(rows, wall_seconds))
    with open(argv[3], "w") as f:
        f.write(svg(rows))


if __name__ == "__main__":
    main(sys.argv)
