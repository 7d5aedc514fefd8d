"""What the benchmark scripts of benchmarks/ share, and the convergence suite.

  workloads  the training workloads, their job YAML, the --bin check and the
             runner of one job (training_bench.py, kill_restart_bench.py and
             the convergence suite use them)
  checks     checks of suite-file values (SuiteError)
  suite      the suite file: loading, checking, what it describes
  runs       the runs of a suite: order, settings, what each measured
  runner     running a suite: --jobs, --resume, --report-only, progress
  report     runs.csv, summary.csv, summary.md, suite.yaml, machine.txt
  plots      the PNGs

The scripts import it as `psbench` from benchmarks/; the convergence suite's
command line, outputs and definitions are documented at the top of
convergence_suite.py.
"""
