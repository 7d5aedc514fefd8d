#!/usr/bin/env python3
"""Convergence suite: bsp, ssp and asp, with and without stragglers, against one process.

  python3 benchmarks/convergence_suite.py SUITE.yaml [--out DIR] [--quick] [--only NAME ...]
          [--jobs N] [--resume] [--report-only] [--bin DIR] [--run-timeout S] [--dpi N]

For every workload of the suite file (benchmarks/suites/convergence.yaml is
the default suite; its keys are explained there and in benchmarks/README.md),
every seed, every straggler setting and every consistency mode, trains the
workload with ps_launch (the suite's `workers` workers and `shards` shards),
and once per workload and seed trains the same job in one process with no
parameter server (ps_worker --standalone: all the data, as many steps as all
the workers together), the reference. Runs go one at a time unless --jobs
says otherwise (on a small machine parallel runs make every time meaningless).

Writes under --out (default build/convergence_suite):
  runs/<workload>/seed<S>/<mode>-<stragglers>.{yaml,csv,log}  each run's job file,
      metrics CSV (every worker's progress rows) and log; reference.* for the reference
  runs.csv           one row per run: time and clocks to target, final metric,
                     wall time, worker 0's wait on the staleness bound
  summary.csv        one row per (workload, mode, stragglers), and the reference
  summary.md         per workload: median time to target as a mode x stragglers
                     table, then every column with its spread
  <workload>_clock.png  metric against clock, a panel per straggler setting,
                        a line per mode (median over seeds) and the reference
  <workload>_time.png   metric against worker 0's wall time, same layout
  <workload>_ttt.png    time to target per mode and straggler setting (median
                        bar, min-max error bars; hatched: not reached)

Definitions:
  time to target   seconds from the first worker's start of training to
                   worker 0's first evaluation that meets the target:
                   worker 0's time_s there (seconds since it started
                   training, its evaluations included) plus how much later
                   than the first worker it started (from the log's
                   timestamps; it loads the test set too, and under asp the
                   others train meanwhile). Evaluations are not
                   interpolated: the resolution is one evaluation interval
                   (the workload's `evals` per run). A run that never meets
                   it: "not reached".
  clocks to target worker 0's clock at that evaluation. The reference's
                   clock is its step / workers (the same minibatches seen).
  final metric     worker 0's last evaluation (at the end of its steps).
  targets          at_least X / at_most X: an absolute metric value;
                   within_of_reference R: within R (relative) of the final
                   metric of the reference run with the same seed.
  straggler step   the suite's `straggler_step`. bsp (the default): the
                   step that slow_factor and pause_steps count in is the
                   per-clock time of the same workload and seed under bsp
                   without stragglers (the median over workers 1.. of
                   training time / clocks), passed as stragglers.step_ms,
                   so a 3x worker is slow as a whole and every mode gets
                   the same delays. compute: each step's own compute time
                   (stragglers.step_ms unset).
  seeds            seed S sets every table's init seed N to N + 1000 S,
                   train.seed to S (the generated data and minibatch order
                   of the sparse logistic regression and the matrix
                   factorization; Fashion-MNIST is read in file order) and
                   stragglers.seed to S (which pauses happen when).
  medians          over seeds, a run that did not reach the target counting
                   as infinitely late; spreads are min-max.

Exit codes: 0 every run completed and wrote its files; 1 a run failed (the
others still run and the summary marks it); 2 a usage or suite-file error,
or binaries missing; 77 skipped: matplotlib or PyYAML missing (Debian
python3-matplotlib python3-yaml, installed by scripts/setup.sh), or the
Fashion-MNIST files missing for a workload that reads them.
"""

import argparse
import csv
import datetime
import importlib.util
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import training_bench as tb  # noqa: E402  (the workloads, job files and runner)

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_SKIPPED = 0, 1, 2, 77
FASHION_MNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                       "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
DEFAULT_DATA_DIR = "/usr/share/datasets/fashion-mnist"
# train keys the suite sets itself; a workload's `train` may not override them.
MANAGED_TRAIN_KEYS = ("program", "table", "iterations", "eval_every", "log_every",
                      "metrics_csv", "seed")
NAME = re.compile(r"^[A-Za-z0-9_]+$")
# The line every training program logs as it starts its steps (its progress
# clock starts right after), as ps_launch prefixes it:
#   [worker 2] 2026-11-29 23:15:56.466 I worker 2: worker 2: MLP ..., 350 steps (2 shards ...)
TRAINING_START = re.compile(r"^\[worker (\d+)\] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) "
                            r"I worker \d+: worker \d+: .*\b\d+ steps \(")
BINARIES = ("ps_launch", "ps_server", "ps_worker")


def import_libraries():
    """Returns when PyYAML and matplotlib can be imported; else exits 77 saying
    what to install. When this interpreter lacks them (a pyenv or virtualenv
    python3 first on PATH), first runs the script again, once, under
    /usr/bin/python3, where Debian's python3-* packages live.
    """
    missing = [m for m in ("yaml", "matplotlib") if importlib.util.find_spec(m) is None]
    if not missing:
        return
    system = "/usr/bin/python3"
    if (os.environ.get("PS_CONVERGENCE_REEXEC") != "1" and os.access(system, os.X_OK) and
            os.path.realpath(sys.executable) != os.path.realpath(system)):
        os.environ["PS_CONVERGENCE_REEXEC"] = "1"
        os.execv(system, [system] + sys.argv)
    print("convergence_suite: skipped: the Python module %s is missing; install the Debian "
          "packages python3-matplotlib python3-yaml (scripts/setup.sh does)" %
          " and ".join(missing),
          file=sys.stderr)
    sys.exit(EXIT_SKIPPED)


# ---------------------------------------------------------------- suite file


class SuiteError(Exception):
    """A bad suite file: the message names the key's path and what was expected."""


class Mode:
    def __init__(self, spec):
        self.spec = spec
        kind = spec["mode"]
        self.name = kind + (str(spec["staleness"]) if kind == "ssp" else "") + \
            ("_agg" if spec.get("aggregate") else "")
        self.label = kind + (" %d" % spec["staleness"] if kind == "ssp" else "") + \
            (" aggregate" if spec.get("aggregate") else "")
        self.flow = "{ %s }" % ", ".join("%s: %s" % (k, yaml_scalar(v)) for k, v in spec.items())


class Straggler:
    def __init__(self, name, spec):
        self.name = name
        self.spec = spec
        # The section's text without braces; the run adds its seed.
        self.flow = ", ".join("%s: %s" % (k, yaml_scalar(v)) for k, v in spec.items())
        self.describe = "{ %s }" % self.flow if spec else "none"


class Workload:
    def __init__(self, name, base_name, base, spec, higher_is_better):
        self.name = name
        self.base_name = base_name
        self.base = base
        self.what = base["what"]
        self.metric = base["metric"]
        self.higher_is_better = higher_is_better
        (self.target_kind, self.target_value), = spec["target"].items()
        self.steps = spec["steps"]
        self.quick_steps = spec["quick_steps"]
        self.evals = spec["evals"]
        self.train = spec.get("train", {})

    def threshold(self, reference_final):
        """The metric value a run must reach (None: no reference to measure against)."""
        if self.target_kind in ("at_least", "at_most"):
            return self.target_value
        if reference_final is None:
            return None
        factor = 1 - self.target_value if self.higher_is_better else 1 + self.target_value
        return reference_final * factor

    def meets(self, metric, threshold):
        return metric >= threshold if self.higher_is_better else metric <= threshold

    def describe_target(self):
        if self.target_kind == "at_least":
            return ">= %g" % self.target_value
        if self.target_kind == "at_most":
            return "<= %g" % self.target_value
        return "within %g (relative) of the reference's final %s" % (self.target_value,
                                                                     self.metric)

    def job_workload(self):
        """The training_bench workload dict with this suite's `train` overrides applied."""
        w = dict(self.base)
        train = w["train"]
        for key, value in self.train.items():
            train = re.sub(r"(?m)^  %s:.*\n" % re.escape(key), "", train)
            train += "  %s: %s\n" % (key, yaml_scalar(value))
        w["train"] = train
        return w

    def data_dir(self):
        """Fashion-MNIST folder when the program reads it, else None."""
        w = self.job_workload()
        if not re.search(r"(?m)^  program: mlp\s*$", w["train"]):
            return None
        m = re.search(r"(?m)^  data_dir: (.*)$", w["train"])
        return m.group(1).strip().strip('"') if m else DEFAULT_DATA_DIR


class Suite:
    pass


def yaml_scalar(v):
    """A YAML flow rendering of a scalar or a list of scalars."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[%s]" % ", ".join(yaml_scalar(x) for x in v)
    if isinstance(v, str):
        return json.dumps(v)
    return repr(v) if isinstance(v, float) else str(v)


def describe(v):
    if v is None:
        return "nothing"
    if isinstance(v, dict):
        return "a map"
    if isinstance(v, list):
        return "%r" % (v,) if all(not isinstance(x, (dict, list)) for x in v) else "a list"
    return "%r" % (v,)


def strict_loader():
    """A SafeLoader that refuses a key given twice in one map."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    def construct_mapping(loader, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, "a map key must be a plain value", key_node.start_mark)
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, "key %r given twice" % (key,), key_node.start_mark)
        return yaml.SafeLoader.construct_mapping(loader, node, deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return Loader


def check_map(value, where, allowed, required=()):
    if not isinstance(value, dict):
        raise SuiteError("%s: got %s; expected a map with keys %s" %
                         (where, describe(value), ", ".join(allowed)))
    for k in value:
        if k not in allowed:
            raise SuiteError("%s: unknown key %r; expected one of %s" %
                             (where, k, ", ".join(allowed)))
    for k in required:
        if k not in value:
            raise SuiteError("%s: the key %r is required" % (where, k))
    return value


def check_int(value, where, minimum, maximum=None, why=""):
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum and \
        (maximum is None or value <= maximum)
    if not ok:
        bound = ">= %d" % minimum if maximum is None else "in %d..%d" % (minimum, maximum)
        raise SuiteError("%s: got %s; expected an integer %s%s" % (where, describe(value), bound,
                                                                  why))
    return value


def check_number(value, where, low, high, low_open=False, high_open=False):
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and \
            (high is None or (value < high if high_open else value <= high))
    if not ok:
        rng = "%s%g, %s" % ("(" if low_open else "[", low, "inf)" if high is None else
                            "%g%s" % (high, ")" if high_open else "]"))
        raise SuiteError("%s: got %s; expected a number in %s" % (where, describe(value), rng))
    return value


def named_entries(value, key, expected):
    """(name, spec, path) of each entry of the map `value` under `key`, whose
    names name files; SuiteError when it is not a non-empty map or a name
    is not letters, digits and _."""
    if not isinstance(value, dict) or not value:
        raise SuiteError("%s: got %s; expected %s" % (key, describe(value), expected))
    for name, spec in value.items():
        if not isinstance(name, str) or not NAME.match(name):
            raise SuiteError("%s: the name %r is not letters, digits and _ (it names "
                             "files)" % (key, name))
        yield name, spec, "%s.%s" % (key, name)


def parse_suite(doc):
    """Checks a loaded suite document; returns a Suite or raises SuiteError."""
    top = check_map(doc, "the top level",
                    ("workers", "shards", "seeds", "quick", "modes", "stragglers",
                     "straggler_step", "workloads"),
                    ("modes", "workloads"))
    s = Suite()
    s.workers = check_int(top.get("workers", 4), "workers", 1)
    s.shards = check_int(top.get("shards", 2), "shards", 1)
    seeds = top.get("seeds", [1, 2, 3])
    if not isinstance(seeds, list) or not seeds:
        raise SuiteError("seeds: got %s; expected a non-empty list of integers >= 0" %
                         describe(seeds))
    for i, v in enumerate(seeds):
        check_int(v, "seeds[%d]" % i, 0)
    if len(set(seeds)) != len(seeds):
        raise SuiteError("seeds: %s lists a seed twice; expected distinct seeds" % seeds)
    s.seeds = seeds
    quick = check_map(top.get("quick", {}), "quick", ("seeds", "evals"))
    s.quick_seeds = check_int(quick.get("seeds", 1), "quick.seeds", 1, len(seeds),
                              " (at most the number of seeds)")
    s.quick_evals = check_int(quick.get("evals", 5), "quick.evals", 1)

    modes = top["modes"]
    if not isinstance(modes, list) or not modes:
        raise SuiteError("modes: got %s; expected a non-empty list of consistency maps such as "
                         "{ mode: ssp, staleness: 3 }" % describe(modes))
    s.modes = []
    for i, spec in enumerate(modes):
        where = "modes[%d]" % i
        check_map(spec, where, ("mode", "staleness", "aggregate"), ("mode",))
        if spec["mode"] not in ("bsp", "ssp", "asp"):
            raise SuiteError("%s.mode: got %s; expected one of bsp, ssp, asp" %
                             (where, describe(spec["mode"])))
        if spec["mode"] == "ssp":
            if "staleness" not in spec:
                raise SuiteError("%s: mode ssp needs a staleness (an integer >= 1)" % where)
            check_int(spec["staleness"], where + ".staleness", 1)
        elif "staleness" in spec:
            raise SuiteError("%s.staleness: only mode ssp takes a staleness" % where)
        if "aggregate" in spec:
            if spec["mode"] != "bsp":
                raise SuiteError("%s.aggregate: only mode bsp aggregates" % where)
            if not isinstance(spec["aggregate"], bool):
                raise SuiteError("%s.aggregate: got %s; expected true or false" %
                                 (where, describe(spec["aggregate"])))
        mode = Mode(spec)
        if any(m.name == mode.name for m in s.modes):
            raise SuiteError("%s: mode %s is listed twice" % (where, mode.label))
        s.modes.append(mode)

    s.stragglers = []
    for name, spec, where in named_entries(
            top.get("stragglers", {"none": {}}), "stragglers",
            "a map of name -> { slow_worker, slow_factor, pause_probability, pause_steps } "
            "with at least one entry, e.g. none: {}"):
        if spec is None:
            spec = {}
        if isinstance(spec, dict) and "seed" in spec:
            raise SuiteError("%s.seed: set per run from `seeds`; remove it" % where)
        check_map(spec, where, ("slow_worker", "slow_factor", "pause_probability",
                                "pause_steps"))
        if "slow_worker" in spec:
            if s.workers < 2:
                raise SuiteError("%s.slow_worker: needs workers >= 2" % where)
            check_int(spec["slow_worker"], where + ".slow_worker", 1, s.workers - 1,
                      " (a worker rank other than 0: worker 0 evaluates, and slowing it would "
                      "slow the measurement itself)")
        if "slow_factor" in spec:
            check_number(spec["slow_factor"], where + ".slow_factor", 1, None)
        if "pause_probability" in spec:
            check_number(spec["pause_probability"], where + ".pause_probability", 0, 1)
        if "pause_steps" in spec:
            p = spec["pause_steps"]
            if not (isinstance(p, list) and len(p) == 2 and
                    all(isinstance(x, int) and not isinstance(x, bool) for x in p) and
                    1 <= p[0] <= p[1]):
                raise SuiteError("%s.pause_steps: got %s; expected [min, max] with "
                                 "1 <= min <= max" % (where, describe(p)))
        s.stragglers.append(Straggler(name, dict(spec)))
    # Runs without stragglers first: with straggler_step bsp they set the step.
    s.stragglers.sort(key=lambda st: bool(st.spec))
    s.straggler_step = top.get("straggler_step", "bsp")
    if s.straggler_step not in ("bsp", "compute"):
        raise SuiteError("straggler_step: got %s; expected bsp (a step is the per-clock time "
                         "under bsp without stragglers) or compute (each step's own compute "
                         "time)" % describe(s.straggler_step))
    if s.straggler_step == "bsp" and any(st.spec for st in s.stragglers):
        if not any(m.spec == {"mode": "bsp"} for m in s.modes) or \
                not any(not st.spec for st in s.stragglers):
            raise SuiteError("straggler_step: bsp times the stragglers' step by the run under "
                             "{ mode: bsp } with no stragglers; add that mode and a setting "
                             "such as none: {} to stragglers, or set straggler_step: compute")

    s.workloads = []
    for name, spec, where in named_entries(
            top["workloads"], "workloads",
            "a map of workload name -> { target, steps, evals, ... }"):
        check_map(spec, where, ("base", "target", "steps", "evals", "quick_steps", "train"),
                  ("target",))
        base_name = spec.get("base", name)
        if base_name not in tb.WORKLOADS:
            raise SuiteError("%s%s: got %s; expected a workload of training_bench.py: %s" %
                             (where, ".base" if "base" in spec else
                              " (no base: the name is the base)", describe(base_name),
                              ", ".join(tb.WORKLOADS)))
        base = tb.WORKLOADS[base_name]
        higher = base["metric"] == "test accuracy"
        target = check_map(spec["target"], where + ".target",
                           ("at_least", "at_most", "within_of_reference"))
        if len(target) != 1:
            raise SuiteError("%s.target: expected exactly one of at_least, at_most, "
                             "within_of_reference" % where)
        (kind, value), = target.items()
        if kind == "within_of_reference":
            check_number(value, where + ".target." + kind, 0, 1, low_open=True, high_open=True)
        else:
            check_number(value, where + ".target." + kind, -1e300, None)
            if (kind == "at_least") != higher:
                raise SuiteError("%s.target.%s: the metric %s is better when %s; use %s or "
                                 "within_of_reference" %
                                 (where, kind, base["metric"], "higher" if higher else "lower",
                                  "at_least" if higher else "at_most"))
        spec = dict(spec)
        spec["steps"] = check_int(spec.get("steps", base["total_steps"]), where + ".steps",
                                  s.workers, why=" (at least one step per worker)")
        spec["quick_steps"] = check_int(
            spec.get("quick_steps", base.get("quick_steps", base["total_steps"] // 20)),
            where + ".quick_steps", s.workers, why=" (at least one step per worker)")
        spec["evals"] = check_int(spec.get("evals", base["evals"]), where + ".evals", 1,
                                  spec["steps"] // s.workers,
                                  " (at most one evaluation per step of a worker)")
        if s.quick_evals > spec["quick_steps"] // s.workers:
            raise SuiteError("%s.quick_steps: %d steps give each worker %d; quick.evals (%d) "
                             "needs at least one step per evaluation" %
                             (where, spec["quick_steps"], spec["quick_steps"] // s.workers,
                              s.quick_evals))
        train = spec.get("train", {})
        if not isinstance(train, dict):
            raise SuiteError("%s.train: got %s; expected a map of train keys to override" %
                             (where, describe(train)))
        for key, v in train.items():
            if key in MANAGED_TRAIN_KEYS:
                raise SuiteError("%s.train.%s: set by the suite (or the base workload); "
                                 "remove it" % (where, key))
            scalars = v if isinstance(v, list) else [v]
            if not all(isinstance(x, (int, float, str, bool)) for x in scalars):
                raise SuiteError("%s.train.%s: got %s; expected a value or a list of values "
                                 "(config/README.md lists the train keys)" %
                                 (where, key, describe(v)))
        s.workloads.append(Workload(name, base_name, base, spec, higher))
    return s


def load_suite(path):
    import yaml
    try:
        with open(path) as f:
            doc = yaml.load(f, Loader=strict_loader())
    except OSError as e:
        raise SuiteError("cannot read it: %s" % e.strerror)
    except yaml.YAMLError as e:
        raise SuiteError("YAML error: %s" % re.sub(r"\s+", " ", str(e)))
    return parse_suite(doc)


# ---------------------------------------------------------------- runs


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
        """Reads worker 0's evaluations and every worker's last row from the CSV,
        and the workers' training starts from the log."""
        self.evals, self.last_time_s = [], {}
        self.start_offset_s = 0.0 if self.is_reference else self.read_start_offset()
        offset = self.start_offset_s or 0.0
        with open(self.csv) as f:
            for row in csv.DictReader(f):
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
        if not self.evals:
            raise RuntimeError("no evaluations of worker 0 in " + self.csv)

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
        if len(starts) != self.workers:
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
    seeds = suite.seeds[:suite.quick_seeds] if args.quick else suite.seeds
    runs = []
    for w in suite.workloads:
        if args.only and w.name not in args.only:
            continue
        for seed in seeds:
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
    steps = run.workload.quick_steps if args.quick else run.workload.steps
    evals = suite.quick_evals if args.quick else run.workload.evals
    return steps, evals, os.path.join(run.dir, run.tag + ".done"), run.key(suite, steps, evals)


def reuse(run, suite, args):
    """Takes the results of a previous invocation's run with the same settings
    (its .done marker and CSV); False when there is none."""
    _, _, marker, key = run_settings(run, suite, args)
    try:
        with open(marker) as f:
            done = json.load(f)
        if done.get("key") != key or not os.path.exists(run.csv):
            return False
        run.wall_s = done.get("wall_s")
        run.read()
    except (OSError, ValueError, RuntimeError):
        return False
    run.reused = True
    return True


def execute(run, suite, args):
    """Runs one job; fills run.error or its results."""
    w = run.workload
    steps, evals, marker, key = run_settings(run, suite, args)
    if os.path.exists(marker):
        os.remove(marker)
    job = w.job_workload()
    try:
        if run.is_reference:
            text = tb.job_yaml(job, 1, "{ mode: bsp }", steps, evals, run.csv, args.quick,
                               seed=run.seed, shards=suite.shards)
        else:
            flow = run.straggler.flow
            if run.step_ms is not None:
                flow += ", step_ms: %s" % yaml_scalar(run.step_ms)
            text = tb.job_yaml(job, suite.workers, run.mode.flow, steps, evals, run.csv,
                               args.quick, seed=run.seed, stragglers=flow,
                               shards=suite.shards)
        _, _, run.wall_s = tb.run(args.bin, run.dir, run.tag, text, run.is_reference,
                                  timeout=args.run_timeout)
        run.read()
    except (RuntimeError, OSError, ValueError, KeyError) as e:
        run.error = str(e)
        return
    with open(marker, "w") as f:
        json.dump({"key": key, "wall_s": run.wall_s}, f)


def format_duration(s):
    s = int(round(s))
    return "%dh%02dm" % (s // 3600, s % 3600 // 60) if s >= 3600 else \
        "%dm%02ds" % (s // 60, s % 60) if s >= 60 else "%ds" % s


class Progress:
    """One line per finished run: what it was, how it went, elapsed time and ETA."""

    def __init__(self, runs):
        self.runs = runs
        self.total = len(runs)
        self.done = []
        self.start = time.monotonic()

    def estimate(self, run):
        """Expected seconds of a run not done yet, from the finished ones most like it."""
        timed = [r for r in self.done if r.wall_s]
        for like in (lambda r: r.workload is run.workload and r.straggler is run.straggler and
                     r.mode is run.mode,
                     lambda r: r.workload is run.workload and r.straggler is run.straggler,
                     lambda r: r.workload is run.workload,
                     lambda r: True):
            same = [r.wall_s for r in timed if like(r)]
            if same:
                return statistics.mean(same)
        return None

    def finished(self, run):
        self.done.append(run)
        left = [r for r in self.runs if r not in self.done]
        guesses = [self.estimate(r) for r in left]
        eta = "ETA ?" if any(g is None for g in guesses) and left else \
            "ETA %s" % format_duration(sum(g for g in guesses if g))
        if run.error:
            result = "FAILED: %s" % run.error
        else:
            threshold = getattr(run, "threshold", None)
            reached = run.first_reaching(threshold) if threshold is not None else None
            result = "%.1f s, final %s %.4f" % (run.wall_s or 0, run.workload.metric,
                                                run.final())
            if threshold is not None:
                result += ", target at %.1f s (clock %g)" % reached if reached else \
                    ", target not reached"
        width = len(str(self.total))
        print("[%*d/%d] %s: %s | %s elapsed, %s" %
              (width, len(self.done), self.total, run.describe(), result,
               format_duration(time.monotonic() - self.start), eta), flush=True)


# ---------------------------------------------------------------- summary


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
    seeds = suite.seeds[:suite.quick_seeds] if quick else suite.seeds
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
        md += ["", "## %s: %s" % (w.name, w.what), "",
               "%s, target %s; %d steps (%d per worker), %d evaluations per run%s." %
               (w.metric, target, w.quick_steps if quick else w.steps,
                (w.quick_steps if quick else w.steps) // suite.workers,
                suite.quick_evals if quick else w.evals,
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
        steps = w.quick_steps if quick else w.steps
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


# ---------------------------------------------------------------- plots


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


# ---------------------------------------------------------------- main


def check_data(suite, only):
    for w in suite.workloads:
        if only and w.name not in only:
            continue
        d = w.data_dir()
        if d is None:
            continue
        missing = [f for f in FASHION_MNIST_FILES if not os.path.isfile(os.path.join(d, f))]
        if missing:
            return ("workload %s reads Fashion-MNIST, and %s has no %s; install the Debian "
                    "package dataset-fashion-mnist (scripts/setup.sh does), or leave the "
                    "workload out with --only" % (w.name, d, ", ".join(missing)))
    return None


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


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="Exit codes: 0 ok, 1 a run failed, 2 usage or suite-file error, 77 skipped "
               "(matplotlib, PyYAML or Fashion-MNIST missing). Definitions and outputs: see "
               "the top of this file and benchmarks/README.md.")
    p.add_argument("suite", help="the suite file, e.g. benchmarks/suites/convergence.yaml")
    p.add_argument("--out", default=os.path.join(ROOT, "build", "convergence_suite"),
                   help="results folder (default build/convergence_suite)")
    p.add_argument("--quick", action="store_true",
                   help="the suite's quick.seeds seeds (default 1), each workload's quick_steps "
                        "and quick.evals evaluations: checks that every run completes and "
                        "writes its files; its times mean little")
    p.add_argument("--only", nargs="+", metavar="WORKLOAD", help="only these workloads")
    p.add_argument("--jobs", type=int, default=1,
                   help="runs at a time (default 1; more makes every time depend on the others)")
    p.add_argument("--resume", action="store_true",
                   help="keep the runs a previous invocation finished with the same settings "
                        "(a .done file beside each CSV) and run only the rest")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: rebuild runs.csv, the summary and the plots from the "
                        "finished runs under --out")
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"),
                   help="folder of ps_launch, ps_server, ps_worker (default build/bin)")
    p.add_argument("--run-timeout", type=float, default=600,
                   help="seconds before a run is stopped and counted as failed (default 600)")
    p.add_argument("--dpi", type=int, default=90, help="resolution of the PNGs (default 90)")
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error("--jobs: expected an integer >= 1")
    if args.run_timeout <= 0:
        p.error("--run-timeout: expected seconds > 0")
    if not 20 <= args.dpi <= 600:
        p.error("--dpi: expected 20..600")
    return args


def main(argv):
    args = parse_args(argv)
    import_libraries()
    try:
        suite = load_suite(args.suite)
    except SuiteError as e:
        print("convergence_suite: %s: %s" % (args.suite, e), file=sys.stderr)
        return EXIT_USAGE
    names = [w.name for w in suite.workloads]
    for name in args.only or []:
        if name not in names:
            print("convergence_suite: --only %s: not a workload of %s (it has %s)" %
                  (name, args.suite, ", ".join(names)), file=sys.stderr)
            return EXIT_USAGE
    if not args.report_only:
        missing = tb.missing_binaries("convergence_suite", args.bin)
        if missing:
            print(missing, file=sys.stderr)
            return EXIT_USAGE
        problem = check_data(suite, args.only)
        if problem:
            print("convergence_suite: skipped: " + problem, file=sys.stderr)
            return EXIT_SKIPPED
    args.out = os.path.abspath(args.out)
    os.makedirs(args.out, exist_ok=True)
    if not args.report_only:
        # Runs use copies, so a rebuild of --bin while the suite runs (a long
        # one) neither breaks a run nor changes the code under measurement.
        snapshot = os.path.join(args.out, "bin")
        os.makedirs(snapshot, exist_ok=True)
        for b in BINARIES:
            shutil.copy2(os.path.join(args.bin, b), os.path.join(snapshot, b))
        args.bin = snapshot
        write_context(args)

    runs = plan(suite, args)
    print("convergence_suite: %d runs (%d workloads x %d seeds x (1 reference + %d modes x %d "
          "straggler settings))%s; results in %s" %
          (len(runs), len({r.workload.name for r in runs}),
           len(suite.seeds[:suite.quick_seeds] if args.quick else suite.seeds), len(suite.modes),
           len(suite.stragglers), ", quick" if args.quick else "", args.out), flush=True)
    reused = []
    if args.resume or args.report_only:
        for r in runs:  # plan order: a straggler step's base before the runs it times
            base = step_base(r, runs, suite)
            if base is not None:
                if not base.reused:
                    continue  # rerun with the base's new step
                assign_step(r, runs, suite, args)
            if reuse(r, suite, args):
                reused.append(r)
        for r in runs:
            if args.report_only and not r.reused:
                r.error = "no finished run in %s (--report-only runs nothing)" % r.dir
        print("convergence_suite: %d finished runs found under %s%s" %
              (len(reused), args.out, "" if args.report_only else "; running the other %d" %
               (len(runs) - len(reused))), flush=True)
    todo = [] if args.report_only else [r for r in runs if not r.reused]
    progress = Progress(todo)
    # The reference of each workload and seed runs first (plan order), so a
    # run's progress line can say whether it met a target relative to it.
    refs = {(r.workload.name, r.seed): r for r in reused if r.is_reference}

    def after(run):
        if run.is_reference and not run.error:
            refs[(run.workload.name, run.seed)] = run
        ref = refs.get((run.workload.name, run.seed))
        run.threshold = run.workload.threshold(ref.final() if ref else None)
        progress.finished(run)

    executor = ThreadPoolExecutor(max_workers=args.jobs)
    try:
        def execute_timed(run):
            if assign_step(run, runs, suite, args):
                execute(run, suite, args)

        if args.jobs == 1:
            for run in todo:
                execute_timed(run)
                after(run)
        else:
            # Runs timed by a straggler step go after the runs that set it.
            for phase in (False, True):
                batch = [r for r in todo if (step_base(r, runs, suite) is not None) == phase]
                futures = {executor.submit(execute_timed, run): run for run in batch}
                for fut in as_completed(futures):
                    fut.result()
                    after(futures[fut])
    except KeyboardInterrupt:
        executor.shutdown(wait=False, cancel_futures=True)
        print("convergence_suite: interrupted; --resume keeps the finished runs",
              file=sys.stderr)
        return 130
    executor.shutdown()

    set_thresholds(suite, runs)
    unknown = [r for r in runs if not r.error and r.start_offset_s is None]
    if unknown:
        print("convergence_suite: warning: the workers' training starts were not found in the "
              "logs of %d runs (e.g. %s); their times count from worker 0's start" %
              (len(unknown), os.path.join(unknown[0].dir, unknown[0].tag + ".log")),
              file=sys.stderr)
    write_runs_csv(os.path.join(args.out, "runs.csv"), runs)
    write_summary(suite, runs, args.out, args.quick)
    missing = []
    for w in suite.workloads:
        if any(r.workload is w for r in runs):
            for path in plot_workload(w, suite, runs, args.out, args.dpi):
                if not os.path.getsize(path):
                    missing.append(path)
    for r in runs:
        if not r.error and not os.path.getsize(r.csv):
            missing.append(r.csv)
    failed = [r for r in runs if r.error]
    print("convergence_suite: %d of %d runs completed in %s; summary in %s" %
          (len(runs) - len(failed), len(runs), format_duration(time.monotonic() - progress.start),
           os.path.join(args.out, "summary.md")), flush=True)
    for r in failed:
        print("convergence_suite: failed: %s: %s" % (r.describe(), r.error), file=sys.stderr)
    for path in missing:
        print("convergence_suite: empty output file %s" % path, file=sys.stderr)
    return EXIT_FAILED if failed or missing else EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
