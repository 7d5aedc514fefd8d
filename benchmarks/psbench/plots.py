"""The suite's plots, per workload: <workload>_clock.png and _time.png (the
metric against clock and against wall time, a panel per straggler setting,
a line per mode: the median over seeds at each evaluation, the reference
dashed) and <workload>_ttt.png (time to target per mode and straggler
setting: median bar, min-max error bars, hatched when not reached).

matplotlib is imported when a plot is drawn, so the other modules load
without it.
"""

import math
import os
import statistics

from psbench.report import cells_of


def median_curve(runs, x_index):
    """Per evaluation index common to every run: (median x, median metric)."""
    runs = [r for r in runs if not r.error and r.evals]
    if not runs:
        return [], []
    n = min(len(r.evals) for r in runs)
    xs = [statistics.median(r.evals[i][x_index] for r in runs) for i in range(n)]
    ys = [statistics.median(r.evals[i][2] for r in runs) for i in range(n)]
    return xs, ys


def y_limits(w, curves, threshold):
    """A window around the approach to the target: the early evaluations of a
    run are far below it and would flatten the part that decides the time."""
    values = [y for _, ys in curves for y in ys]
    if not values or threshold is None:
        return None
    if w.higher_is_better:
        best = max(values)
        gap = max(abs(best - threshold), 0.002)
        low = min(best, threshold) - 4 * gap
        high = max(best, threshold)
        return low, high + 0.15 * (high - low)
    best = min(values)
    gap = max(abs(threshold - best), 1e-4 * abs(threshold))
    high = max(best, threshold) + 4 * gap
    low = min(best, threshold)
    return low - 0.15 * (high - low), high


def save_png(fig, path, dpi):
    """Saves the figure; with Pillow (a dependency of Debian's matplotlib) as
    a 64-colour palette PNG, a third of the size with no visible change."""
    import matplotlib.pyplot as plt
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=64)
    small.save(path, optimize=True)


def plot_workload(w, suite, runs, out, dpi):
    """Draws the three PNGs of workload w under `out`; returns their paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    ref, grid = cells_of(w, suite, runs)
    colors = plt.get_cmap("tab10")
    mode_color = {m.name: colors(i) for i, m in enumerate(suite.modes)}
    thresholds = [r.threshold for r in runs if r.workload is w and r.threshold is not None]
    threshold = statistics.median(thresholds) if thresholds else None
    files = []
    n = len(suite.stragglers)
    for kind, x_index, xlabel in (("clock", 0, "clock (steps per worker; reference: its steps / "
                                   "%d)" % suite.workers),
                                  ("time", 1, "seconds since the first worker started")):
        fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.6), sharey=True, squeeze=False)
        all_curves = []
        for ax, st in zip(axes[0], suite.stragglers):
            for m in suite.modes:
                xs, ys = median_curve(grid[(m.name, st.name)].runs, x_index)
                if xs:
                    ax.plot(xs, ys, color=mode_color[m.name], label=m.label, lw=1.3)
                    all_curves.append((xs, ys))
            xs, ys = median_curve(ref.runs, x_index)
            if xs:
                ax.plot(xs, ys, color="black", ls="--", lw=1.3, label="1 process (reference)")
                all_curves.append((xs, ys))
            if threshold is not None:
                ax.axhline(threshold, color="gray", ls=":", lw=1, label="target")
            ax.set_title("stragglers: %s" % st.name, fontsize=9)
            ax.set_xlabel(xlabel, fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        limits = y_limits(w, all_curves, threshold)
        if limits:
            axes[0][0].set_ylim(*limits)
        axes[0][0].set_ylabel(w.metric, fontsize=8)
        if axes[0][-1].get_legend_handles_labels()[0]:
            axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        fig.suptitle("%s: %s against %s (median over seeds)" %
                     (w.name, w.metric, "clock" if kind == "clock" else "wall time"), fontsize=10)
        fig.tight_layout()
        path = os.path.join(out, "%s_%s.png" % (w.name, kind))
        save_png(fig, path, dpi)
        files.append(path)

    # Time to target: a group per mode, a bar per straggler setting.
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(suite.modes) * max(1, n) / 2.2), 3.6))
    width = 0.8 / n
    bar_colors = [plt.get_cmap("Set2")(i) for i in range(n)]
    top = 0
    for j, st in enumerate(suite.stragglers):
        for i, m in enumerate(suite.modes):
            c = grid[(m.name, st.name)]
            x = i + (j - (n - 1) / 2) * width
            if not c.times:
                continue
            med = c.median_time()
            reached = [t for t in c.times if not math.isinf(t)]
            if math.isinf(med):
                # Not reached by most seeds: a hatched bar as long as the runs lasted.
                height = statistics.median(r.evals[-1][1] for r in c.ok)
                ax.bar(x, height, width, color="white", edgecolor=bar_colors[j], hatch="///")
                ax.text(x, height, "n.r.", ha="center", va="bottom", fontsize=6)
                top = max(top, height)
                continue
            lo, hi = min(reached), max(reached)
            ax.bar(x, med, width, color=bar_colors[j])
            ax.errorbar(x, med, yerr=[[med - lo], [hi - med]], color="black", capsize=2, lw=0.8)
            if len(reached) < len(c.times):
                ax.text(x, hi, "%d/%d" % (len(reached), len(c.times)), ha="center",
                        va="bottom", fontsize=6)
            top = max(top, hi)
    if ref.times and not math.isinf(statistics.median(ref.times)):
        ax.axhline(statistics.median(ref.times), color="black", ls="--", lw=1)
    handles = [Patch(color=bar_colors[j], label=st.name) for j, st in enumerate(suite.stragglers)]
    handles.append(Patch(facecolor="white", edgecolor="gray", hatch="///", label="not reached"))
    handles.append(plt.Line2D([], [], color="black", ls="--", label="1 process (reference)"))
    ax.legend(handles=handles, fontsize=7, title="stragglers", title_fontsize=7,
              loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_xticks(range(len(suite.modes)))
    ax.set_xticklabels([m.label for m in suite.modes], fontsize=8)
    ax.set_ylabel("time to target (s)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.set_ylim(0, top * 1.15 if top > 0 else 1)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title("%s: time to %s %s (median, min-max over seeds)" %
                 (w.name, w.metric, w.describe_target() if w.target_kind != "within_of_reference"
                  else "within %g of the reference" % w.target_value), fontsize=9)
    fig.tight_layout()
    path = os.path.join(out, "%s_ttt.png" % w.name)
    save_png(fig, path, dpi)
    files.append(path)
    return files
