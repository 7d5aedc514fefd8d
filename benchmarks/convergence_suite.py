#!/usr/bin/env python3
"""Convergence suite: bsp, ssp and asp, with and without stragglers, against one process.

  python3 benchmarks/convergence_suite.py SUITE.yaml [--out DIR] [--quick] [--only NAME ...]
          [--modes MODE ...] [--stragglers NAME ...]
          [--jobs N] [--resume] [--report-only] [--bin DIR] [--run-timeout S] [--dpi N]

For every workload of the suite file (benchmarks/suites/convergence.yaml is
the default suite; its keys are explained there and in benchmarks/docs/convergence_suite.md),
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

This file is the command line; the suite's code is the package psbench
beside it (suite.py the suite file, runs.py and runner.py the runs,
report.py and plots.py the outputs, workloads.py the workloads and job
files).
"""

import argparse
import importlib.util
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from psbench import runner  # noqa: E402  (benchmarks/psbench)
from psbench.workloads import ROOT  # noqa: E402


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
    sys.exit(runner.EXIT_SKIPPED)


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="Exit codes: 0 ok, 1 a run failed, 2 usage or suite-file error, 77 skipped "
               "(matplotlib, PyYAML or Fashion-MNIST missing). Definitions and outputs: see "
               "the top of this file and benchmarks/docs/convergence_suite.md.")
    p.add_argument("suite", help="the suite file, e.g. benchmarks/suites/convergence.yaml")
    p.add_argument("--out", default=os.path.join(ROOT, "build", "convergence_suite"),
                   help="results folder (default build/convergence_suite)")
    p.add_argument("--quick", action="store_true",
                   help="the suite's quick.seeds seeds (default 1), each workload's quick_steps "
                        "and quick.evals evaluations, measured against each workload's "
                        "quick_target: a first look in minutes, its times noisier")
    p.add_argument("--only", nargs="+", metavar="WORKLOAD", help="only these workloads")
    p.add_argument("--modes", nargs="+", metavar="MODE",
                   help="only these modes of the suite, by name (bsp, ssp3, asp, ...)")
    p.add_argument("--stragglers", nargs="+", metavar="NAME",
                   help="only these straggler settings of the suite (none, slow, ...)")
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
    return runner.run_suite(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
