#!/usr/bin/env python3
"""How long a running job stops taking writes while `ps_ctl reshard` moves it
onto another number of servers (server/reshard_gate.h).

Workload: one range table of --floats float32 values (rows of dim 64,
optimizer add) on 2 servers under bsp, checkpoint.dir in a temp folder
(no periodic generations: every_clocks 10^6), 2 Python workers started by
ps_launch. Each worker pulls and pushes 256 random rows a clock and notes
the time each clock ends. The driver lets them run, then moves the job from
2 to 3 servers and back to 2 with `ps_ctl reshard` in memory (the next
servers follow the old ones' rows: server/reshard_follower.h), then again
with `ps_ctl reshard --through-generation`, side by side in the same job,
and stops them.

Reported per reshard (median over --runs):
  pause_s      the longest time a worker's clock took around the handover
               clock (from two clocks before it to two after): how long
               the job took no write at the switch (in memory: the old
               shards' kEnd, the new servers' rows put in place and their
               ports bound; through the generation: the handover generation
               written by every old shard, the old servers gone, the new ones
               started and restored; then the moved requests sent again);
  before_s     the longest clock from ps_ctl's start to then: in memory, the
               time the new servers start, make their stores and take their
               copies beside the job (on few cores they slow it down);
  clock_s      the median clock before it, for comparison;
  handover_s   the slowest old shard's "handed over ... in N ms" (through
               the generation: writing its part of it);
  restore_s    through the generation, the slowest new server's "restored
               ... in N s"; in memory, the slowest new server's "rows were
               in place N ms" after the old shards handed over.

With --replication 2 every shard has a backup (replication.factor 2,
ps_launch the authority): in memory every replica of the next map follows
the old primaries, and a push is acknowledged once the new shard's backup
has it too.

  /usr/bin/python3 benchmarks/live_reshard_bench.py [--floats 100000000] [--runs 3]
      [--reconnect-ms 20] [--replication 1]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from psbench.workloads import ROOT, free_port  # noqa: E402  (benchmarks/psbench)

WORKER = r'''
import json, sys, time
import numpy as np
import ps

worker, args = ps.worker_from_argv()
stop_file, out_file = sys.argv[1], sys.argv[2]
with worker as w:
    table = w.tables["w"]
    rng = np.random.default_rng(w.rank)
    out = np.empty((256, table.dim), np.float32)
    grads = np.ones((256, table.dim), np.float32)
    ends = []
    while True:
        ids = rng.integers(0, table.rows, 256, dtype=np.uint64)
        table.pull(ids, out=out)
        table.push(ids, grads)
        w.clock()
        ends.append(time.monotonic())
        if len(ends) % 20 == 0:
            try:
                if open(stop_file).read().strip():
                    break
            except OSError:
                pass
with open(out_file + ".%d" % worker.rank, "w") as f:
    json.dump(ends, f)
'''


def write_job(path, ports, ckpt, rows, script, stop_file, out_file, reconnect_ms,
              replication=(1, 0)):
    servers = ", ".join('"127.0.0.1:%d"' % p for p in ports)
    with open(path, "w") as f:
        f.write("cluster: { servers: [%s], workers: 2 }\n" % servers)
        if replication[0] > 1:
            f.write("replication: { factor: %d, port_offset: %d }\n" % replication)
        f.write("tables: [ { name: w, rows: %d, dim: 64, optimizer: { type: add } } ]\n" % rows)
        f.write("consistency: { mode: bsp }\n")
        f.write("checkpoint: { dir: %s, every_clocks: 1000000, sync: false }\n" % ckpt)
        f.write("client: { request_timeout_ms: 60000 }\n")
        f.write("liveness: { reconnect_ms: %d }\n" % reconnect_ms)
        f.write('train: { command: ["/usr/bin/python3", "%s", "%s", "%s"] }\n'
                % (script, stop_file, out_file))


def wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise SystemExit("live_reshard_bench: timed out waiting for " + what)


# The reshards of one run, in order: (servers before, after, how).
MOVES = ((2, 3, "memory"), (3, 2, "memory"), (2, 3, "generation"), (3, 2, "generation"))


def port_offset(ports, factor):
    """An offset at which every backup's port (port + j * offset) is free."""
    for _ in range(200):
        offset = free_port() - ports[0]
        if offset <= 0:
            continue
        wanted = [p + j * offset for p in ports for j in range(1, factor)]
        if all(q < 65536 and q not in ports for q in wanted) and all(
                port_is_free(q) for q in wanted):
            return offset
    raise SystemExit("live_reshard_bench: no free ports for the backups")


def port_is_free(port):
    import socket
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def one_run(args, tmp):
    rows = args.floats // 64
    ckpt = os.path.join(tmp, "ckpt")
    script = os.path.join(tmp, "worker.py")
    with open(script, "w") as f:
        f.write(WORKER)
    stop_file, out_file = os.path.join(tmp, "stop"), os.path.join(tmp, "ends")
    open(stop_file, "w").close()
    ports = []
    while len(ports) < 3:  # three distinct ones
        port = free_port()
        if port not in ports:
            ports.append(port)
    job2, job3 = os.path.join(tmp, "job2.yaml"), os.path.join(tmp, "job3.yaml")
    replication = (args.replication, port_offset(ports, args.replication)
                   if args.replication > 1 else 0)
    write_job(job2, ports[:2], ckpt, rows, script, stop_file, out_file, args.reconnect_ms,
              replication)
    write_job(job3, ports, ckpt, rows, script, stop_file, out_file, args.reconnect_ms,
              replication)
    env = dict(os.environ, PYTHONPATH=os.path.join(args.build, "python"))
    log_path = os.path.join(tmp, "launch.log")
    bin_dir = os.path.join(args.build, "bin")
    with open(log_path, "w") as log:
        launch = subprocess.Popen([os.path.join(bin_dir, "ps_launch"), "--config", job2],
                                  stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        def log_text():
            with open(log_path) as f:
                return f.read()
        wait_for(lambda: "serving 1 tables" in log_text(), 600, "the servers")
        time.sleep(args.settle_s)
        marks = []
        for frm, to, how in MOVES:
            started = time.monotonic()
            ctl = subprocess.Popen([os.path.join(bin_dir, "ps_ctl"), "reshard", "--config",
                                    job2 if frm == 2 else job3, "--to",
                                    job2 if to == 2 else job3, "--wait-s", "600"] +
                                   (["--through-generation"] if how == "generation" else []),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env=env)
            # The job may fail meanwhile: then ps_ctl would wait for nothing.
            while ctl.poll() is None and launch.poll() is None:
                time.sleep(0.05)
            if ctl.poll() is None:
                ctl.kill()
            out = ctl.communicate()[0]
            if ctl.returncode != 0:
                raise SystemExit("ps_ctl reshard failed:\n" + out + log_text()[-4000:])
            handover = re.search(r"every shard hands over at clock (\d+)", out)
            if handover is None:
                raise SystemExit("ps_ctl reshard named no handover clock:\n" + out)
            marks.append((started, time.monotonic(), int(handover.group(1))))
            time.sleep(args.settle_s)
        with open(stop_file, "w") as f:
            f.write("stop\n")
        launch.wait(timeout=600)
        text = log_text()
        if args.keep_log:
            shutil.copy(log_path, args.keep_log)
    finally:
        if launch.poll() is None:
            launch.kill()
            launch.wait()
    ends = []
    for rank in range(2):
        with open(out_file + ".%d" % rank) as f:
            ends.append(json.load(f))
    handovers = [float(m) / 1e3 for m in re.findall(r"handed over at clock \d+ in (\d+) ms", text)]
    restores = [float(m) for m in re.findall(r"restored \S+ \(\d+ tables\) in ([\d.]+) s", text)]
    in_place = [float(m) / 1e3 for m in re.findall(r"its rows were in place (\d+) ms later", text)]
    results = []
    for i, (start, end, clock) in enumerate(marks):
        frm, to, how = MOVES[i]
        pause, slowest, before = 0.0, 0.0, []
        for e in ends:
            # e[k] is when the worker's clock k ended, so e[k + 1] - e[k] is
            # its work at clock k + 1: the handover clock's is k = clock - 1.
            gaps = [(e[k + 1] - e[k], e[k], k) for k in range(len(e) - 1)]
            pause = max([pause] + [g for g, a, k in gaps if clock - 3 <= k <= clock + 1])
            slowest = max([slowest] + [g for g, a, k in gaps if start <= a and k < clock - 3])
            before += [g for g, a, k in gaps if a < start]
        # Each reshard logs one handover line per old primary, one restore
        # line per new primary, or one in-place line per new replica, in
        # order.
        h, handovers = handovers[:frm], handovers[frm:]
        if how == "generation":
            r, restores = restores[:to], restores[to:]
        else:
            placed = to * args.replication
            r, in_place = in_place[:placed], in_place[placed:]
        results.append({"pause_s": pause, "before_s": slowest,
                        "clock_s": statistics.median(before[-200:]),
                        "handover_s": max(h) if h else float("nan"),
                        "restore_s": max(r) if r else float("nan"),
                        "ctl_s": end - start})
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--floats", type=int, default=100_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle-s", type=float, default=3.0)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--keep-log", default="", help="copy each run's ps_launch log here")
    parser.add_argument("--reconnect-ms", type=int, default=20,
                        help="liveness.reconnect_ms of the job (how often the workers try a "
                             "server's address again)")
    parser.add_argument("--replication", type=int, default=1,
                        help="replication.factor of the job (each shard's copies)")
    args = parser.parse_args()
    runs = []
    for run in range(args.runs):
        tmp = tempfile.mkdtemp(prefix="ps_live_reshard_")
        try:
            runs.append(one_run(args, tmp))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print("run %d: %s" % (run + 1, json.dumps(runs[-1])), flush=True)
    print("\n%d floats (%.0f MB), replication.factor %d, median of %d runs:" % (
        args.floats, args.floats * 4 / 1e6, args.replication, args.runs))
    print("| reshard | rows move | pause (s) | slowest clock before it (s) | clock before (ms) | "
          "handover (s) | restore or in place (s) | ps_ctl (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for i, (frm, to, how) in enumerate(MOVES):
        med = lambda k: statistics.median(r[i][k] for r in runs)
        print("| %d -> %d | %s | %.2f | %.2f | %.1f | %.2f | %.2f | %.2f |" % (
            frm, to, "in memory" if how == "memory" else "through the generation",
            med("pause_s"), med("before_s"), med("clock_s") * 1e3, med("handover_s"),
            med("restore_s"), med("ctl_s")))


if __name__ == "__main__":
    sys.exit(main())
