"""The suite's tables: runs.csv (one row per run), summary.csv and
summary.md (one row per workload, mode and straggler setting, and the
reference), and suite.yaml and machine.txt (what ran, where).

Cells are median [min-max] over the seeds, a run that did not reach the
target counting as infinitely late (n.r.).
"""

import csv
import datetime
import math
import os
import shutil
import statistics
import subprocess
import sys

from psbench.workloads import ROOT


def spread(values, fmt):
    """'median [min-max]' of values where inf means not reached."""
    if not values:
        return "-"
    if all(math.isinf(v) for v in values):
        return "not reached"

    def one(v):
        return "n.r." if math.isinf(v) else fmt % v
    med = statistics.median(values)
    if len(values) == 1:
        return one(med)
    return "%s [%s-%s]" % (one(med), one(min(values)), one(max(values)))


def num(v):
    """A CSV cell: the number to 6 significant digits; empty for None or not reached."""
    return "" if v is None or (isinstance(v, float) and math.isinf(v)) else "%.6g" % v


class Cell:
    """The runs of one (workload, mode, stragglers) over the seeds."""

    def __init__(self, workload, mode, straggler, runs):
        self.workload, self.mode, self.straggler = workload, mode, straggler
        self.runs = runs
        self.ok = [r for r in runs if not r.error]
        self.times, self.clocks, self.finals, self.walls = [], [], [], []
        for r in self.ok:
            reached = r.first_reaching(r.threshold)
            self.times.append(reached[0] if reached else math.inf)
            self.clocks.append(reached[1] if reached else math.inf)
            self.finals.append(r.final())
            if r.wall_s:
                self.walls.append(r.wall_s)
        self.reached = sum(1 for t in self.times if not math.isinf(t))

    @property
    def label(self):
        return "1 process (reference)" if self.mode is None else self.mode.label

    def median_time(self):
        return statistics.median(self.times) if self.times else math.inf


def cells_of(workload, suite, runs):
    """(the reference's Cell, {(mode name, straggler name): Cell}) of a workload."""
    mine = [r for r in runs if r.workload is workload]
    ref = Cell(workload, None, None, [r for r in mine if r.is_reference])
    grid = {}
    for st in suite.stragglers:
        for m in suite.modes:
            grid[(m.name, st.name)] = Cell(workload, m, st, [r for r in mine if r.mode is m and
                                                             r.straggler is st])
    return ref, grid


def paired_ratios(cell, base):
    """Per-seed ratios of cell's time to target to base's (both reached)."""
    by_seed = {}
    for r, t in zip(cell.ok, cell.times):
        by_seed[r.seed] = t
    out = []
    for r, t in zip(base.ok, base.times):
        if r.seed in by_seed and not math.isinf(t) and not math.isinf(by_seed[r.seed]):
            out.append(by_seed[r.seed] / t)
    return out


def set_thresholds(suite, runs):
    """Gives every run the target value it is measured against (per seed for
    within_of_reference: the reference run of the same seed)."""
    for w in suite.workloads:
        refs = {r.seed: r for r in runs if r.workload is w and r.is_reference and not r.error}
        for r in runs:
            if r.workload is w:
                ref = refs.get(r.seed)
                r.threshold = w.threshold(ref.final() if ref and ref.evals else None)


def write_runs_csv(path, runs):
    """runs.csv: one row per run, failed ones included."""
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["workload", "mode", "stragglers", "seed", "status", "target_value",
                      "reached", "time_to_target_s", "clocks_to_target", "final_metric",
                      "evaluations", "wall_s", "worker0_time_s", "slowest_worker_time_s",
                      "worker0_staleness_wait_s", "worker0_start_offset_s", "straggler_step_ms",
                      "csv", "error"])
        for r in runs:
            reached = None if r.error else r.first_reaching(r.threshold)
            out.writerow([r.workload.name, "reference" if r.is_reference else r.mode.name,
                          "" if r.is_reference else r.straggler.name, r.seed,
                          "failed" if r.error else "ok", num(r.threshold),
                          "" if r.error else int(reached is not None),
                          num(reached[0]) if reached else "", num(reached[1]) if reached else "",
                          num(r.final()) if not r.error else "", len(r.evals),
                          num(r.wall_s), num(r.last_time_s.get(0)),
                          num(max(r.last_time_s.values())) if r.last_time_s else "",
                          num(r.w0_wait_s), num(r.start_offset_s), num(r.step_ms),
                          os.path.relpath(r.csv, os.path.dirname(path)),
                          r.error or ""])


def write_summary(suite, runs, out, quick):
    """summary.csv and summary.md; returns the markdown text."""
    rows = []
    md = ["# Convergence suite: summary", ""]
    seeds = suite.run_seeds(quick)
    md.append("%d workers, %d shards; seeds %s%s. Modes: %s. Stragglers: %s." % (
        suite.workers, suite.shards, ", ".join(map(str, seeds)), " (--quick)" if quick else "",
        ", ".join(m.label for m in suite.modes),
        "; ".join("%s = %s" % (st.name, st.describe) for st in suite.stragglers)))
    md.append("")
    md.append("Straggler step (what slow_factor and pause_steps count in): %s." % (
        "the per-clock time of the same workload and seed under bsp without stragglers "
        "(stragglers.step_ms; a slow worker is slow as a whole, and every mode gets the same "
        "delays)" if suite.straggler_step == "bsp" else
        "each step's own compute time (a slow worker's pulls and pushes are not slowed)"))
    md.append("")
    md.append("Time to target: seconds from the first worker's start of training to worker "
              "0's first evaluation meeting the target (no interpolation between evaluations). "
              "Clocks to target: worker 0's clock there (the reference: its steps / %d). "
              "ms per clock: training time per clock, the median over workers 1.. (worker 0 "
              "also evaluates). "
              "Final: worker 0's last evaluation. Cells: median [min-max] over " % suite.workers +
              "seeds; n.r. = not reached; 'vs %s' = median of the per-seed ratios of time to "
              "target to %s under the same stragglers (seeds where both reached)." %
              (suite.modes[0].label, suite.modes[0].label))
    for w in suite.workloads:
        if not any(r.workload is w for r in runs):
            continue
        ref, grid = cells_of(w, suite, runs)
        thresholds = [r.threshold for r in runs if r.workload is w and r.threshold is not None]
        target = w.describe_target()
        if thresholds and w.target_kind == "within_of_reference":
            target += ": %s" % spread(thresholds, "%.4f")
        steps_ms = [r.step_ms for r in runs if r.workload is w and r.step_ms is not None]
        steps = w.run_steps(quick)
        md += ["", "## %s: %s" % (w.name, w.what), "",
               "%s, target %s; %d steps (%d per worker), %d evaluations per run%s." %
               (w.metric, target, steps, steps // suite.workers, suite.run_evals(w, quick),
                "; straggler step %s ms" % spread(steps_ms, "%.2f") if steps_ms else ""), ""]
        # Median time to target at a glance.
        md.append("| time to target (s), median | " +
                  " | ".join(st.name for st in suite.stragglers) + " |")
        md.append("|---|" + "---:|" * len(suite.stragglers))
        md.append("| 1 process (reference) | %s |" % " | ".join(
            [spread([statistics.median(ref.times)] if ref.times else [], "%.2f")] +
            [""] * (len(suite.stragglers) - 1)))
        for m in suite.modes:
            md.append("| %s | %s |" % (m.label, " | ".join(
                spread([grid[(m.name, st.name)].median_time()]
                       if grid[(m.name, st.name)].times else [], "%.2f")
                for st in suite.stragglers)))
        md += ["", "| mode | stragglers | reached | time to target s | vs %s | clocks to target "
               "| ms per clock | final %s | run s |" % (suite.modes[0].label, w.metric),
               "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        cells = [ref] + [grid[(m.name, st.name)] for st in suite.stragglers for m in suite.modes]
        for c in cells:
            base = None if c.mode is None else grid[(suite.modes[0].name, c.straggler.name)]
            ratios = paired_ratios(c, base) if base is not None else []
            failed = len(c.runs) - len(c.ok)
            per_clock = [v for v in (r.per_clock_ms(steps) for r in c.ok) if v is not None]
            md.append("| %s | %s | %d/%d%s | %s | %s | %s | %s | %s | %s |" % (
                c.label, "none" if c.straggler is None else c.straggler.name, c.reached,
                len(c.ok), " (%d failed)" % failed if failed else "",
                spread(c.times, "%.2f"), spread(ratios, "%.2f") if ratios else "-",
                spread(c.clocks, "%.0f"), spread(per_clock, "%.2f"), spread(c.finals, "%.4f"),
                spread(c.walls, "%.1f")))
            rows.append([w.name, "reference" if c.mode is None else c.mode.name,
                         "" if c.straggler is None else c.straggler.name, w.metric,
                         w.describe_target(), len(c.runs), len(c.ok), c.reached] +
                        [num(f(v)) if v else "" for v in (c.times, c.clocks, c.finals)
                         for f in (statistics.median, min, max)] +
                        [num(statistics.median(ratios)) if ratios else "",
                         num(statistics.median(per_clock)) if per_clock else "",
                         num(statistics.median(c.walls)) if c.walls else ""])
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["workload", "mode", "stragglers", "metric", "target", "runs",
                         "completed", "reached",
                         "time_to_target_s_median", "time_to_target_s_min",
                         "time_to_target_s_max", "clocks_to_target_median",
                         "clocks_to_target_min", "clocks_to_target_max", "final_metric_median",
                         "final_metric_min", "final_metric_max",
                         "time_to_target_vs_first_mode_median_ratio", "ms_per_clock_median",
                         "run_wall_s_median"])
        writer.writerows(rows)
    text = "\n".join(md) + "\n"
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    return text


def write_context(args):
    """suite.yaml (the suite as run) and machine.txt (where and what) under --out."""
    if os.path.abspath(args.suite) != os.path.join(args.out, "suite.yaml"):
        shutil.copyfile(args.suite, os.path.join(args.out, "suite.yaml"))
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "-C", ROOT, "log", "-1", "--format=%h %s"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
        if commit and subprocess.run(["git", "-C", ROOT, "status", "--porcelain",
                                      "--untracked-files=no"], capture_output=True, text=True,
                                     timeout=10).stdout.strip():
            commit += " (with uncommitted changes)"
    except (OSError, subprocess.SubprocessError):
        commit = ""
    with open(os.path.join(args.out, "machine.txt"), "w") as f:
        f.write("started: %s\ncpus: %d (%s)\ncommit: %s\ncommand: %s\n" %
                (datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"), os.cpu_count() or 0,
                 model, commit or "unknown", " ".join([os.path.basename(sys.argv[0])] +
                                                      sys.argv[1:])))
