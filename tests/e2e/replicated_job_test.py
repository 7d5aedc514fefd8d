#!/usr/bin/env python3
"""A job with replication.factor 2 with the real binaries, as a user runs it.

Part 1, by hand: two ps_server shards and their backups (ps_server
--replica 1), two ps_workers train a linear-regression job under bsp; then
`ps_ctl status` of the shards and `ps_ctl status --replica 1` of the
backups show the same checksum of every table and the same clocks;
`ps_ctl shutdown`
stops the shards, and their backups exit 0 with them.

Part 2, under ps_launch: the same job succeeds with every replica started
and stopped by the launcher; a primary killed while the job runs is
replaced by its backup (promoted by ps_launch, it takes over the shard's
address), and comes back as a backup that takes a copy from the new
primary; once that copy is whole the new primary is killed too, the
rejoined replica takes over, and the job succeeds; so does the job whose
backup is killed (the primary goes on without it until it rejoins).

  replicated_job_test.py BIN_DIR

Exit code 0 when every check held, 1 otherwise. Every process is killed at
the end, also on failure.
"""

import os
import re
import signal
import sys
import time

from job_checks import Checks, run, spawn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "util"))
from ports import free_port_offset, free_ports  # noqa: E402

JOB = """cluster: {{ servers: ["127.0.0.1:{p0}", "127.0.0.1:{p1}"], workers: 2 }}
tables:
  - {{ name: weights, rows: 16, dim: 1, optimizer: {{ type: sgd, lr: 0.1 }} }}
consistency: {{ mode: bsp }}
rendezvous: {{ timeout_ms: 10000 }}
server: {{ exit_when_workers_leave: {leave} }}
client: {{ request_timeout_ms: 9500 }}
replication: {{ factor: 2, port_offset: {offset} }}
train: {{ table: weights, features: 16, samples_per_worker: 1024, batch_size: 32,
         iterations: {iterations}, log_every: 30 }}
"""

checks = Checks()
check = checks.check


def write_job(path, leave, iterations):
    p0, p1 = free_ports(2)
    offset = free_port_offset([p0, p1])
    with open(path, "w") as f:
        f.write(JOB.format(p0=p0, p1=p1, offset=offset, leave=leave, iterations=iterations))


def lines(report, key):
    return sorted(l for l in report.splitlines() if l.startswith(key))


def by_hand(bin_dir, tmp, procs):
    ps_ctl = os.path.join(bin_dir, "ps_ctl")
    job = os.path.join(tmp, "job.yaml")
    write_job(job, "false", 60)
    server = os.path.join(bin_dir, "ps_server")
    backups = [spawn([server, "--config", job, "--shard", str(s), "--replica", "1"])
               for s in range(2)]
    primaries = [spawn([server, "--config", job, "--shard", str(s)]) for s in range(2)]
    procs += backups + primaries
    workers = [spawn([os.path.join(bin_dir, "ps_worker"), "--config", job, "--rank", str(r)])
               for r in range(2)]
    procs += workers
    for r, w in enumerate(workers):
        out, _ = w.communicate(timeout=120)
        check(w.returncode == 0 and "done" in out, "worker %d trained with factor 2" % r, out)

    rc, primary = run([ps_ctl, "status", "--config", job, "--raw"])
    rc2, backup = run([ps_ctl, "status", "--config", job, "--raw", "--replica", "1"])
    check(rc == 0 and rc2 == 0, "ps_ctl status of the shards and of their backups",
          primary + backup)
    sums = lines(primary, "checksum")
    check(len(sums) == 2 and sums == lines(backup, "checksum"),
          "every backup holds its shard's table bit for bit: %s" % sums, primary + backup)
    check(lines(primary, "worker_clocks") == ["worker_clocks 60 60"] * 2 and
          lines(backup, "worker_clocks") == ["worker_clocks 60 60"] * 2,
          "the backups hold the workers' clocks", primary + backup)
    committed = re.findall(r"replication factor 2 epoch 0 last_seq (\d+) committed (\d+)", primary)
    check(len(committed) == 2 and all(a == b and int(a) > 60 for a, b in committed),
          "every entry acknowledged: %s" % committed, primary)
    applied = re.findall(r"replica applied (\d+) refused 0", backup)
    check(sorted(applied) == sorted(a for a, _ in committed),
          "the backups applied every entry and refused none: %s" % applied, backup)

    rc, out = run([ps_ctl, "shutdown", "--config", job])
    check(rc == 0, "ps_ctl shutdown of the shards", out)
    for s, p in enumerate(primaries):
        out, _ = p.communicate(timeout=30)
        check(p.returncode == 0, "shard %d exited 0" % s, out)
    for s, b in enumerate(backups):
        out, _ = b.communicate(timeout=30)
        check(b.returncode == 0 and "its primary stopped" in out,
              "backup of shard %d exited 0 with its primary" % s, out)


def launched(bin_dir, tmp, procs):
    launch = os.path.join(bin_dir, "ps_launch")
    job = os.path.join(tmp, "launch.yaml")
    write_job(job, "true", 60)
    rc, out = run([launch, "--config", job, "--bin-dir", bin_dir], timeout=180)
    check(rc == 0 and "job succeeded" in out and "[server 1 backup 1]" in out,
          "ps_launch runs the replicated job to success", out)

    # Long enough to kill replicas while it trains. A killed replica comes
    # back as a backup that takes a copy from the running primary; once it
    # knows it is whole (its own line, not its primary's, which comes
    # first: killed in between, the primary's word may not reach it) it
    # can take over in turn.
    kill(launch, bin_dir, job, procs,
         [("server 0", "holds every entry its primary acknowledged"),
          ("server 0 backup 1", None)],
         ["is shard 0's primary now (epoch 1", "joins shard 0 as backup 0",
          "took its primary's copy", "is shard 0's primary now (epoch 3"])
    kill(launch, bin_dir, job, procs, [("server 1 backup 1", None)],
         ["goes on without it", "joins shard 1 as backup 1", "took its primary's copy"])


def kill(launch, bin_dir, job, procs, victims, said):
    """SIGKILLs each of `victims` (name, then the line to wait for before
    the next) of a running ps_launch job; the job must succeed and say
    every line of `said`."""
    write_job(job, "true", 3000)
    p = spawn([launch, "--config", job, "--bin-dir", bin_dir])
    procs.append(p)
    output = []

    def read_until(pattern, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline:
            line = p.stdout.readline()
            if not line:
                return False
            output.append(line)
            if re.search(pattern, line):
                return True
        return False

    # A tenth of the way in: the copies hold real clocks.
    read_until(r"^\[worker 0\].* step +300 ", 60)
    for victim, wait_for in victims:
        pid = None
        for l in output:
            m = re.search(r"started %s \(pid (\d+)\)" % re.escape(victim), l)
            if m:
                pid = int(m.group(1))
        check(pid is not None, "the job trains and names the pid of %s" % victim,
              "".join(output))
        if pid is None:
            return
        os.kill(pid, signal.SIGKILL)
        if wait_for is not None:
            check(read_until(re.escape(wait_for), 60),
                  "after %s was killed: %s" % (victim, wait_for), "".join(output))
    rest, _ = p.communicate(timeout=120)
    out = "".join(output) + rest
    names = " then ".join(v for v, _ in victims)
    missing = [line for line in said if line not in out]
    check(p.returncode == 0 and not missing and "job succeeded" in out,
          "%s killed while the job runs: the job goes on and succeeds (%s)" %
          (names, "; ".join(said)), out + "\nmissing: %s" % missing)


def main():
    bin_dir = sys.argv[1]

    def body(tmp, procs):
        by_hand(bin_dir, tmp, procs)
        launched(bin_dir, tmp, procs)

    return checks.run_and_clean_up(body, prefix="ps_replicated_job_")


if __name__ == "__main__":
    sys.exit(main())
