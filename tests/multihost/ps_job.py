"""A parameter-server job across the hosts of a netns_cluster.Cluster.

Job files: job_from(base, ...) turns an example job (config/*.yaml, read
with load_yaml) into one for hosts "server0".."server<S-1>" named in
cluster.servers (every server on the same port: they are different hosts)
and W workers; write_yaml() writes it.

Running: DistributedJob starts ps_server --config J --shard i in host
server<i> and ps_worker --config J --rank r in host worker<r>, nothing
beyond those flags, as a launcher of a real cluster would; it waits for
each server to serve, then starts the workers, waits for them with a
deadline, and then for the servers, which exit once every worker has left
(server.exit_when_workers_leave); the cluster's teardown kills whatever
still runs. run_one_host() runs the same job with ps_launch on one host's
loopback, as the reference.
"""

import copy
import os
import re
import sys

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "benchmarks"))
from psbench.workloads import read_metrics, tail_mean  # noqa: E402,F401  (re-exported)

SERVER_PORT = 7000
SERVING = r"shard \d+ serving "
# How long a server may take from its start to serving.
SERVE_TIMEOUT_S = 30
# How long servers may take to exit once the last worker has left.
STOP_TIMEOUT_S = 15


def server_host(i):
    return "server%d" % i


def worker_host(r):
    return "worker%d" % r


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def write_yaml(job, path):
    with open(path, "w") as f:
        yaml.safe_dump(job, f, sort_keys=False, default_flow_style=None, width=100)
    return path


def job_from(base, servers, workers, sections=None, train=None, bind=None):
    """A copy of job `base` (a dict) whose cluster is `servers` entries
    ("host:port") and `workers` workers, off loopback; `sections` replaces
    whole top-level sections (liveness, client, checkpoint, ...) and
    `train` sets keys of the train section. Every worker's BLAS gets one
    thread: several workers share the machine's cores."""
    job = copy.deepcopy(base)
    job["cluster"] = {"servers": list(servers), "workers": workers, "allow_remote": True}
    if bind:
        job["cluster"]["bind"] = bind
    job.setdefault("worker", {})["cpu_threads"] = 1
    for key, value in (sections or {}).items():
        job[key] = value
    job["train"].update(train or {})
    return job


def host_servers(shards):
    """cluster.servers naming hosts server0.. on SERVER_PORT."""
    return ["%s:%d" % (server_host(i), SERVER_PORT) for i in range(shards)]


def loopback_servers(shards):
    return ["127.0.0.1:%d" % (SERVER_PORT + i) for i in range(shards)]


class JobFailed(AssertionError):
    """A job did not do what was expected; the message has its logs' tails."""


class DistributedJob:
    """One job's servers and workers, each in its own host of `cluster`."""

    def __init__(self, cluster, bin_dir, config, shards, workers):
        self.cluster = cluster
        self.bin = bin_dir
        self.config = config
        self.shards = shards
        self.num_workers = workers
        self.servers = {}   # shard -> its current Process
        self.workers = {}   # rank -> its current Process
        self.restarts = {}  # shard or rank -> how many times started again
        self.processes = []  # every server and worker started, restarts too

    def _log(self, kind, index):
        n = self.restarts.get((kind, index), 0)
        return os.path.join(self.cluster.log_dir, "%s%d%s.log" % (kind, index,
                                                                 "-%d" % n if n else ""))

    def start_server(self, shard, wait=True):
        p = self.cluster.spawn(server_host(shard),
                               [os.path.join(self.bin, "ps_server"), "--config", self.config,
                                "--shard", str(shard)], log=self._log("server", shard))
        self.servers[shard] = p
        self.processes.append(p)
        if wait:
            self.cluster.wait_for_output(p, SERVING, SERVE_TIMEOUT_S)
        return p

    def restart_server(self, shard):
        """Starts shard's server again in its host (after the host was lost)."""
        self.restarts[("server", shard)] = self.restarts.get(("server", shard), 0) + 1
        return self.start_server(shard)

    def start_worker(self, rank):
        p = self.cluster.spawn(worker_host(rank),
                               [os.path.join(self.bin, "ps_worker"), "--config", self.config,
                                "--rank", str(rank)], log=self._log("worker", rank))
        self.workers[rank] = p
        self.processes.append(p)
        return p

    def restart_worker(self, rank):
        self.restarts[("worker", rank)] = self.restarts.get(("worker", rank), 0) + 1
        return self.start_worker(rank)

    def start(self):
        """Every server (each serving), then every worker."""
        for i in range(self.shards):
            self.start_server(i)
        for r in range(self.num_workers):
            self.start_worker(r)

    def wait_workers(self, timeout):
        """{rank: exit code, None for one still running after `timeout` s}."""
        codes = self.cluster.wait_all(list(self.workers.values()), timeout)
        return {r: codes[p] for r, p in self.workers.items()}

    def wait_servers(self, timeout=STOP_TIMEOUT_S):
        """Waits for every server to exit on its own, as it does once every
        worker has left (server.exit_when_workers_leave); returns {shard:
        exit code, None for one still running after `timeout` s}."""
        codes = self.cluster.wait_all(list(self.servers.values()), timeout)
        return {s: codes[p] for s, p in self.servers.items()}

    def run(self, timeout):
        """Starts the job, waits for every worker (`timeout` s) and then
        for the servers; JobFailed unless every process exited 0."""
        self.start()
        codes = self.wait_workers(timeout)
        self.check(codes, self.wait_servers())

    def check(self, codes, server_codes):
        bad = ["worker %d %s" % (r, "still running" if c is None else "exited %d" % c)
               for r, c in sorted(codes.items()) if c != 0]
        bad += ["server %d %s" % (s, "still running" if c is None else "exited %d" % c)
                for s, c in sorted(server_codes.items()) if c != 0]
        if bad:
            raise JobFailed("%s\n%s" % (", ".join(bad), self.logs()))

    def logs(self, tail=3000):
        """The end of every log of the job's processes."""
        parts = []
        for p in self.processes:
            parts.append("--- %s: %s\n%s" % (p.describe(), os.path.basename(p.log),
                                             p.output()[-tail:]))
        return "\n".join(parts)

    def output(self, kind):
        """Every log of the job's "server" or "worker" processes (restarts
        included), concatenated."""
        return "\n".join(p.output() for p in self.processes
                         if os.path.basename(p.argv[0]) == "ps_" + kind)


def run_one_host(cluster, host, bin_dir, config, timeout):
    """Runs `config` with ps_launch in `host` (its servers on that host's
    loopback); JobFailed unless it exits 0 within `timeout` s."""
    code, out = cluster.run(host, [os.path.join(bin_dir, "ps_launch"), "--config", config],
                            timeout)
    if code != 0:
        raise JobFailed("ps_launch --config %s exited %d:\n%s" % (config, code, out[-6000:]))
    return out


def progress_clock(text):
    """The highest clock of the workers' progress lines in `text` (0: none)."""
    clocks = [int(c) for c in re.findall(r"worker \d+: clock\s+(\d+) ", text)]
    return max(clocks, default=0)
