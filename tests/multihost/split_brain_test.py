#!/usr/bin/env python3
"""Split brain: a shard's primary cut off from its backup and from etcd, but
not from the workers, never accepts writes at the same time as the backup
that takes its place.

    tests/multihost/split_brain_test.py --bin build/bin

Hosts made of network namespaces (netns_cluster.Cluster): etcd0 runs a real
etcd (Debian's etcd-server, its data in the test's folder), server0 and
server1 run the replicas of two shards under replication.authority etcd
(factor 2: shard 0's primary on server0 and its backup on server1, shard
1's the other way round), worker0 and worker1 run replica_pusher, which
pushes integers under bsp. Then iptables on server0 drops every packet to
and from server1 and etcd0, nothing else, for PARTITION_S:

  - shard 0's primary on server0 cannot renew its lease: it stops
    accepting writes (fenced) three quarters of a TTL after its last
    renewal, and says so to the workers that still reach it;
  - etcd lets its lease lapse, and shard 0's backup on server1 takes the
    shard over; the workers find it there;
  - throughout, the test asks both replicas of shard 0 every SAMPLE_S
    whether they accept writes (ps_ctl status, the "primary ... accepting"
    line, from worker0's host, which reaches both): no sample may show
    both accepting, and the old primary's refusals must begin before the
    backup took over (their log times);
  - after the partition heals, etcd tells the old primary its lease is
    gone and it stops; started again with the same command (as a cluster
    launcher would), each server of server0 rejoins as a backup;
  - at the end every row holds the exact sum of every push: nothing
    acknowledged was lost, nothing applied twice.

Exit code 77 (ctest: skipped) where namespaces cannot be made or etcd is
not installed; the reason is printed.
"""

import argparse
import datetime
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import netns_cluster  # noqa: E402

EXIT_SKIPPED = 77
ETCD = "/usr/bin/etcd"
PORT = 7000
PORT_OFFSET = 100
LEASE_TTL_S = 1
PARTITION_S = 4.0
SAMPLE_S = 0.05
WAIT_S = 60
HOSTS = ["etcd0", "server0", "server1", "worker0", "worker1"]
TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) ")


def log_time(process, pattern):
    """The time stamp (seconds since the epoch) of the first line of
    `process` matching `pattern`, or None."""
    rx = re.compile(pattern)
    for line in process.output().splitlines():
        if rx.search(line):
            m = TIME.match(line)
            if m:
                return datetime.datetime.strptime(m.group(1),
                                                  "%Y-%m-%d %H:%M:%S.%f").timestamp()
    return None


class SplitBrainTest:
    def __init__(self, bin_dir, folder):
        self.bin = bin_dir
        self.dir = folder
        self.failures = []
        self.samples = []  # (time.time(), accepting of replica 0, of replica 1) of shard 0

    def check(self, ok, what, detail=""):
        print(("ok: " if ok else "FAIL: ") + what + ("" if ok or not detail else "\n" + detail))
        if not ok:
            self.failures.append(what)
        return ok

    def write_job(self, c):
        path = os.path.join(self.dir, "job.yaml")
        with open(path, "w") as f:
            f.write("cluster: { servers: [\"server0:%d\", \"server1:%d\"], workers: 2, "
                    "allow_remote: true }\n" % (PORT, PORT))
            f.write("tables:\n  - { name: w, rows: 20000, dim: 1, optimizer: { type: add } }\n")
            f.write("consistency: { mode: bsp }\n")
            f.write("client: { request_timeout_ms: 20000 }\n")
            f.write("liveness: { server_down_timeout_ms: 20000, timeout_ms: 15000 }\n")
            f.write("replication:\n  factor: 2\n  port_offset: %d\n  authority: etcd\n"
                    % PORT_OFFSET)
            f.write("  etcd: { endpoints: [\"etcd0:2379\"], lease_ttl_s: %d, "
                    "request_timeout_ms: 300 }\n" % LEASE_TTL_S)
        return path

    def server(self, c, host, shard, replica):
        return c.spawn(host, [os.path.join(self.bin, "ps_server"), "--config", self.job,
                              "--shard", str(shard), "--replica", str(replica)],
                       log=os.path.join(self.dir, "%s-shard%d-replica%d-%d.log" %
                                        (host, shard, replica, len(c.processes))))

    def accepting(self, c, replica):
        """Whether replica `replica` of shard 0 accepts writes now (its
        STATS, asked from worker0's host); None when it did not answer."""
        argv = c.command("worker0", [os.path.join(self.bin, "ps_ctl"), "status", "--raw",
                                     "--config", self.job, "--shard", "0", "--replica", str(replica),
                                     "--timeout-ms", "300"])
        try:
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=5)
        except subprocess.TimeoutExpired:
            return None
        m = re.search(r"^primary epoch \d+ accepting ([01])", r.stdout, re.M)
        if m:
            return m.group(1) == "1"
        return False if "replica applied" in r.stdout else None  # a backup

    def sample(self, c, stop):
        while not stop.is_set():
            # The backup first: if it accepts, the old primary asked after
            # it must not, so a sample with both is a real overlap and not
            # the time between the two questions.
            a1 = self.accepting(c, 1)
            a0 = self.accepting(c, 0)
            self.samples.append((time.time(), a0, a1))
            stop.wait(SAMPLE_S)

    def run(self):
        with netns_cluster.Cluster(HOSTS, log_dir=self.dir) as c:
            self.job = self.write_job(c)
            address = c.address("etcd0")
            etcd = c.spawn("etcd0", [
                ETCD, "--name", "e0", "--data-dir", os.path.join(self.dir, "etcd-data"),
                "--listen-client-urls", "http://%s:2379" % address,
                "--advertise-client-urls", "http://%s:2379" % address,
                "--listen-peer-urls", "http://127.0.0.1:2380",
                "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
                "--initial-cluster", "e0=http://127.0.0.1:2380",
                "--heartbeat-interval", "10", "--election-timeout", "100"],
                log=os.path.join(self.dir, "etcd.log"))
            c.wait_for_output(etcd, r"ready to serve client requests", 30)
            servers = {}
            for host, shard, replica in [("server1", 0, 1), ("server0", 1, 1),
                                         ("server0", 0, 0), ("server1", 1, 0)]:
                servers[(shard, replica)] = (host, self.server(c, host, shard, replica))
            for shard in (0, 1):
                c.wait_for_output(servers[(shard, 0)][1], r"holds the shard's primary key",
                                  WAIT_S)
            stop_file = os.path.join(self.dir, "stop")
            workers = [c.spawn("worker%d" % r, [
                os.path.join(self.bin, "replica_pusher"), "--stop-file", stop_file,
                "--config", self.job, "--rank", str(r)],
                log=os.path.join(self.dir, "worker%d.log" % r)) for r in (0, 1)]
            for w in workers:
                c.wait_for_output(w, r"^clock 200$", WAIT_S)

            stop = threading.Event()
            sampler = threading.Thread(target=self.sample, args=(c, stop), daemon=True)
            sampler.start()
            time.sleep(0.5)
            cut = time.time()
            c.partition("server0", peers=["server1", "etcd0"])
            old, new = servers[(0, 0)][1], servers[(0, 1)][1]
            try:
                c.wait_for_output(new, r"holds shard 0 now \(epoch", WAIT_S)
                took = True
            except RuntimeError as e:
                took = self.check(False, "shard 0's backup takes the shard over", str(e))
            clocks_before = len(re.findall(r"^clock", workers[0].output(), re.M))
            deadline = time.time() + WAIT_S
            while (time.time() < deadline and
                   len(re.findall(r"^clock", workers[0].output(), re.M)) < clocks_before + 3):
                time.sleep(0.1)
            self.check(len(re.findall(r"^clock", workers[0].output(), re.M)) >= clocks_before + 3,
                       "the workers go on during the partition, at the new primary",
                       workers[0].output()[-2000:])
            time.sleep(max(0.0, cut + PARTITION_S - time.time()))
            stop.set()
            sampler.join(timeout=10)
            c.heal("server0")

            # Side by side: never two replicas of shard 0 accepting writes.
            both = [s for s in self.samples if s[1] and s[2]]
            self.check(not both, "no sample shows both replicas of shard 0 accepting writes "
                       "(%d samples, %d during the partition)" %
                       (len(self.samples), len([s for s in self.samples if s[0] >= cut])),
                       "\n".join(str(s) for s in both[:20]))
            old_stopped = [s[0] for s in self.samples if s[0] >= cut and s[1] is False]
            new_started = [s[0] for s in self.samples if s[2]]
            self.check(bool(old_stopped) and bool(new_started) and
                       min(old_stopped) <= min(new_started),
                       "the samples see the old primary stop accepting before the new one "
                       "starts")
            refused = log_time(old, r"fenced: its etcd lease may have lapsed")
            promoted = log_time(new, r"holds shard 0 now \(epoch")
            self.check(took and refused is not None and promoted is not None and
                       refused < promoted,
                       "the old primary refused writes (fenced, saying so) before the backup "
                       "took over: %s" % (
                           "%.0f ms before" % ((promoted - refused) * 1000)
                           if refused and promoted else "not both logged"),
                       old.output()[-3000:] + new.output()[-3000:])
            self.check(cut < (promoted or 0) < cut + PARTITION_S,
                       "the backup took over %.2f s after the cut (lease_ttl_s %d)" %
                       ((promoted or 0) - cut, LEASE_TTL_S))

            # Healed: the old primary learns its lease is gone and stops;
            # started again, both servers of server0 rejoin as backups.
            for shard, replica in ((0, 0), (1, 1)):
                host, p = servers[(shard, replica)]
                code = p.wait(WAIT_S)
                self.check(code == 4 and "lease lapsed" in p.output(),
                           "replica %d of shard %d on %s stops once it learns its lease "
                           "lapsed (exit %s)" % (replica, shard, host, code), p.output()[-2000:])
                again = self.server(c, host, shard, replica)
                servers[(shard, replica)] = (host, again)
                try:
                    c.wait_for_output(again, r"a full replica again", WAIT_S)
                    self.check(True, "replica %d of shard %d started again rejoins as a "
                               "backup" % (replica, shard))
                except RuntimeError as e:
                    self.check(False, "replica %d of shard %d started again rejoins" %
                               (replica, shard), str(e))

            last = max(int(x) for x in re.findall(r"^clock (\d+)$", workers[0].output(), re.M))
            with open(stop_file, "w") as f:
                f.write("%d\n" % (last + 300))
            for r, w in enumerate(workers):
                code = w.wait(120)
                self.check(code == 0 and "exact: " in w.output(),
                           "worker %d: every row holds the exact sum of every push (none "
                           "lost, none doubled)" % r, w.output()[-3000:])
            for (shard, replica), (host, p) in sorted(servers.items()):
                code = p.wait(30)
                self.check(code == 0, "replica %d of shard %d exits 0 with the workers" %
                           (replica, shard), p.output()[-2000:])
        return 1 if self.failures else 0


def print_log_tails(folder, lines=40):
    """On a failure: the last lines of every process's log (servers, etcd,
    workers), which are removed with the folder unless --keep."""
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(folder, name), errors="replace") as f:
            tail = f.read().splitlines()[-lines:]
        print("---- %s (last %d lines)\n%s" % (name, len(tail), "\n".join(tail)), file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.path.join(HERE, "..", "..", "build", "bin"))
    p.add_argument("--keep", action="store_true", help="keep the logs folder")
    args = p.parse_args()
    problem = netns_cluster.check_prerequisites()
    if problem is None and not os.access(ETCD, os.X_OK):
        problem = "etcd-server is not installed; ./ps setup installs it"
    if problem is not None:
        print("split_brain_test: skipped: " + problem, file=sys.stderr)
        return EXIT_SKIPPED
    netns_cluster.handle_signals()
    folder = tempfile.mkdtemp(prefix="ps_split_brain_")
    code = 1
    try:
        code = SplitBrainTest(os.path.abspath(args.bin), folder).run()
    finally:
        if code != 0:
            print_log_tails(folder)
        if args.keep:
            print("logs in " + folder)
        else:
            shutil.rmtree(folder, ignore_errors=True)
    print("PASS" if code == 0 else "FAILED")
    return code


if __name__ == "__main__":
    sys.exit(main())
