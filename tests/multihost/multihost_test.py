#!/usr/bin/env python3
"""End-to-end tests of jobs spread over hosts made of network namespaces.

    tests/multihost/multihost_test.py --bin build/bin [MultihostTest.test_name ...]

Every test builds its own cluster (netns_cluster.Cluster: one namespace per
host on a bridge, host names in each host's /etc/hosts), runs the real
ps_server (one per server host, named by host name in cluster.servers) and
ps_worker (one per worker host) with no flags beyond --config, --shard and
--rank, and tears everything down, processes first, whatever happens.

The job is the Fashion-MNIST MLP of config/fashion_mnist_mlp.yaml (784-100-10,
sgd with momentum, ssp 2) on 2 servers and 4 workers, shortened to 8,000
minibatches in all (8.5 epochs) with a cosine decay of the learning rate, so
that its last evaluations do not swing with the timing of the workers; the
comparison with one host runs it in lockstep (bsp with aggregation), where
the result does not depend on timing at all. The score of a run is worker
0's mean of its last three test accuracies (from the metrics CSV).

Exit code 77 (ctest: skipped) when this machine cannot make namespaces
(not root, no iproute2) or has no Fashion-MNIST; the reason is printed.
"""

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import netns_cluster  # noqa: E402
import ps_job  # noqa: E402
from ps_job import server_host, worker_host  # noqa: E402

EXIT_SKIPPED = 77
BIN = os.path.join(ROOT, "build", "bin")
KEEP = False  # --keep: leave each test's folder (job files, logs, CSVs)
DATA = "/usr/share/datasets/fashion-mnist"
SHARDS = 2
WORKERS = 4
STEPS_PER_WORKER = 2000
# Worker 0 evaluates this many times; the score is the mean of the last 3.
EVALS = 8
# A run must reach this test accuracy. Under ssp 2 the job scored
# 0.852-0.864 over about 30 runs here, on one host and across hosts, with
# partitions and lost hosts (its updates arrive in an order that depends on
# the timing); training that breaks (lost updates, a shard serving its
# initial values) falls below.
MIN_ACCURACY = 0.84
# The comparison with one host runs the job in lockstep: bsp with
# consistency.aggregate, so each clock applies the mean of the 4 workers'
# gradients once (a global batch of 256, hence the larger learning rate)
# and the run does not depend on timing. Two one-host runs and a 6-host run
# ended within 0.0007 of each other (0.8688-0.8694): only the order in
# which a shard adds the workers' pushes differs, which moves the floats'
# rounding. A run across hosts must come this close to the one-host run,
# and reach LOCKSTEP_MIN_ACCURACY.
LOCKSTEP_LR = 0.05
MAX_DIFFERENCE = 0.004
LOCKSTEP_MIN_ACCURACY = 0.86
# Liveness and client timeouts of the partition and host-loss tests: a
# partition of SHORT_PARTITION_S must pass unnoticed. TCP resends a lost
# segment after 0.2, 0.6, 1.4, 3.0 s, so a connection cut for 1.5 s carries
# data again about 3 s after the cut began; the timeouts leave twice that.
# request_timeout_ms stays above timeout_ms + 500, so a pull outlives the
# wait for a worker that is declared dead.
SHORT_PARTITION_S = 1.5
REQUEST_TIMEOUT_MS = 8000
PARTITION_TIMEOUTS = {
    "liveness": {"heartbeat_ms": 200, "timeout_ms": 6000},
    "client": {"request_timeout_ms": REQUEST_TIMEOUT_MS},
}
# How long past its deadline a process may take to exit.
EXIT_SLACK_S = 20
# Deadline of a whole job (it takes 10-30 s on 2 busy cores).
JOB_TIMEOUT_S = 90


def mlp_job(servers, metrics_csv, sections=None, bind=None, lockstep=False):
    """The test job for `servers`; lockstep: under bsp with aggregation
    (see LOCKSTEP) instead of the example's ssp 2."""
    base = ps_job.load_yaml(os.path.join(ROOT, "config", "fashion_mnist_mlp.yaml"))
    optimizer = base["tables"][0]["optimizer"]
    optimizer.update({"decay": "cosine", "decay_clocks": STEPS_PER_WORKER})
    if lockstep:
        base["consistency"] = {"mode": "bsp", "aggregate": True}
        optimizer["lr"] = LOCKSTEP_LR
    return ps_job.job_from(
        base, servers, WORKERS, sections=sections, bind=bind,
        train={"iterations": STEPS_PER_WORKER, "eval_every": STEPS_PER_WORKER // EVALS,
               "log_every": 100, "metrics_csv": metrics_csv})


def hosts():
    return [server_host(i) for i in range(SHARDS)] + [worker_host(r) for r in range(WORKERS)]


class MultihostTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ps_multihost_%s_" % self._testMethodName)
        self.cluster = None

    def tearDown(self):
        if self.cluster is not None:
            self.cluster.close()
        if KEEP:
            print("logs of %s in %s" % (self._testMethodName, self.dir), file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def make_cluster(self, extra_hosts=()):
        self.cluster = netns_cluster.Cluster(hosts() + list(extra_hosts), log_dir=self.dir)
        self.cluster.start()
        return self.cluster

    def write_job(self, name, job):
        return ps_job.write_yaml(job, os.path.join(self.dir, name + ".yaml"))

    def csv(self, name):
        return os.path.join(self.dir, name + ".csv")

    def score(self, name):
        evaluations, _ = ps_job.read_metrics(self.csv(name))
        self.assertGreaterEqual(len(evaluations), 3, "too few evaluations in " + self.csv(name))
        score = ps_job.tail_mean(evaluations)
        print("%s: test accuracy %.4f (mean of the last 3)" % (name, score), file=sys.stderr)
        return score

    def start_job(self, name, sections=None, bind=None, lockstep=False):
        config = self.write_job(name, mlp_job(ps_job.host_servers(SHARDS), self.csv(name),
                                              sections, bind, lockstep))
        job = ps_job.DistributedJob(self.cluster, BIN, config, SHARDS, WORKERS)
        job.start()
        return job

    def wait_for_clock(self, job, clock, timeout=JOB_TIMEOUT_S):
        """Waits until some worker logged `clock`."""
        deadline = time.monotonic() + timeout
        while ps_job.progress_clock(job.output("worker")) < clock:
            if time.monotonic() > deadline:
                self.fail("no worker reached clock %d within %d s\n%s" %
                          (clock, timeout, job.logs()))
            if all(p.poll() is not None for p in job.workers.values()):
                self.fail("the workers ended before clock %d\n%s" % (clock, job.logs()))
            time.sleep(0.05)

    def finish(self, job, timeout=JOB_TIMEOUT_S):
        """Waits for the workers, then for the servers, which exit once every
        worker has left; fails unless all exit 0."""
        codes = job.wait_workers(timeout)
        job.check(codes, job.wait_servers())

    # -- a: the job across hosts -------------------------------------------

    def test_mlp_on_six_hosts_reaches_the_one_host_accuracy(self):
        c = self.make_cluster(extra_hosts=["onehost"])
        # The reference: the same job with ps_launch on one host's loopback.
        config = self.write_job("onehost", mlp_job(ps_job.loopback_servers(SHARDS),
                                                   self.csv("onehost"), lockstep=True))
        ps_job.run_one_host(c, "onehost", BIN, config, JOB_TIMEOUT_S)
        one_host = self.score("onehost")

        job = self.start_job("hosts", lockstep=True)
        self.finish(job)
        multi = self.score("hosts")
        # Every worker reached the servers by name, from its own host.
        for r in range(WORKERS):
            self.assertIn("worker %d: done: " % r, job.workers[r].output())
        for s in range(SHARDS):
            self.assertRegex(job.servers[s].output(),
                             r"shard %d serving .* on tcp://%s:%d" %
                             (s, c.address(server_host(s)).replace(".", r"\."),
                              ps_job.SERVER_PORT))
        self.assertGreaterEqual(multi, LOCKSTEP_MIN_ACCURACY)
        self.assertAlmostEqual(multi, one_host, delta=MAX_DIFFERENCE)

    # -- b: partitions ------------------------------------------------------

    def partition_for(self, job, host, seconds):
        """Partitions `host` for `seconds`, then heals it; fails if the job
        had ended before the partition did (it would prove nothing)."""
        self.cluster.partition(host)
        time.sleep(seconds)
        self.cluster.heal(host)
        running = [r for r, p in job.workers.items() if p.poll() is None]
        self.assertEqual(len(running), WORKERS,
                         "workers ended during the partition of %s\n%s" % (host, job.logs()))

    def test_partitions_shorter_than_the_timeouts_are_survived(self):
        self.make_cluster()
        # Every server binds every interface (cluster.bind: all).
        job = self.start_job("partitions", PARTITION_TIMEOUTS, bind="all")
        self.wait_for_clock(job, 300)
        self.partition_for(job, server_host(1), SHORT_PARTITION_S)
        self.wait_for_clock(job, ps_job.progress_clock(job.output("worker")) + 200)
        self.partition_for(job, worker_host(2), SHORT_PARTITION_S)
        self.finish(job)
        servers = job.output("server")
        self.assertNotIn("is dead", servers)
        self.assertRegex(servers,
                         r"shard 1 serving .* on tcp://0\.0\.0\.0:%d" % ps_job.SERVER_PORT)
        self.assertGreaterEqual(self.score("partitions"), MIN_ACCURACY)

    def test_partition_longer_than_the_timeouts_fails_naming_the_host(self):
        self.make_cluster()
        job = self.start_job("partitioned", PARTITION_TIMEOUTS)
        self.wait_for_clock(job, 300)
        self.cluster.partition(server_host(1))
        # Every worker gives up once its request to the unreachable server
        # is past client.request_timeout_ms.
        codes = job.wait_workers(REQUEST_TIMEOUT_MS / 1000 + EXIT_SLACK_S)
        workers = job.output("worker")
        still = [r for r, c in codes.items() if c is None]
        self.assertEqual(still, [], "workers still running long after the request timeout\n" +
                         job.logs())
        self.assertTrue(all(c != 0 for c in codes.values()), "a worker exited 0\n" + job.logs())
        for r in range(WORKERS):
            self.assertRegex(job.workers[r].output(),
                             r"training failed: .*server 1 at tcp://server1:%d got no reply "
                             r"within %d ms" % (ps_job.SERVER_PORT, REQUEST_TIMEOUT_MS),
                             "worker %d does not name the unreachable host\n%s" % (r, workers))
        # The servers see every worker fall silent, declare it dead and,
        # with no worker left, exit 1 (the job failed), server1 although it
        # is still cut off.
        server_codes = job.wait_servers(PARTITION_TIMEOUTS["liveness"]["timeout_ms"] / 1000 +
                                        EXIT_SLACK_S)
        self.assertEqual(server_codes, {0: 1, 1: 1}, job.logs())
        for s in range(SHARDS):
            self.assertRegex(job.servers[s].output(),
                             r"shard %d: every worker has left the job \(dead: 0, 1, 2, 3\)" % s)

    # -- c: hosts lost ---------------------------------------------------------

    def test_server_host_lost_restarts_from_its_checkpoint(self):
        self.make_cluster()
        checkpoints = os.path.join(self.dir, "checkpoints")
        sections = dict(PARTITION_TIMEOUTS)
        sections["liveness"] = dict(sections["liveness"], server_down_timeout_ms=30000)
        sections["checkpoint"] = {"dir": checkpoints, "every_clocks": 100, "keep": 2}
        job = self.start_job("lost_server", sections)
        self.wait_for_clock(job, 600)
        killed = self.cluster.kill_host(server_host(1))
        self.assertEqual(killed, [job.servers[1].pid])
        self.assertEqual(job.servers[1].wait(10), -9)
        # An orchestrator starts the server again on that host.
        restarted = job.restart_server(1)
        m = re.search(r"shard 1: restored .* workers resume at clock (\d+)", restarted.output())
        self.assertIsNotNone(m, restarted.output())
        self.assertGreater(int(m.group(1)), 0)
        self.finish(job)
        self.assertRegex(job.output("worker"), r"server 1 at \S+ is back after \d+ ms")
        self.assertGreaterEqual(self.score("lost_server"), MIN_ACCURACY)

    def test_worker_host_lost_is_dropped_and_its_restart_rejoins(self):
        self.make_cluster()
        sections = dict(PARTITION_TIMEOUTS)
        sections["liveness"] = {"heartbeat_ms": 200, "timeout_ms": 2000,
                                "on_dead_worker": "drop"}
        job = self.start_job("lost_worker", sections)
        self.wait_for_clock(job, 300)
        self.cluster.kill_host(worker_host(3))
        for s in range(SHARDS):
            self.cluster.wait_for_output(job.servers[s], r"worker 3 is dead: .*the job goes on "
                                         r"without it", 20)
        clock = ps_job.progress_clock(job.output("worker"))
        # The others go on without it...
        self.wait_for_clock(job, clock + 200)
        # ...and when an orchestrator starts it again it rejoins.
        job.restart_worker(3)
        self.finish(job)
        self.assertIn("worker 3: done: ", job.workers[3].output())
        self.assertGreaterEqual(self.score("lost_worker"), MIN_ACCURACY)


def main():
    global BIN, KEEP
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=BIN, help="folder of ps_server, ps_worker and ps_launch")
    p.add_argument("--keep", action="store_true",
                   help="keep each test's folder of job files, logs and metrics")
    args, rest = p.parse_known_args()
    BIN = os.path.abspath(args.bin)
    KEEP = args.keep
    problem = netns_cluster.check_prerequisites()
    if problem is None and not os.path.isdir(DATA):
        problem = "no Fashion-MNIST in %s (Debian package dataset-fashion-mnist)" % DATA
    if problem is not None:
        print("multihost_test: skipped: " + problem, file=sys.stderr)
        return EXIT_SKIPPED
    for b in ("ps_server", "ps_worker", "ps_launch"):
        if not os.access(os.path.join(BIN, b), os.X_OK):
            print("multihost_test: %s not found in %s; build first or pass --bin" % (b, BIN),
                  file=sys.stderr)
            return 2
    netns_cluster.handle_signals()
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
