"""The suite file: loading it, checking every key, and what it describes.

load_suite(path) returns a Suite: the cluster (workers, shards), the seeds,
the consistency modes (Mode), the straggler settings (Straggler) and the
workloads (Workload: a base workload of psbench.workloads with the suite's
target, steps and evaluations). A bad file raises SuiteError with the key's
path and what was expected; benchmarks/docs/convergence_suite.md explains
every key.
"""

import os
import re

from psbench.checks import (SuiteError, check_int, check_map, check_number, describe,
                            named_entries, strict_loader)
from psbench.workloads import FASHION_MNIST_DIR, WORKLOADS, higher_is_better, yaml_scalar

FASHION_MNIST_FILES = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                       "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")
# train keys the suite sets itself; a workload's `train` may not override them.
MANAGED_TRAIN_KEYS = ("program", "table", "iterations", "eval_every", "log_every",
                      "metrics_csv", "seed")


class Mode:
    """One consistency mode: its job section (spec, with `balance` for the
    job's stragglers.balance), file name and label."""

    def __init__(self, spec):
        self.spec = spec
        kind = spec["mode"]
        self.balance = bool(spec.get("balance"))
        # consistency.backup_workers: the job runs this many workers more,
        # each clock's update the mean of the first `workers` gradients.
        self.backups = int(spec.get("backup_workers", 0))
        # Every table's learning rate times this (aggregate modes: the mean
        # of the workers' gradients is one step where bsp takes one each).
        self.lr_scale = spec.get("lr_scale", 1)
        self.name = kind + (str(spec["staleness"]) if kind == "ssp" else "") + \
            ("_agg" if spec.get("aggregate") else "") + ("_bal" if self.balance else "") + \
            ("_lr%s" % yaml_scalar(self.lr_scale) if self.lr_scale != 1 else "") + \
            ("_bk%d" % self.backups if self.backups else "")
        self.label = kind + (" %d" % spec["staleness"] if kind == "ssp" else "") + \
            (" aggregate" if spec.get("aggregate") else "") + \
            (" balanced" if self.balance else "") + \
            (" lr x%s" % yaml_scalar(self.lr_scale) if self.lr_scale != 1 else "") + \
            (" +%d backup" % self.backups if self.backups else "")
        self.flow = "{ %s }" % ", ".join("%s: %s" % (k, yaml_scalar(v)) for k, v in spec.items()
                                         if k not in ("balance", "lr_scale"))


class Straggler:
    """One straggler setting: its name and job `stragglers` section (spec)."""

    def __init__(self, name, spec):
        self.name = name
        self.spec = spec
        # The section's text without braces; the run adds its seed.
        self.flow = ", ".join("%s: %s" % (k, yaml_scalar(v)) for k, v in spec.items())
        self.describe = "{ %s }" % self.flow if spec else "none"


class Workload:
    """One workload of the suite: a base workload with a target, steps and evaluations."""

    def __init__(self, name, base_name, base, spec, higher_is_better):
        self.name = name
        self.base_name = base_name
        self.base = base
        self.what = base["what"]
        self.metric = base["metric"]
        self.higher_is_better = higher_is_better
        (self.target_kind, self.target_value), = spec["target"].items()
        self.quick_target = spec["quick_target"]
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

    def use_quick_target(self):
        """--quick: the runs are measured against quick_target (default the target)."""
        (self.target_kind, self.target_value), = self.quick_target.items()

    def run_steps(self, quick):
        """Minibatches of the whole job of each run (--quick: quick_steps)."""
        return self.quick_steps if quick else self.steps

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
        """The base workload's dict with this suite's `train` overrides applied."""
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
        return m.group(1).strip().strip('"') if m else FASHION_MNIST_DIR


class Suite:
    """A checked suite file; parse_suite() sets its fields."""

    def run_seeds(self, quick):
        """The seeds the runs use (--quick: the first quick.seeds)."""
        return self.seeds[:self.quick_seeds] if quick else self.seeds

    def run_evals(self, workload, quick):
        """Evaluations per run of `workload` (--quick: quick.evals)."""
        return self.quick_evals if quick else workload.evals

    def restrict(self, modes, stragglers):
        """Keeps only the modes and straggler settings named (None: all of them);
        raises SuiteError for a name the suite does not have, or when straggler_step
        bsp loses the run its straggler step is timed by."""
        if modes:
            names = [m.name for m in self.modes]
            for n in modes:
                if n not in names:
                    raise SuiteError("--modes %s: not a mode of the suite (it has %s)" %
                                     (n, ", ".join(names)))
            self.modes = [m for m in self.modes if m.name in modes]
        if stragglers:
            names = [st.name for st in self.stragglers]
            for n in stragglers:
                if n not in names:
                    raise SuiteError("--stragglers %s: not a straggler setting of the suite "
                                     "(it has %s)" % (n, ", ".join(names)))
            self.stragglers = [st for st in self.stragglers if st.name in stragglers]
        try:
            check_straggler_step(self)
        except SuiteError as e:
            raise SuiteError("--modes/--stragglers leave out a run the others need: %s" % e)


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
        check_map(spec, where, ("mode", "staleness", "aggregate", "balance", "backup_workers",
                                "lr_scale"), ("mode",))
        if "lr_scale" in spec and (isinstance(spec["lr_scale"], bool) or
                                   not isinstance(spec["lr_scale"], (int, float)) or
                                   not 0 < spec["lr_scale"] <= 1000):
            raise SuiteError("%s.lr_scale: got %s; expected a number in (0, 1000]" %
                             (where, describe(spec["lr_scale"])))
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
        if "balance" in spec:
            if spec["mode"] == "asp":
                raise SuiteError("%s.balance: only bsp and ssp balance (no asp worker waits)" %
                                 where)
            if not isinstance(spec["balance"], bool):
                raise SuiteError("%s.balance: got %s; expected true or false" %
                                 (where, describe(spec["balance"])))
        if "backup_workers" in spec:
            if spec["mode"] != "bsp" or spec.get("aggregate") is not True:
                raise SuiteError("%s.backup_workers: only mode bsp with aggregate: true has "
                                 "backup workers" % where)
            if spec.get("balance"):
                raise SuiteError("%s.backup_workers: not with balance (one or the other)" % where)
            check_int(spec["backup_workers"], where + ".backup_workers", 1)
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
    check_straggler_step(s)

    s.workloads = []
    for name, spec, where in named_entries(
            top["workloads"], "workloads",
            "a map of workload name -> { target, steps, evals, ... }"):
        check_map(spec, where, ("base", "target", "quick_target", "steps", "evals",
                                "quick_steps", "train"), ("target",))
        base_name = spec.get("base", name)
        if base_name not in WORKLOADS:
            raise SuiteError("%s%s: got %s; expected a workload of training_bench.py: %s" %
                             (where, ".base" if "base" in spec else
                              " (no base: the name is the base)", describe(base_name),
                              ", ".join(WORKLOADS)))
        base = WORKLOADS[base_name]
        higher = higher_is_better(base)
        spec = dict(spec)
        spec["target"] = parse_target(spec["target"], where + ".target", higher, base)
        spec["quick_target"] = parse_target(spec.get("quick_target", spec["target"]),
                                            where + ".quick_target", higher, base)
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


def check_straggler_step(s):
    """Under straggler_step bsp, straggler runs are timed by bsp without stragglers:
    raises SuiteError when the suite (or its restriction) lacks that run."""
    if s.straggler_step == "bsp" and any(st.spec for st in s.stragglers):
        if not any(m.spec == {"mode": "bsp"} for m in s.modes) or \
                not any(not st.spec for st in s.stragglers):
            raise SuiteError("straggler_step: bsp times the stragglers' step by the run under "
                             "{ mode: bsp } with no stragglers; add that mode and a setting "
                             "such as none: {} to stragglers, or set straggler_step: compute")


def parse_target(target, where, higher, base):
    """Checks one target map ({ at_least | at_most | within_of_reference: X })
    at key path `where`; returns it or raises SuiteError."""
    target = check_map(target, where, ("at_least", "at_most", "within_of_reference"))
    if len(target) != 1:
        raise SuiteError("%s: expected exactly one of at_least, at_most, within_of_reference" %
                         where)
    (kind, value), = target.items()
    if kind == "within_of_reference":
        check_number(value, where + "." + kind, 0, 1, low_open=True, high_open=True)
    else:
        check_number(value, where + "." + kind, -1e300, None)
        if (kind == "at_least") != higher:
            raise SuiteError("%s.%s: the metric %s is better when %s; use %s or "
                             "within_of_reference" %
                             (where, kind, base["metric"], "higher" if higher else "lower",
                              "at_least" if higher else "at_most"))
    return target


def load_suite(path):
    """Reads and checks the suite file; returns a Suite or raises SuiteError
    (whose message leaves the file name to the caller)."""
    import yaml
    try:
        with open(path) as f:
            doc = yaml.load(f, Loader=strict_loader())
    except OSError as e:
        raise SuiteError("cannot read it: %s" % e.strerror)
    except yaml.YAMLError as e:
        raise SuiteError("YAML error: %s" % re.sub(r"\s+", " ", str(e)))
    return parse_suite(doc)


def check_data(suite, only):
    """None when every workload (of `only`, when given) that reads Fashion-MNIST
    finds its files, else what is missing and what to do."""
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
