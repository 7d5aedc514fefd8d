"""A Python worker for sums_job_test.py, launch_test.py and the launcher
tests (tests/launchers/): started like ps_worker (--config, and --rank or
the launcher's environment), it pushes integer-valued gradients for C
clocks (default 10) and checks what it pulls.

    sum_worker.py --config job.yaml [--rank R] [--clocks C]

Clock c of worker r pushes (r + 1) * (c + 1) to every value of the dense
table, and the same to ids 2^63 + c and 7 of the hashed table. Under bsp
the pull after clock c holds at least every worker's pushes of clocks
<= c; after the last clock it holds exactly all of them (the sums of
integers are exact in float32). Prints "worker <rank>: sums ok <value>
(rank from <source>)" and exits 0, or exits 1 naming what differed.
"""

import argparse
import sys

import numpy as np

import ps


def pushed_through(clock, workers):
    """What every worker pushed to one value over clocks 0..clock."""
    return sum((r + 1) * (c + 1) for r in range(workers) for c in range(clock + 1))


def main():
    worker, rest = ps.worker_from_argv()
    parser = argparse.ArgumentParser()
    parser.add_argument("--clocks", type=int, default=10)
    clocks = parser.parse_args(rest).clocks
    with worker as w:
        dense, by_id = w.tables["dense"], w.tables["by_id"]
        workers = w.num_workers
        grads = np.empty(dense.shape, np.float32)
        for c in range(clocks):
            grads.fill((w.rank + 1) * (c + 1))
            pushed = dense.push_async(grads)
            ids = np.array([2**63 + c, 7], np.uint64)
            by_id.push(ids, np.full((2, 2), (w.rank + 1) * (c + 1), np.float32))
            pushed.wait()
            w.clock()
            low = pushed_through(c, workers)
            values = dense.pull()
            if values.min() < low:
                print("clock %d: pulled %s, below the bsp bound %d" % (c, values.min(), low))
                return 1
        w.clock()
        final = dense.pull()
        total = pushed_through(clocks - 1, workers)
        if not (final == total).all():
            print("after the last clock: pulled %s, expected %d everywhere" % (final, total))
            return 1
        per_clock = by_id.pull(np.array([2**63 + c for c in range(clocks)], np.uint64))
        expected = [[sum((r + 1) * (c + 1) for r in range(workers))] * 2 for c in range(clocks)]
        if not (per_clock == np.array(expected, np.float32)).all() or \
                not (by_id.pull(np.array([7], np.uint64)) == total).all():
            print("hashed table: pulled %s, expected %s and %d" % (per_clock, expected, total))
            return 1
        # One write: under PYTHONUNBUFFERED print writes the line and its end
        # apart, and a launcher that merges workers' output may part them.
        sys.stdout.write("worker %d: sums ok %d (rank from %s)\n" % (w.rank, total, w.rank_source))
    return 0


if __name__ == "__main__":
    sys.exit(main())
