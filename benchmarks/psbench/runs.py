"""The runs of a suite: which there are, in what order, with which settings,
and what each measured.

A Run is one training job (a workload, seed, mode and straggler setting, or
the workload's one-process reference): where its files are, the key a
--resume marker must match, and, once read from its metrics CSV and log,
worker 0's evaluations and every worker's training time.
"""

import csv
import datetime
import os
import re
import statistics

# The line every training program logs as it starts its steps (its progress
# clock starts right after), as ps_launch prefixes it:
#   [worker 2] 2026-11-29 23:15:56.466 I worker 2: worker 2: MLP ..., 350 steps (2 shards ...)
#   [worker 3] 2026-12-02 18:46:39.213 I worker 3: sparse logistic regression, ..., 200 steps (2 shards, bsp)
TRAINING_START = re.compile(r"^\[worker (\d+)\] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) "
                            r"I worker \d+: (?:worker \d+: )?.*\b\d+ steps \(")


class Run:
    """One training job of the suite and, once read, what it measured."""

    def __init__(self, workload, seed, mode, straggler, out, workers):
        self.workload = workload
        self.workers = workers      # the distributed runs' worker count
        self.seed = seed
        self.mode = mode            # None: the reference
        self.straggler = straggler  # None: the reference
        self.tag = "reference" if mode is None else "%s-%s" % (mode.name, straggler.name)
        self.dir = os.path.join(out, "runs", workload.name, "seed%d" % seed)
        self.csv = os.path.join(self.dir, self.tag + ".csv")
        self.error = None
        self.wall_s = None
        self.evals = []             # worker 0: (clock, s since the first worker started, metric)
        self.w0_wait_s = None
        self.last_time_s = {}       # worker -> its last time_s
        # Seconds from the first worker's start of training to worker 0's
        # (None: not found in the log). Worker 0 loads the test set as well,
        # so it starts last; under asp the others train meanwhile.
        self.start_offset_s = None
        self.reused = False
        # stragglers.step_ms (straggler_step bsp); None: the compute time.
        self.step_ms = None

    @property
    def is_reference(self):
        return self.mode is None

    def describe(self):
        if self.is_reference:
            return "%s seed %d reference (1 process)" % (self.workload.name, self.seed)
        return "%s seed %d %s, stragglers %s" % (self.workload.name, self.seed, self.mode.label,
                                                 self.straggler.name)

    def key(self, suite, steps, evals):
        """What determines the run: a --resume marker must match it exactly."""
        return {"workload": self.workload.name, "base": self.workload.base_name,
                "train": self.workload.train, "steps": steps, "evals": evals,
                "seed": self.seed, "workers": suite.workers, "shards": suite.shards,
                "mode": None if self.is_reference else self.mode.spec,
                "stragglers": None if self.is_reference else self.straggler.spec,
                "step_ms": self.step_ms}

    def read(self):
        """Reads the evaluations (the evaluator's, cluster.evaluator, else
        worker 0's) and every worker's last row from the CSV, and the
        workers' training starts from the log."""
        self.evals, self.last_time_s = [], {}
        evaluator = []
        self.start_offset_s = 0.0 if self.is_reference else self.read_start_offset()
        offset = self.start_offset_s or 0.0
        with open(self.csv) as f:
            for row in csv.DictReader(f):
                if row["worker"] == "evaluator":
                    # Seconds since the evaluator started, at the job's clock.
                    if row["metric"]:
                        evaluator.append((int(row["clock"]), float(row["time_s"]),
                                          float(row["metric"])))
                    continue
                worker = int(row["worker"])
                self.last_time_s[worker] = float(row["time_s"])
                if worker == 0:
                    self.w0_wait_s = float(row["staleness_wait_s"])
                    if row["metric"]:
                        clock = int(row["clock"])
                        if self.is_reference:
                            clock = clock / float(self.workers)
                        self.evals.append((clock, float(row["time_s"]) + offset,
                                           float(row["metric"])))
        if evaluator:
            self.evals = evaluator
        if not self.evals:
            raise RuntimeError("no evaluations of worker 0 or the evaluator in " + self.csv)

    def read_start_offset(self):
        starts = {}
        try:
            with open(os.path.join(self.dir, self.tag + ".log")) as f:
                for line in f:
                    m = TRAINING_START.match(line)
                    if m:
                        starts[int(m.group(1))] = datetime.datetime.strptime(
                            m.group(2), "%Y-%m-%d %H:%M:%S.%f")
        except OSError:
            return None
        backups = 0 if self.is_reference else self.mode.backups
        if len(starts) != self.workers + backups:
            return None
        return (starts[0] - min(starts.values())).total_seconds()

    def final(self):
        return self.evals[-1][2] if self.evals else None

    def per_clock_ms(self, steps):
        """Median over workers 1.. (worker 0 also evaluates) of training time per
        clock, in ms (the reference: its time per steps / workers, evaluations
        included); None when the CSV had no rows of those workers."""
        clocks = steps // self.workers
        times = [t for w, t in self.last_time_s.items()
                 if w != 0 or self.workers == 1 or self.is_reference]
        if not times or clocks < 1:
            return None
        return 1000.0 * statistics.median(times) / clocks

    def first_reaching(self, threshold):
        """(time_s, clock) of worker 0's first evaluation meeting the threshold, or None."""
        if threshold is None:
            return None
        for clock, t, metric in self.evals:
            if self.workload.meets(metric, threshold):
                return t, clock
        return None


def plan(suite, args):
    """The runs in the order they go: per workload, per seed the reference, then
    every straggler setting x mode. A cell's seeds are thus spread over the
    workload's runs: a burst of load from elsewhere hits one seed of several
    cells (which the medians absorb), not every seed of one cell."""
    runs = []
    for w in suite.workloads:
        if args.only and w.name not in args.only:
            continue
        for seed in suite.run_seeds(args.quick):
            runs.append(Run(w, seed, None, None, args.out, suite.workers))
            for st in suite.stragglers:
                for m in suite.modes:
                    runs.append(Run(w, seed, m, st, args.out, suite.workers))
    return runs


def step_base(run, runs, suite):
    """The run whose per-clock time is `run`'s straggler step (straggler_step
    bsp): the same workload and seed under bsp without stragglers; None when
    `run` has no stragglers or counts in compute time."""
    if run.is_reference or not run.straggler.spec or suite.straggler_step != "bsp":
        return None
    for r in runs:
        if (r.workload is run.workload and r.seed == run.seed and not r.is_reference and
                r.mode.spec == {"mode": "bsp"} and not r.straggler.spec):
            return r
    return None


def assign_step(run, runs, suite, args):
    """Sets run.step_ms from its step base (which must have finished); False,
    with run.error set, when that base failed."""
    base = step_base(run, runs, suite)
    if base is None:
        return True
    steps = run_settings(base, suite, args)[0]
    ms = None if base.error or not base.evals else base.per_clock_ms(steps)
    if ms is None:
        run.error = ("no straggler step: the run it is timed by (%s) failed or measured "
                     "nothing" % base.describe())
        return False
    run.step_ms = round(ms, 4)
    return True


def run_settings(run, suite, args):
    """(steps, evals, marker path, key) of a run."""
    steps = run.workload.run_steps(args.quick)
    evals = suite.run_evals(run.workload, args.quick)
    return steps, evals, os.path.join(run.dir, run.tag + ".done"), run.key(suite, steps, evals)
