"""Running a suite: the checks before, the runs in order (or --jobs at a
time, in two phases), --resume and --report-only, the progress lines, and
the tables and plots after.

run_suite(args) is the convergence suite's command; its options are
convergence_suite.py's.
"""

import json
import os
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

from psbench import plots, report
from psbench.checks import SuiteError
from psbench.runs import assign_step, plan, run_settings, step_base
from psbench.suite import check_data, load_suite
from psbench.workloads import BINARIES, job_yaml, missing_binaries, run_job, yaml_scalar

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_SKIPPED = 0, 1, 2, 77


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
            text = job_yaml(job, 1, "{ mode: bsp }", steps, evals, run.csv, args.quick,
                            seed=run.seed, shards=suite.shards)
        else:
            parts = [run.straggler.flow] if run.straggler.flow else []
            if run.step_ms is not None:
                parts.append("step_ms: %s" % yaml_scalar(run.step_ms))
            if run.mode.balance:
                parts.append("balance: true")
            flow = ", ".join(parts)
            text = job_yaml(job, suite.workers, run.mode.flow, steps, evals, run.csv,
                            args.quick, seed=run.seed, stragglers=flow, shards=suite.shards,
                            backup_workers=run.mode.backups, lr_scale=run.mode.lr_scale)
        _, _, run.wall_s = run_job(args.bin, run.dir, run.tag, text, run.is_reference,
                                   timeout=args.run_timeout)
        run.read()
    except (RuntimeError, OSError, ValueError, KeyError) as e:
        run.error = str(e)
        return
    with open(marker, "w") as f:
        json.dump({"key": key, "wall_s": run.wall_s}, f)


def format_duration(s):
    """Seconds as 42s, 3m05s or 1h07m."""
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


def check_request(suite, args):
    """None when the command can go ahead, else its exit code, after saying why."""
    names = [w.name for w in suite.workloads]
    for name in args.only or []:
        if name not in names:
            print("convergence_suite: --only %s: not a workload of %s (it has %s)" %
                  (name, args.suite, ", ".join(names)), file=sys.stderr)
            return EXIT_USAGE
    if not args.report_only:
        missing = missing_binaries("convergence_suite", args.bin)
        if missing:
            print(missing, file=sys.stderr)
            return EXIT_USAGE
        problem = check_data(suite, args.only)
        if problem:
            print("convergence_suite: skipped: " + problem, file=sys.stderr)
            return EXIT_SKIPPED
    return None


def snapshot_binaries(args):
    """Copies the binaries to <out>/bin and points args.bin there."""
    # Runs use copies, so a rebuild of --bin while the suite runs (a long
    # one) neither breaks a run nor changes the code under measurement.
    snapshot = os.path.join(args.out, "bin")
    os.makedirs(snapshot, exist_ok=True)
    for b in BINARIES:
        shutil.copy2(os.path.join(args.bin, b), os.path.join(snapshot, b))
    args.bin = snapshot


def resume(runs, suite, args):
    """--resume and --report-only: takes the runs a previous invocation
    finished with the same settings; returns them."""
    reused = []
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
    return reused


def execute_all(todo, runs, reused, suite, args, progress):
    """Runs `todo`; False when interrupted (Ctrl-C)."""
    # The reference of each workload and seed runs first (plan order), so a
    # run's progress line can say whether it met a target relative to it.
    refs = {(r.workload.name, r.seed): r for r in reused if r.is_reference}

    def after(run):
        if run.is_reference and not run.error:
            refs[(run.workload.name, run.seed)] = run
        ref = refs.get((run.workload.name, run.seed))
        run.threshold = run.workload.threshold(ref.final() if ref else None)
        progress.finished(run)

    def execute_timed(run):
        if assign_step(run, runs, suite, args):
            execute(run, suite, args)

    executor = ThreadPoolExecutor(max_workers=args.jobs)
    try:
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
        return False
    executor.shutdown()
    return True


def finish(suite, runs, args, progress):
    """Writes runs.csv, the summary and the plots; returns the exit code."""
    report.set_thresholds(suite, runs)
    unknown = [r for r in runs if not r.error and r.start_offset_s is None]
    if unknown:
        print("convergence_suite: warning: the workers' training starts were not found in the "
              "logs of %d runs (e.g. %s); their times count from worker 0's start" %
              (len(unknown), os.path.join(unknown[0].dir, unknown[0].tag + ".log")),
              file=sys.stderr)
    report.write_runs_csv(os.path.join(args.out, "runs.csv"), runs)
    report.write_summary(suite, runs, args.out, args.quick)
    missing = []
    for w in suite.workloads:
        if any(r.workload is w for r in runs):
            for path in plots.plot_workload(w, suite, runs, args.out, args.dpi):
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


def run_suite(args):
    """The convergence suite as the command line `args` asks; returns the exit code."""
    try:
        suite = load_suite(args.suite)
    except SuiteError as e:
        print("convergence_suite: %s: %s" % (args.suite, e), file=sys.stderr)
        return EXIT_USAGE
    try:
        suite.restrict(args.modes, args.stragglers)
    except SuiteError as e:
        print("convergence_suite: %s (in %s)" % (e, args.suite), file=sys.stderr)
        return EXIT_USAGE
    if args.quick:
        for w in suite.workloads:
            w.use_quick_target()
    code = check_request(suite, args)
    if code is not None:
        return code
    args.out = os.path.abspath(args.out)
    os.makedirs(args.out, exist_ok=True)
    if not args.report_only:
        snapshot_binaries(args)
        report.write_context(args)

    runs = plan(suite, args)
    print("convergence_suite: %d runs (%d workloads x %d seeds x (1 reference + %d modes x %d "
          "straggler settings))%s; results in %s" %
          (len(runs), len({r.workload.name for r in runs}),
           len(suite.run_seeds(args.quick)), len(suite.modes),
           len(suite.stragglers), ", quick" if args.quick else "", args.out), flush=True)
    reused = resume(runs, suite, args) if args.resume or args.report_only else []
    todo = [] if args.report_only else [r for r in runs if not r.reused]
    progress = Progress(todo)
    if not execute_all(todo, runs, reused, suite, args, progress):
        print("convergence_suite: interrupted; --resume keeps the finished runs",
              file=sys.stderr)
        return 130
    return finish(suite, runs, args, progress)
