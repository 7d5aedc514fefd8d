#!/usr/bin/env python3
"""A training job whose servers are killed with SIGKILL, against the same job uninterrupted.

  python3 benchmarks/kill_restart_bench.py [--kills 10] [--steps 14000] [--seed 1]
  python3 benchmarks/kill_restart_bench.py --replication 2 --aggregate [--victims primary]

Trains the Fashion-MNIST MLP 784-100-10 (2 shards, 2 workers, bsp) twice
with ps_launch: once untouched, once while a killer sends SIGKILL to a
random server --kills times in all, at random points of the training
progress (clocks, so the schedule does not depend on the machine's speed),
each time once the job is whole again.

Factor 1 (default): checkpoints every --every clocks; ps_launch restarts
each killed shard from its newest checkpoint and the workers go on. Reports
the clocks of updates each kill cost (from the shards' logs) and the time
from each kill to the new process serving.

--replication 2: no checkpoints; the victim is any server (or --victims
primary / backup). A dead primary's backup is promoted and the dead process
rejoins as a backup that copies the shard. Reports, per kill of a primary,
the time from the kill to the first pull the promoted backup served (the
time stamp of its "first pull served as the primary" line against the
kill's), and per kill the time until the rejoined replica's copy was whole.
--aggregate (consistency.aggregate) makes every run's arithmetic the same,
so an exact fail-over leaves the accuracy unchanged to the last digit.

Both: both runs' final test accuracy (worker 0's last evaluation, on the
10,000 test images), their run times, and how long the workers waited for a
killed shard. Exit code 0 when the killed run finished, every kill happened,
no replicated shard lost a clock and the final accuracy is within
--tolerance of the uninterrupted run's (default 0.005 at factor 1, 0.001
with replicas); 1 otherwise; 77 (skipped) without the data set. CI runs
short versions (ctest kill_restart_bench_quick: 3 kills, 4000 steps,
checkpoints every 50 clocks; kill_restart_bench_replicated_quick: the same
with --replication 2 --aggregate).

Needs the binaries in build/bin (./ps build) and dataset-fashion-mnist.
Writes each run's config, log and metrics CSV under --out (default
build/kill_restart_bench).
"""

import argparse
import datetime
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from psbench import workloads  # noqa: E402  (the workloads, job YAML and metrics CSV)

NAME = r"(server \d+(?: backup \d+)?)"
STARTED = re.compile(r"^\[launch\] started %s \(pid (\d+)\)" % NAME)
RESTARTED = re.compile(r"^\[launch\] %s killed by signal 9 .*restarted it "
                       r"\(restart \d+ of \d+, pid (\d+)\)" % NAME)
PROMOTED = re.compile(r"^\[launch\] %s killed by signal 9 .*; %s is shard \d+'s primary now" %
                      (NAME, NAME))
SERVING = re.compile(r"^\[%s\] .*shard \d+ serving " % NAME)
FIRST_PULL = re.compile(r"^\[%s\] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) .*"
                        r"first pull served as the primary" % NAME)
JOINS = re.compile(r"^\[launch\] .*restarted it .*: it joins shard \d+ as backup \d+")
REJOINED = re.compile(r"^\[%s\] .*holds every acknowledged entry \(\d+\) and is a full replica again" %
                      NAME)
LOST = re.compile(r"^\[%s\] .*worker \d+ is at clock (\d+) and this shard started "
                  r"at clock (\d+).*\((\d+) clocks?\)" % NAME)
BACK = re.compile(r"^\[worker \d+\] .*server \d+ at \S+ is back after (\d+) ms")
DONE = re.compile(r"^\[worker \d+\] .*done")
PROGRESS = re.compile(r"^\[worker \d+\] .*worker \d+: clock\s+(\d+) ")
WORKERS = 2


def job_yaml(steps, evals, metrics_csv, checkpoint_dir, every, kills, replication, aggregate):
    w = workloads.WORKLOADS["mlp"]
    consistency = "{ mode: bsp, aggregate: true }" if aggregate else "{ mode: bsp }"
    text = workloads.job_yaml(w, WORKERS, consistency, steps, evals, metrics_csv, False,
                              replication=replication)
    # A progress line every 1% of the steps: the killer follows the clocks.
    text = re.sub(r"  log_every: \d+\n",
                  "  log_every: %d\n" % max(1, steps // WORKERS // 100), text)
    text = text.replace("liveness: { heartbeat_ms: 500, timeout_ms: 60000 }",
                        "liveness: { heartbeat_ms: 500, timeout_ms: 60000, "
                        "server_restarts: %d }" % max(10, kills))
    if replication > 1:
        return text  # the backups are the recovery: no checkpoints
    return text + "checkpoint: { dir: %s, every_clocks: %d, keep: 2 }\n" % (checkpoint_dir, every)


def log_time(stamp):
    """time.time() of a log line's local time stamp."""
    return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S.%f").timestamp()


class Job:
    """One ps_launch run; follows its output to know the servers' pids and
    roles (every process is named as the launcher names it: "server 0",
    "server 0 backup 1")."""

    def __init__(self, bin_dir, config, log_path, replication):
        self.lock = threading.Condition()
        self.replication = replication
        self.pids = {}        # name -> pid of its current process
        self.primary = {}     # name -> it serves its shard as the primary
        self.serving = {}     # name -> the current process is serving (factor 1)
        self.serving_at = {}  # name -> time.monotonic() when it said so
        self.first_pull = {}  # name -> time.time() of its first pull as a promoted primary
        self.rejoined = []    # time.monotonic() of each replica's copy becoming whole
        self.joins = 0        # replicas started again to take a copy
        self.restarts = {}    # name -> restarts so far
        self.lost = {}        # (name, restart) -> most clocks lost of any worker
        self.back_ms = []     # each worker's wait for a killed shard to be back
        self.done = False
        self.clock = 0        # the highest clock of any worker's progress line
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen([os.path.join(bin_dir, "ps_launch"), "--config", config],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     bufsize=1)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.log.write(line)
            line = line.rstrip("\n")
            with self.lock:
                self._follow(line)
                self.lock.notify_all()
        with self.lock:
            self.done = True
            self.lock.notify_all()

    def _follow(self, line):
        m = PROMOTED.match(line)
        if m:
            self.primary[m.group(1)] = False  # it comes back as a backup
            self.primary[m.group(2)] = True
        m = RESTARTED.match(line)
        if m:
            name = m.group(1)
            self.restarts[name] = self.restarts.get(name, 0) + 1
            self.lost[(name, self.restarts[name])] = 0
            self.pids[name] = int(m.group(2))
            self.serving[name] = False
        m = STARTED.match(line)
        if m:
            self.pids[m.group(1)] = int(m.group(2))
            self.primary[m.group(1)] = "backup" not in m.group(1)
            self.serving[m.group(1)] = False
        m = SERVING.match(line)
        if m:
            self.serving[m.group(1)] = True
            self.serving_at[m.group(1)] = time.monotonic()
        m = FIRST_PULL.match(line)
        if m:
            self.first_pull[m.group(1)] = log_time(m.group(2))
        if JOINS.match(line):
            self.joins += 1
        if REJOINED.match(line):
            self.rejoined.append(time.monotonic())
        m = LOST.match(line)
        if m:
            key = (m.group(1), self.restarts.get(m.group(1), 0))
            self.lost[key] = max(self.lost.get(key, 0), int(m.group(4)))
        m = BACK.match(line)
        if m:
            self.back_ms.append(int(m.group(1)))
        m = PROGRESS.match(line)
        if m:
            self.clock = max(self.clock, int(m.group(1)))
        if DONE.match(line):
            self.done = True

    def wait(self):
        code = self.proc.wait()
        self.reader.join()
        self.log.close()
        return code

    def wait_for_clock(self, clock, timeout):
        """Waits until some worker reported `clock`; False when the job ended first."""
        with self.lock:
            if not self.lock.wait_for(lambda: self.done or self.clock >= clock, timeout):
                raise RuntimeError("no worker reached clock %d within %d s" % (clock, timeout))
            return not self.done

    def kill_random_server(self, rng, victims, timeout):
        """SIGKILLs a random server (`victims`: "any", "primary" or
        "backup") once every shard is whole again, and waits until it is
        whole again. Returns (name, was_primary, seconds from the kill to
        the first pull served by the shard's new primary or None, seconds
        from the kill to a full replica again), or None when the job ended
        first."""
        with self.lock:
            if not self.lock.wait_for(lambda: self.done or self._ready(), timeout):
                raise RuntimeError("the shards were not all whole within %d s" % timeout)
            if self.done:
                return None
            names = sorted(n for n in self.pids if victims == "any" or
                           self.primary[n] == (victims == "primary"))
            name = rng.choice(names)
            was_primary = self.primary[name]
            pid = self.pids[name]
            self.first_pull.clear()
            os.kill(pid, signal.SIGKILL)
            killed_at, killed_wall = time.monotonic(), time.time()
            if not self.lock.wait_for(lambda: self.done or (self.pids[name] != pid and
                                                            self._ready()), timeout):
                raise RuntimeError("%s was not replaced %d s after the kill" % (name, timeout))
            if self.pids[name] == pid:
                return None  # the job ended before the restart
            if self.replication == 1:
                back = self.serving_at[name] - killed_at
                return name, True, back, back
            serving = None
            if was_primary:
                # The shard's new primary (the promoted backup) served a pull.
                if not self.lock.wait_for(lambda: self.done or self.first_pull, timeout):
                    raise RuntimeError("no promoted primary served a pull within %d s" % timeout)
                if not self.first_pull:
                    return None
                serving = min(self.first_pull.values()) - killed_wall
            return name, was_primary, serving, self.rejoined[-1] - killed_at

    def _ready(self):
        """Every shard serves with all its replicas (under the lock)."""
        if self.replication == 1:
            return bool(self.serving) and all(self.serving.values())
        return len(self.rejoined) >= self.joins


def final_accuracy(metrics_csv):
    evaluations, _ = workloads.read_metrics(metrics_csv)
    return evaluations[-1], workloads.tail_mean(evaluations)


def run(args, name, kills):
    out = os.path.join(args.out, name)
    os.makedirs(out, exist_ok=True)
    checkpoints = os.path.join(out, "checkpoints")
    subprocess.call(["rm", "-rf", checkpoints])
    metrics = os.path.join(out, "metrics.csv")
    workloads.clear_metrics(metrics)
    config = os.path.join(out, "job.yaml")
    with open(config, "w") as f:
        f.write(job_yaml(args.steps, args.evals, metrics, checkpoints, args.every, kills,
                         args.replication, args.aggregate))
    start = time.monotonic()
    job = Job(args.bin, config, os.path.join(out, "launch.log"), args.replication)
    serving, whole, primaries = [], [], 0
    try:
        rng = random.Random(args.seed)
        # Random points between 5% and 90% of each worker's steps.
        per_worker = args.steps // WORKERS
        targets = sorted(int(rng.uniform(0.05, 0.9) * per_worker) for _ in range(kills))
        for i, target in enumerate(targets):
            if not job.wait_for_clock(target, timeout=300):
                break
            killed = job.kill_random_server(rng, args.victims, timeout=120)
            if killed is None:
                break
            victim, was_primary, to_serving, to_whole = killed
            primaries += was_primary
            whole.append(to_whole)
            if to_serving is not None:
                serving.append(to_serving)
            print("%s: kill %d at clock %d: %s (%s): %s%s whole again after %.2f s" %
                  (name, i + 1, target, victim, "primary" if was_primary else "backup",
                   "" if to_serving is None else "its shard served a pull after %.0f ms, " %
                   (to_serving * 1000), "its shard" if args.replication == 1 else "every shard",
                   to_whole), file=sys.stderr)
    except BaseException:
        job.proc.send_signal(signal.SIGTERM)  # ps_launch stops every process of the job
        job.wait()
        raise
    code = job.wait()
    seconds = time.monotonic() - start
    if code != 0:
        raise RuntimeError("ps_launch exited with %d; see %s" % (code,
                                                                  os.path.join(out, "launch.log")))
    final, tail = final_accuracy(metrics)
    return {"final": final, "tail": tail, "seconds": seconds, "kills": len(whole),
            "primaries": primaries, "serving": serving, "whole": whole,
            "lost": list(job.lost.values()), "back_ms": job.back_ms}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--steps", type=int, default=14000,
                   help="minibatches of the whole job (each of the 2 workers runs half)")
    p.add_argument("--evals", type=int, default=14)
    p.add_argument("--every", type=int, default=100,
                   help="checkpoint.every_clocks (factor 1)")
    p.add_argument("--replication", type=int, default=1, choices=(1, 2),
                   help="replication.factor; with 2 or more no checkpoints are written")
    p.add_argument("--aggregate", action="store_true",
                   help="consistency.aggregate: one update per clock, the mean of the workers' "
                        "pushes (the same arithmetic in every run)")
    p.add_argument("--victims", default="any", choices=("any", "primary", "backup"),
                   help="which servers are killed (factor 2 or more)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="largest accuracy difference to the uninterrupted run (default 0.005 "
                        "with factor 1, 0.001 with replicas)")
    p.add_argument("--seed", type=int, default=1, help="seed of the kill times and victims")
    p.add_argument("--bin", default=os.path.join(workloads.ROOT, "build", "bin"))
    p.add_argument("--out", default=os.path.join(workloads.ROOT, "build", "kill_restart_bench"))
    args = p.parse_args()
    if args.tolerance is None:
        args.tolerance = 0.005 if args.replication == 1 else 0.001
    if args.replication == 1 and args.victims != "any":
        p.error("--victims needs --replication 2 or more (factor 1 has primaries only)")
    missing = workloads.missing_binaries("kill_restart_bench", args.bin)
    if missing:
        print(missing, file=sys.stderr)
        return 2
    if not os.path.isdir(workloads.FASHION_MNIST_DIR):
        print("kill_restart_bench: dataset-fashion-mnist is not installed (./ps setup); "
              "skipped", file=sys.stderr)
        return 77
    try:
        calm = run(args, "uninterrupted", 0)
        print("uninterrupted: final accuracy %.4f (last 3: %.4f), %.1f s" %
              (calm["final"], calm["tail"], calm["seconds"]), file=sys.stderr)
        hit = run(args, "killed", args.kills)
    except RuntimeError as e:
        print("kill_restart_bench: %s" % e, file=sys.stderr)
        return 1
    diff = hit["final"] - calm["final"]

    def spread(values, fmt, scale=1):
        values = [v * scale for v in values]
        return (fmt + ", " + fmt) % (statistics.median(values), max(values)) if values else "-"

    print("| run | factor | kills (of primaries) | final test accuracy | mean of last 3 | "
          "run time s | kill to serving ms | kill to whole again s | "
          "workers' wait for the shard ms | clocks lost per kill |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("| uninterrupted | %d | 0 | %.4f | %.4f | %.1f | - | - | - | - |" %
          (args.replication, calm["final"], calm["tail"], calm["seconds"]))
    print("| killed | %d | %d (%d) | %.4f (%+.2f points) | %.4f | %.1f | %s | %s | %s | %s |" %
          (args.replication, hit["kills"], hit["primaries"], hit["final"], diff * 100,
           hit["tail"], hit["seconds"], spread(hit["serving"], "%.0f", 1000),
           spread(hit["whole"], "%.2f"), spread(hit["back_ms"], "%d"),
           spread(hit["lost"], "%d") if args.replication == 1 else "0"))
    print("(pairs: median, max)")
    if hit["serving"]:
        print("kill to serving, ms, each kill: %s" %
              " ".join("%.0f" % (v * 1000) for v in sorted(hit["serving"])))
    ok = True
    if hit["kills"] < args.kills:
        print("kill_restart_bench: only %d of %d kills happened before the job ended; lower "
              "--kills or raise --steps" % (hit["kills"], args.kills), file=sys.stderr)
        ok = False
    if args.replication > 1 and any(hit["lost"]):
        print("kill_restart_bench: a replicated shard lost clocks: %s" % hit["lost"],
              file=sys.stderr)
        ok = False
    if abs(diff) > args.tolerance:
        print("kill_restart_bench: the killed run's accuracy differs by %.4f (> %.4f)" %
              (abs(diff), args.tolerance), file=sys.stderr)
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
