"""etcd as the authority over replicated shards (replication.authority etcd),
with the real binaries and a real etcd (Debian's etcd-server) that this test
starts on loopback ports, its data in a temporary folder, and stops by pid.

    etcd_job_test.py BIN_DIR

Two shards with a backup each (four ps_servers, started by hand as a
cluster's launcher would start them, no ps_launch) and two workers
(replica_pusher) that push integers under bsp. While they train:

  1. the primary of shard 0 is SIGKILLed while pushes are half replicated
     (its backup stopped with SIGSTOP, so nothing is acknowledged; resumed
     after the kill): the backup takes the shard's key once the dead one's
     lease lapses and serves; the workers find it and send it what was not
     acknowledged;
  2. the killed server is started again with the same command: etcd says
     the shard has a primary, so it joins as a backup and takes a copy;
  3. the new primary is SIGKILLed: the rejoined replica takes over in turn;
  4. a backup of shard 1 is SIGKILLed: its primary drops it when its lease
     lapses, and it rejoins when started again.

At the end every row must hold the exact sum of every push (none lost,
none applied twice), every server must exit 0 with the workers, and each
fail-over's time from the kill until every worker moved to the promoted
replica is printed.

All of it runs beside a load that makes etcd slow, as a loaded cluster's
is: a disk writer that syncs every 4 KiB block (etcd's fsyncs wait behind
it) and a busy core, both started here, bounded in time and stopped by
pid. PS_ETCD_TEST_LOAD=0 runs without them.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "util"))
import job_checks  # noqa: E402
from etcd_server import EtcdServer  # noqa: E402
from ports import free_ports  # noqa: E402

checks = job_checks.Checks()
check = checks.check
WAIT_S = 60
LEASE_TTL_S = 2
LOAD_S = 600


class Proc:
    """A child whose output lines are read, stamped, on a thread of its own."""

    def __init__(self, name, argv, procs):
        self.name = name
        self.argv = argv
        self.lines = []  # (time.monotonic(), line)
        self.cond = threading.Condition()
        self.p = job_checks.spawn(argv)
        procs.append(self.p)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            with self.cond:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, pattern, timeout=WAIT_S, after=0.0):
        """The time of the first line after `after` matching `pattern`, or None."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for t, line in self.lines:
                    if t >= after and rx.search(line):
                        return t
                left = deadline - time.monotonic()
                if left <= 0 or (self.p.poll() is not None and not self.reader.is_alive()):
                    return None
                self.cond.wait(min(left, 0.2))

    def output(self):
        with self.cond:
            return "\n".join(l for _, l in self.lines)

    def kill(self):
        os.killpg(self.p.pid, signal.SIGKILL)
        self.p.wait()
        self.reader.join(timeout=5)


def write_job(path, ports, offset, etcd_endpoint, prefix):
    with open(path, "w") as f:
        f.write("cluster: { servers: [\"127.0.0.1:%d\", \"127.0.0.1:%d\"], workers: 2 }\n" %
                (ports[0], ports[1]))
        f.write("tables:\n  - { name: w, rows: 20000, dim: 1, optimizer: { type: add } }\n")
        f.write("consistency: { mode: bsp }\n")
        f.write("client: { request_timeout_ms: 20000 }\n")
        f.write("liveness: { server_down_timeout_ms: 20000 }\n")
        f.write("replication:\n  factor: 2\n  port_offset: %d\n  authority: etcd\n" % offset)
        f.write("  etcd: { endpoints: [\"%s\"], prefix: %s, lease_ttl_s: %d,"
                " request_timeout_ms: 300 }\n" % (etcd_endpoint, prefix, LEASE_TTL_S))


def start_load(tmp, procs):
    """A disk writer (synced 4 KiB writes) and a busy core, for at most
    LOAD_S seconds each; run_and_clean_up stops them by process group."""
    if os.environ.get("PS_ETCD_TEST_LOAD", "1") == "0":
        return
    target = os.path.join(tmp, "load")
    writer = ("end=$((SECONDS + %d)); while [ $SECONDS -lt $end ]; do "
              "dd if=/dev/zero of=%s bs=4k count=20000 oflag=dsync status=none; done" %
              (LOAD_S, target))
    procs.append(job_checks.spawn(["bash", "-c", writer]))
    # --foreground: timeout stays in this process group (it would make one
    # of its own otherwise, which run_and_clean_up's killpg misses, and the
    # busy core outlived the test by up to LOAD_S).
    procs.append(job_checks.spawn(["bash", "-c",
                                   "exec timeout --foreground %d yes > /dev/null" % LOAD_S]))


def body(bin_dir, tmp, procs):
    etcd = EtcdServer()
    try:
        start_load(tmp, procs)
        run(bin_dir, tmp, procs, etcd)
    finally:
        etcd.close()


def run(bin_dir, tmp, procs, etcd):
    ports = free_ports(4)
    # Backups listen at the next server's port + offset: the two extra
    # free ports fix the offset.
    offset = ports[2] - ports[1]
    if offset <= 0 or ports[0] + offset != ports[3]:
        ports = [ports[0], ports[1]]
        offset = 1000
    job = os.path.join(tmp, "job.yaml")
    write_job(job, ports, offset, etcd.endpoint, "/ps/etcd-job-test-%d" % os.getpid())
    stop_file = os.path.join(tmp, "stop")
    server = os.path.join(bin_dir, "ps_server")

    def start(shard, replica):
        return Proc("server %d replica %d" % (shard, replica),
                    [server, "--config", job, "--shard", str(shard), "--replica", str(replica)],
                    procs)

    replicas = {}
    for replica in (1, 0):
        for shard in (0, 1):
            replicas[(shard, replica)] = start(shard, replica)
    for shard in (0, 1):
        p = replicas[(shard, 0)]
        check(p.wait_for(r"holds the shard's primary key") is not None,
              "replica 0 of shard %d takes the shard's key at etcd and is its primary" % shard,
              p.output())
    workers = [Proc("worker %d" % r,
                    [os.path.join(bin_dir, "replica_pusher"), "--stop-file", stop_file,
                     "--config", job, "--rank", str(r)], procs) for r in (0, 1)]
    check(workers[0].wait_for(r"^clock 200$") is not None, "the workers train",
          workers[0].output())
    failovers = []

    def goes_on(after):
        for w in workers:
            check(w.wait_for(r"^clock \d+$", after=after) is not None,
                  "%s goes on" % w.name, w.output())

    def fail_over(shard, dead, survivor, half_replicated=False):
        """SIGKILLs the primary `dead`; `survivor` must take over, and every
        worker must move to it. `half_replicated`: the survivor is stopped
        (SIGSTOP) first, so that the primary applies pushes and sends them
        on but can acknowledge none, and resumed once the primary is dead:
        each such push is then on the survivor or not, and either way sent
        again by its worker (the sums at the end show it applied once)."""
        if half_replicated:
            survivor_pid = replicas[(shard, survivor)].p.pid
            os.kill(survivor_pid, signal.SIGSTOP)
            time.sleep(0.3)
            counts = [len(re.findall(r"^clock", w.output(), re.M)) for w in workers]
            time.sleep(0.5)
            check(counts == [len(re.findall(r"^clock", w.output(), re.M)) for w in workers],
                  "with its backup stopped, shard %d's primary acknowledges no push: the "
                  "workers wait" % shard)
        killed_at = time.monotonic()
        replicas[(shard, dead)].kill()
        if half_replicated:
            os.kill(survivor_pid, signal.SIGCONT)
        p = replicas[(shard, survivor)]
        took = p.wait_for(r"holds shard %d now \(epoch" % shard, after=killed_at)
        check(took is not None,
              "primary replica %d of shard %d killed: replica %d takes the shard over at etcd "
              "once the dead one's lease lapses" % (dead, shard, survivor), p.output())
        moved = [w.wait_for(r"server %d: replica %d at \S+ serves as the shard's primary" %
                            (shard, survivor), after=killed_at) for w in workers]
        check(all(m is not None for m in moved),
              "every worker finds replica %d of shard %d and sends it what was not "
              "acknowledged" % (survivor, shard), "\n".join(w.output() for w in workers))
        if all(m is not None for m in moved):
            failovers.append(max(moved) - killed_at)
        goes_on(max(m for m in moved if m is not None) if any(moved) else killed_at)

    def rejoin(shard, replica):
        """Starts a killed replica again with its first command: it must join."""
        started_at = time.monotonic()
        p = start(shard, replica)
        replicas[(shard, replica)] = p
        check(p.wait_for(r"joins the shard's primary as a backup") is not None and
              p.wait_for(r"a full replica again", after=started_at) is not None,
              "replica %d of shard %d started again: etcd says the shard has a primary, and it "
              "joins as a backup that takes a copy and holds every acknowledged push" %
              (replica, shard), p.output())

    fail_over(0, dead=0, survivor=1, half_replicated=True)
    rejoin(0, 0)
    fail_over(0, dead=1, survivor=0)
    rejoin(0, 1)
    # A backup: its primary drops it once its lease lapses.
    killed_at = time.monotonic()
    replicas[(1, 1)].kill()
    primary = replicas[(1, 0)]
    check(primary.wait_for(r"replica 1's lease lapsed; the shard goes on without it",
                           after=killed_at) is not None,
          "a killed backup of shard 1 is dropped by its primary when its lease lapses",
          primary.output())
    goes_on(time.monotonic())
    rejoin(1, 1)

    # Every worker stops at the same clock, well ahead of where they are.
    last = 0
    for t, line in workers[0].lines:
        m = re.match(r"^clock (\d+)$", line)
        if m:
            last = int(m.group(1))
    with open(stop_file, "w") as f:
        f.write("%d\n" % (last + 300))
    for w in workers:
        w.p.wait(timeout=120)
        w.reader.join(timeout=5)
        check(w.p.returncode == 0 and "exact: " in w.output(),
              "%s: every row holds the exact sum of every push (none lost, none doubled)" %
              w.name, w.output())
    for (shard, replica), p in sorted(replicas.items()):
        try:
            p.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
        p.reader.join(timeout=5)
        check(p.p.returncode == 0, "%s exits 0 once the workers are done" % p.name, p.output())
    if failovers:
        ms = sorted(round(f * 1000) for f in failovers)
        print("fail-over, kill to every worker at the new primary (etcd, lease_ttl_s %d): %s ms" %
              (LEASE_TTL_S, " ".join(str(m) for m in ms)))


class Terminated(Exception):
    pass


def on_signal(signo, _frame):
    # ctest's timeout sends SIGTERM: clean up (every process, etcd) first.
    raise Terminated("signal %d" % signo)


def main():
    bin_dir = sys.argv[1]
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    try:
        return checks.run_and_clean_up(lambda tmp, procs: body(bin_dir, tmp, procs),
                                       prefix="ps_etcd_job_")
    except unittest.SkipTest as e:
        print("skipped: %s" % e)
        return 77


if __name__ == "__main__":
    sys.exit(main())
