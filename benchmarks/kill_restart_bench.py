#!/usr/bin/env python3
"""A training job whose shards are killed with SIGKILL, against the same job uninterrupted.

  python3 benchmarks/kill_restart_bench.py [--kills 10] [--steps 14000] [--seed 1]

Trains the Fashion-MNIST MLP 784-100-10 (2 shards, 2 workers, bsp, checkpoints
every --every clocks) twice with ps_launch: once untouched, once while a
killer sends SIGKILL to a random shard at random times, --kills times in all
(each time after the previous victim is serving again), at random points of
the training progress (clocks, so the schedule does not depend on the
machine's speed). ps_launch restarts
each killed shard from its newest checkpoint and the workers go on. Reports
both runs' final test accuracy (worker 0's last evaluation, on the 10,000
test images), their run times, the clocks of updates each kill cost (from the
shards' logs) and the time from each kill to the new process serving.

Exit code 0 when the killed run finished, every kill happened and its final
accuracy is within --tolerance (default 0.005, half a point) of the
uninterrupted run's; 1 otherwise; 77 (skipped) without the data set. CI
runs a short version (ctest kill_restart_bench_quick: 3 kills, 4000 steps,
checkpoints every 50 clocks).

Needs the binaries in build/bin (./ps build) and dataset-fashion-mnist.
Writes each run's config, log and metrics CSV under --out (default
build/kill_restart_bench).
"""

import argparse
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

STARTED = re.compile(r"^\[launch\] started server (\d+) \(pid (\d+)\)")
RESTARTED = re.compile(r"^\[launch\] server (\d+) killed by signal 9 .*restarted it "
                       r"\(restart \d+ of \d+, pid (\d+)\)")
SERVING = re.compile(r"^\[server (\d+)\] .*shard \d+ serving ")
LOST = re.compile(r"^\[server (\d+)\] .*worker \d+ is at clock (\d+) and this shard started "
                  r"at clock (\d+).*\((\d+) clocks?\)")
BACK = re.compile(r"^\[worker \d+\] .*server \d+ at \S+ is back after (\d+) ms")
DONE = re.compile(r"^\[worker \d+\] .*done")
PROGRESS = re.compile(r"^\[worker \d+\] .*worker \d+: clock\s+(\d+) ")
WORKERS = 2


def job_yaml(steps, evals, metrics_csv, checkpoint_dir, every, kills):
    w = workloads.WORKLOADS["mlp"]
    text = workloads.job_yaml(w, WORKERS, "{ mode: bsp }", steps, evals, metrics_csv, False)
    # A progress line every 1% of the steps: the killer follows the clocks.
    text = re.sub(r"  log_every: \d+\n",
                  "  log_every: %d\n" % max(1, steps // WORKERS // 100), text)
    text = text.replace("liveness: { heartbeat_ms: 500, timeout_ms: 60000 }",
                        "liveness: { heartbeat_ms: 500, timeout_ms: 60000, "
                        "server_restarts: %d }" % max(10, kills))
    return text + "checkpoint: { dir: %s, every_clocks: %d, keep: 2 }\n" % (checkpoint_dir, every)


class Job:
    """One ps_launch run; follows its output to know the shards' pids."""

    def __init__(self, bin_dir, config, log_path):
        self.lock = threading.Condition()
        self.pids = {}        # shard -> pid of its current process
        self.serving = {}     # shard -> the current process is serving
        self.serving_at = {}  # shard -> time.monotonic() when it said so
        self.restarts = {}    # shard -> restarts so far
        self.lost = {}        # (shard, restart) -> most clocks lost of any worker
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
                m = RESTARTED.match(line)
                if m:
                    shard = int(m.group(1))
                    self.restarts[shard] = self.restarts.get(shard, 0) + 1
                    self.lost[(shard, self.restarts[shard])] = 0
                m = m or STARTED.match(line)
                if m:
                    self.pids[int(m.group(1))] = int(m.group(2))
                    self.serving[int(m.group(1))] = False
                m = SERVING.match(line)
                if m:
                    self.serving[int(m.group(1))] = True
                    self.serving_at[int(m.group(1))] = time.monotonic()
                m = LOST.match(line)
                if m:
                    key = (int(m.group(1)), self.restarts.get(int(m.group(1)), 0))
                    self.lost[key] = max(self.lost.get(key, 0), int(m.group(4)))
                m = BACK.match(line)
                if m:
                    self.back_ms.append(int(m.group(1)))
                m = PROGRESS.match(line)
                if m:
                    self.clock = max(self.clock, int(m.group(1)))
                if DONE.match(line):
                    self.done = True
                self.lock.notify_all()
        with self.lock:
            self.done = True
            self.lock.notify_all()

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

    def kill_random_shard(self, rng, timeout):
        """SIGKILLs a random serving shard and waits until its new process
        serves. Returns seconds from kill to serving, or None when the job
        ended first."""
        with self.lock:
            if not self.lock.wait_for(lambda: self.done or (self.serving and
                                                            all(self.serving.values())),
                                      timeout):
                raise RuntimeError("the shards were not all serving within %d s" % timeout)
            if self.done:
                return None
            shard = rng.choice(sorted(self.pids))
            pid = self.pids[shard]
            os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic()
            back = self.lock.wait_for(lambda: self.done or (self.pids[shard] != pid and
                                                            self.serving[shard]), timeout)
            if not back:
                raise RuntimeError("shard %d was not serving again %d s after the kill" %
                                   (shard, timeout))
            if self.pids[shard] == pid:
                return None  # the job ended before the restart
            return self.serving_at[shard] - killed_at


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
        f.write(job_yaml(args.steps, args.evals, metrics, checkpoints, args.every, kills))
    start = time.monotonic()
    job = Job(args.bin, config, os.path.join(out, "launch.log"))
    recoveries = []
    try:
        rng = random.Random(args.seed)
        # Random points between 5% and 90% of each worker's steps.
        per_worker = args.steps // WORKERS
        targets = sorted(int(rng.uniform(0.05, 0.9) * per_worker) for _ in range(kills))
        for i, target in enumerate(targets):
            if not job.wait_for_clock(target, timeout=300):
                break
            took = job.kill_random_shard(rng, timeout=120)
            if took is None:
                break
            recoveries.append(took)
            print("%s: kill %d at clock %d: shard serving again after %.2f s" %
                  (name, i + 1, target, took), file=sys.stderr)
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
    return {"final": final, "tail": tail, "seconds": seconds, "recoveries": recoveries,
            "lost": list(job.lost.values()), "back_ms": job.back_ms}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--steps", type=int, default=14000,
                   help="minibatches of the whole job (each of the 2 workers runs half)")
    p.add_argument("--evals", type=int, default=14)
    p.add_argument("--every", type=int, default=100, help="checkpoint.every_clocks")
    p.add_argument("--tolerance", type=float, default=0.005,
                   help="largest accuracy difference to the uninterrupted run")
    p.add_argument("--seed", type=int, default=1, help="seed of the kill times and victims")
    p.add_argument("--bin", default=os.path.join(workloads.ROOT, "build", "bin"))
    p.add_argument("--out", default=os.path.join(workloads.ROOT, "build", "kill_restart_bench"))
    args = p.parse_args()
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
    lost, back = hit["lost"], hit["back_ms"]

    def spread(values, fmt):
        return (fmt + ", " + fmt) % (statistics.median(values), max(values)) if values else "-"

    print("| run | kills | final test accuracy | mean of last 3 | run time s | "
          "kill to serving s | workers' wait for the shard ms | clocks lost per kill |")
    print("|---|---|---|---|---|---|---|---|")
    print("| uninterrupted | 0 | %.4f | %.4f | %.1f | - | - | - |" %
          (calm["final"], calm["tail"], calm["seconds"]))
    rec = hit["recoveries"]
    print("| killed | %d | %.4f (%+.2f points) | %.4f | %.1f | %s | %s | %s |" %
          (len(rec), hit["final"], diff * 100, hit["tail"], hit["seconds"],
           spread(rec, "%.2f"), spread(back, "%d"), spread(lost, "%d")))
    print("(pairs: median, max)")
    ok = True
    if len(rec) < args.kills:
        print("kill_restart_bench: only %d of %d kills happened before the job ended; lower "
              "--kills or raise --steps" % (len(rec), args.kills), file=sys.stderr)
        ok = False
    if abs(diff) > args.tolerance:
        print("kill_restart_bench: the killed run's accuracy differs by %.4f (> %.4f)" %
              (abs(diff), args.tolerance), file=sys.stderr)
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
