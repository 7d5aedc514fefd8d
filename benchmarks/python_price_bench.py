#!/usr/bin/env python3
"""The price of Python: pull and push latency and MB/s from the Python
module (numpy arrays and torch tensors) against the C++ client, on the same
server processes, side by side in one run.

  /usr/bin/python3 benchmarks/python_price_bench.py [--quick] [--rounds 60] [--seconds 0.1]
      [--sizes 4K 64K 1M] [--servers 1] [--bin build/bin] [--python build/python]
      [--out build/python_price_bench]

Job: --servers ps_server processes on loopback (started here, stopped by
pid at the end, also on failure), 2 workers, asp (no clock waits), one
dense table per size (rows of 256 floats: 4 KiB is 4 rows; optimizer add,
pushes of 1e-6). Worker 0 is the C++ client: benchmarks/push_latency
--stdin, a process of its own that times what it is asked for. Worker 1 is
this process's ps.Worker. Each takes the whole table with one request in
flight, a request sent and then waited for:
  - C++:      Client::PushDense / PullDense into one buffer, then Wait;
  - numpy:    t.push(array) / t.pull(out=array), the same array each time;
  - torch:    t.push(tensor) / t.pull(out=tensor), a CPU float32 tensor.
A round times each size and op on the three sides in turn (the order of
the sides turned round by round), each for --seconds after --warmup
requests not counted; the sides never run at once, and in slices this
short a slow spell of a shared host falls on all three alike.

Reported: per size and op, the median over rounds of each side's p50 and
MB/s (value bytes per second of the timed requests), and the median of the
rounds' ratios Python p50 / C++ p50 (lower is better; the targets: at most
1.2 at 4 KiB, at most 1.05 at 1 MiB). Every round's numbers go to
--out/results.json, the servers' logs beside it.

--quick: one round of 0.1 s, 4K and 1M (ctest python_price_bench_quick:
fails only if a run fails). Exit 0 when every request succeeded, 1 when
one failed, 2 on missing binaries or module.
"""

import argparse
import functools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIZES = {"4K": 4 << 10, "64K": 64 << 10, "1M": 1 << 20}
DIM = 256  # floats a row
TARGETS = {"4K": 1.2, "1M": 1.05}  # Python p50 / C++ p50, at most
OPS = ("push", "pull")
SIDES = ("numpy", "torch")
MAX_REQUESTS = 10_000_000
LINE = re.compile(r"^table (\d+) (pushes|pulls) (\d+) bytes (\d+) p50_us ([\d.]+) p90_us ([\d.]+) "
                  r"p99_us ([\d.]+) mb_s ([\d.]+)$", re.M)

sys.path.insert(0, os.path.join(ROOT, "tests", "util"))
from ports import free_port  # noqa: E402  (loopback ports below the ephemeral range)


def job_text(servers, sizes):
    addresses = ", ".join('"127.0.0.1:%d"' % free_port() for _ in range(servers))
    lines = ["cluster:", "  servers: [%s]" % addresses, "  workers: 2",
             "consistency: { mode: asp }", "server: { exit_when_workers_leave: false }",
             "tables:"]
    for size in sizes:
        lines += ["  - name: t%s" % size, "    rows: %d" % (SIZES[size] // 4 // DIM),
                  "    dim: %d" % DIM, "    optimizer: { type: add }"]
    return "\n".join(lines) + "\n"


class Servers:
    """The job's ps_server processes, stopped by pid on exit."""

    def __init__(self, bin_dir, job, count, out):
        self.processes = []
        for shard in range(count):
            with open(os.path.join(out, "server%d.log" % shard), "w") as log:
                self.processes.append(subprocess.Popen(
                    [os.path.join(bin_dir, "ps_server"), "--config", job, "--shard", str(shard)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.processes:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.processes:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def time_requests(request, nbytes, seconds, warmup):
    """{p50_us, p90_us, p99_us, mb_s} of `request` called one at a time."""
    for _ in range(warmup):
        request()
    clock = time.perf_counter
    latencies = []
    start = clock()
    until = start + seconds
    now = start
    while now < until and len(latencies) < MAX_REQUESTS:
        request()
        end = clock()
        latencies.append(end - now)
        now = end
    timed = now - start
    return {"p50_us": percentile(latencies, 0.5) * 1e6,
            "p90_us": percentile(latencies, 0.9) * 1e6,
            "p99_us": percentile(latencies, 0.99) * 1e6,
            "mb_s": len(latencies) * nbytes / timed / 1e6, "requests": len(latencies)}


class CppClient:
    """push_latency --stdin: worker 0 of the job, timing what it is asked."""

    def __init__(self, args, job, out):
        self.log = open(os.path.join(out, "push_latency.log"), "w")
        self.process = subprocess.Popen(
            [os.path.join(args.bin, "push_latency"), "--config", job, "--rank", "0", "--stdin",
             "--warmup", str(args.warmup)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
            start_new_session=True)

    def measure(self, table, op, seconds):
        self.process.stdin.write("%d %s %r\n" % (table, op, seconds))
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        m = LINE.match(line.strip())
        if m is None:
            raise RuntimeError("push_latency answered %r (exit %s); see %s"
                               % (line, self.process.poll(), self.log.name))
        return {"p50_us": float(m.group(5)), "p90_us": float(m.group(6)),
                "p99_us": float(m.group(7)), "mb_s": float(m.group(8)),
                "requests": int(m.group(3))}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.process.stdin.close()  # it leaves the job and exits
            self.process.wait(30)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.log.close()


class PythonClient:
    """This process's worker (worker 1), timing the numpy and torch sides."""

    def __init__(self, args, worker, sizes):
        import numpy as np
        import torch
        self.args = args
        self.calls = {}  # (side, size, op) -> the request
        for size in sizes:
            table = worker.tables["t" + size]
            arrays = {"numpy": (np.full(table.shape, 1e-6, np.float32),
                                np.empty(table.shape, np.float32))}
            if args.torch_memory == "numpy":
                # The same allocator, so the same place in a page, as the
                # numpy side's arrays (torch's own start 64 bytes in).
                arrays["torch"] = (torch.from_numpy(np.full(table.shape, 1e-6, np.float32)),
                                   torch.from_numpy(np.empty(table.shape, np.float32)))
            else:
                arrays["torch"] = (torch.full(table.shape, 1e-6), torch.empty(table.shape))
            for side, (grads, out) in arrays.items():
                self.calls[(side, size, "push")] = functools.partial(table.push, grads)
                self.calls[(side, size, "pull")] = functools.partial(table.pull, out=out)

    def measure(self, side, size, op, seconds):
        return time_requests(self.calls[(side, size, op)], SIZES[size], seconds,
                             self.args.warmup)


def report(runs, sizes):
    """The markdown table of the medians over rounds."""
    lines = ["| size | op | C++ p50 us | numpy p50 us | numpy / C++ | torch p50 us | "
             "torch / C++ | target | C++ MB/s | numpy MB/s | torch MB/s |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for size in sizes:
        for op in OPS:
            def med(side, key):
                return statistics.median(r[side][(size, op)][key] for r in runs)

            def ratio(side):
                return statistics.median(
                    r[side][(size, op)]["p50_us"] / r["cpp"][(size, op)]["p50_us"] for r in runs)
            target = TARGETS.get(size)
            lines.append(
                "| %s | %s | %.1f | %.1f | %.3f | %.1f | %.3f | %s | %.0f | %.0f | %.0f |" % (
                    size.replace("K", " KiB").replace("M", " MiB"), op, med("cpp", "p50_us"),
                    med("numpy", "p50_us"), ratio("numpy"), med("torch", "p50_us"),
                    ratio("torch"), "<= %.2f" % target if target else "-", med("cpp", "mb_s"),
                    med("numpy", "mb_s"), med("torch", "mb_s")))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=60)
    p.add_argument("--seconds", type=float, default=0.1,
                   help="timed seconds per side, size and op in a round")
    p.add_argument("--warmup", type=int, default=5, help="requests first, not timed")
    p.add_argument("--sizes", nargs="+", choices=list(SIZES), default=list(SIZES))
    p.add_argument("--servers", type=int, default=1)
    p.add_argument("--torch-memory", choices=["torch", "numpy"], default="torch",
                   help="where the torch side's tensors live: torch's allocator (default) "
                        "or numpy arrays' memory (torch.from_numpy)")
    p.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--python", default=os.path.join(ROOT, "build", "python"),
                   help="the folder holding the built ps package")
    p.add_argument("--out", default=os.path.join(ROOT, "build", "python_price_bench"))
    args = p.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.warmup, args.sizes = 1, 0.1, 5, ["4K", "1M"]
    if not 1 <= args.rounds <= 100 or not 0 < args.seconds <= 60 or not 1 <= args.servers <= 8:
        p.error("--rounds 1..100, --seconds (0, 60], --servers 1..8")
    sizes = [s for s in SIZES if s in args.sizes]
    for b in ("ps_server", "push_latency"):
        if not os.access(os.path.join(args.bin, b), os.X_OK):
            print("python_price_bench: %s not found in %s; build first or pass --bin"
                  % (b, args.bin), file=sys.stderr)
            return 2
    sys.path.insert(0, os.path.abspath(args.python))
    try:
        import ps
        import torch  # noqa: F401 (the torch side)
    except ImportError as e:
        print("python_price_bench: %s (pass --python build/python; torch is python3-torch)" % e,
              file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    job = os.path.join(args.out, "job.yaml")
    with open(job, "w") as f:
        f.write(job_text(args.servers, sizes))

    rounds = []
    sides = ("cpp",) + SIDES
    with Servers(args.bin, job, args.servers, args.out):
        with ps.Worker(job, 1, log_level="warn") as worker, CppClient(args, job, args.out) as cpp:
            python = PythonClient(args, worker, sizes)
            for rnd in range(args.rounds):
                result = {side: {} for side in sides}
                order = sides[rnd % 3:] + sides[:rnd % 3]
                for table, size in enumerate(sizes):
                    for op in OPS:
                        for side in order:
                            if side == "cpp":
                                r = cpp.measure(table, op, args.seconds)
                            else:
                                r = python.measure(side, size, op, args.seconds)
                            result[side][(size, op)] = r
                rounds.append(result)
                print("round %d: %s" % (rnd, ", ".join(
                    "%s %s C++ %.1f numpy %.1f torch %.1f us" % (
                        size, op, *(result[side][(size, op)]["p50_us"] for side in sides))
                    for size in sizes for op in OPS)), file=sys.stderr, flush=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump([{side: {"%s %s" % k: v for k, v in r.items()} for side, r in rnd.items()}
                   for rnd in rounds], f, indent=1)
    print("%d rounds of %.2f s per side, size and op, %d server%s; medians over the rounds:\n"
          % (args.rounds, args.seconds, args.servers, "" if args.servers == 1 else "s"))
    print(report(rounds, sizes))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print("python_price_bench: %s" % e, file=sys.stderr)
        sys.exit(1)
