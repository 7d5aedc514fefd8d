#!/usr/bin/env python3
"""ps_server --check and ps_worker --check, run as the real binaries.

    tests/k8s/check_flag_test.py SOURCE_DIR BIN_DIR

--check must parse the flags, load and check the job file, resolve the
shard or rank from the same sources a real start uses (common/rank.h),
print one line saying what would run and exit 0, without resolving a host
name or opening a socket: the jobs here name servers that do not resolve
(".invalid", RFC 2606), and one names a loopback port this test holds.
A StatefulSet pod's host name is made with a UTS namespace (unshare), and
those cases skip where one cannot be made.
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

BIN_DIR = ""
SOURCE_DIR = ""
RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "JOB_COMPLETION_INDEX")

CLUSTER_JOB = """\
cluster:
  servers: ["ps-server-0.ps-server.invalid:7000", "ps-server-1.ps-server.invalid:7000"]
  workers: 3
  bind: all
  allow_remote: true
tables:
  - { name: w, rows: 8, dim: 1 }
train:
  program: linear_regression
  table: w
  features: 8
  iterations: 10
"""


def job_with(text, old, new):
    assert old in text, old
    return text.replace(old, new)


class CheckFlagTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ps_check_test_")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def job(self, text=CLUSTER_JOB, name="job.yaml"):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def run_binary(self, program, args, env=None, prefix=()):
        """Runs BIN_DIR/program with only the given rank variables set."""
        child_env = {k: v for k, v in os.environ.items() if k not in RANK_VARS}
        child_env.update(env or {})
        cmd = list(prefix) + [os.path.join(BIN_DIR, program)] + list(args)
        done = subprocess.run(cmd, env=child_env, capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout, done.stderr

    def assert_check(self, program, args, expected_line, env=None, prefix=()):
        rc, out, err = self.run_binary(program, args + ["--check"], env, prefix)
        self.assertEqual(rc, 0, f"{program} {' '.join(args)} --check exited {rc}:\n{err}")
        self.assertEqual(out, expected_line + "\n", f"stderr:\n{err}")

    def assert_refused(self, program, args, parts, env=None, code=2, prefix=()):
        rc, out, err = self.run_binary(program, args + ["--check"], env, prefix)
        self.assertEqual(rc, code, f"{program} {' '.join(args)} --check: expected exit {code}, "
                         f"got {rc}\nstdout:\n{out}\nstderr:\n{err}")
        self.assertEqual(out, "", "a refused --check prints no plan")
        for part in parts:
            self.assertIn(part, err)

    def uts_prefix(self, hostname):
        """A command prefix that runs the rest under `hostname`, or a skip."""
        unshare = shutil.which("unshare")
        if unshare is None:
            self.skipTest("no unshare: cannot make a host name")
        for prefix in ([unshare, "--uts"], [unshare, "--user", "--map-root-user", "--uts"]):
            probe = subprocess.run(prefix + ["sh", "-c", f"hostname {hostname} && hostname"],
                                   capture_output=True, text=True)
            if probe.returncode == 0 and probe.stdout.strip() == hostname:
                return prefix + ["sh", "-c", f'hostname {hostname} && exec "$0" "$@"']
        self.skipTest(f"cannot make a UTS namespace here: {probe.stderr.strip()}")

    # ps_server

    def test_each_source_gives_the_shard_or_rank_it_should(self):
        # (program, environment, extra flags, what --check must print): a
        # world rank takes the server count off a worker's, an Indexed
        # Job's index is role-local.
        servers = "ps-server-{}.ps-server.invalid:7000"
        serves = ", listens on " + servers + ", binds tcp://*:7000 (cluster.bind: all)"
        trains = ("ps_worker: train.program linear_regression, rank {} of 3 (from {}), 2 servers "
                  + servers.format(0) + " " + servers.format(1))
        index = 'environment variable JOB_COMPLETION_INDEX="{}"'
        cases = [
            ("ps_server", {"JOB_COMPLETION_INDEX": "1"}, [],
             "ps_server: shard 1 of 2 (from " + index.format(1) + ")" + serves.format(1)),
            ("ps_server", {"OMPI_COMM_WORLD_RANK": "0"}, [],
             'ps_server: shard 0 of 2 (from environment variable OMPI_COMM_WORLD_RANK="0")'
             + serves.format(0)),
            ("ps_server", {}, ["--shard", "1", "--bind", "tcp://0.0.0.0:7100"],
             "ps_server: shard 1 of 2 (from --shard), listens on " + servers.format(1)
             + ", binds tcp://0.0.0.0:7100 (--bind)"),
            ("ps_worker", {"JOB_COMPLETION_INDEX": "2"}, [],
             trains.format(2, index.format(2))),
            ("ps_worker", {"PMI_RANK": "3"}, [],
             trains.format(1, 'environment variable PMI_RANK="3" minus offset 2')),
        ]
        for program, env, flags, line in cases:
            with self.subTest(program=program, env=env, flags=flags):
                self.assert_check(program, ["--config", self.job()] + flags, line, env=env)

    def test_server_check_opens_no_socket(self):
        # The port is held here; a real start could not bind it.
        held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            held.bind(("127.0.0.1", 0))
            held.listen(1)
            port = held.getsockname()[1]
            job = self.job(job_with(
                CLUSTER_JOB,
                '["ps-server-0.ps-server.invalid:7000", "ps-server-1.ps-server.invalid:7000"]',
                f'["127.0.0.1:{port}"]').replace("  bind: all\n", ""))
            self.assert_check(
                "ps_server", ["--config", job, "--shard", "0"],
                f"ps_server: shard 0 of 1 (from --shard), listens on 127.0.0.1:{port}, "
                f"binds the address 127.0.0.1 resolves to, port {port}")
            rc, _, err = self.run_binary("ps_server", ["--config", job, "--shard", "0"])
            self.assertEqual(rc, 1, f"a real start on a held port must fail:\n{err}")
        finally:
            held.close()

    def test_server_shard_out_of_range_names_source_and_range(self):
        self.assert_refused("ps_server", ["--config", self.job()],
                            ['shard 2 (from environment variable JOB_COMPLETION_INDEX="2") is '
                             "out of range", "valid: 0..1", "cluster.servers lists 2"],
                            env={"JOB_COMPLETION_INDEX": "2"})

    def test_server_malformed_index_is_refused(self):
        self.assert_refused("ps_server", ["--config", self.job()],
                            ['JOB_COMPLETION_INDEX="one" is not a non-negative integer'],
                            env={"JOB_COMPLETION_INDEX": "one"})

    def test_server_without_any_source_says_how_to_give_one(self):
        self.assert_refused("ps_server", ["--config", self.job()],
                            ["no shard given", "--shard-from-hostname", "JOB_COMPLETION_INDEX"])

    def test_server_bad_config_exits_2_naming_the_file(self):
        bad = self.job(job_with(CLUSTER_JOB, "  allow_remote: true\n", ""), "bad.yaml")
        self.assert_refused("ps_server", ["--config", bad, "--shard", "0"],
                            ["bad.yaml", "cluster"])

    def test_server_left_workers_outside_the_job_are_refused(self):
        self.assert_refused("ps_server", ["--config", self.job(), "--shard", "0",
                                          "--left-workers", "1,3"],
                            ["--left-workers: worker 3 is not in this job"])

    def test_bad_flag_exits_2(self):
        for program in ("ps_server", "ps_worker"):
            self.assert_refused(program, ["--config", self.job(), "--no-such-flag"],
                                ["--no-such-flag"])
            self.assert_refused(program, ["--config", self.job(), "--check=maybe"], [])

    def test_server_flag_and_hostname_together_are_refused(self):
        self.assert_refused("ps_server", ["--config", self.job(), "--shard", "0",
                                          "--shard-from-hostname"],
                            ["pass either --shard or --shard-from-hostname, not both"])

    def test_server_takes_statefulset_pod_ordinal_only_when_asked(self):
        prefix = self.uts_prefix("ps-server-1")
        self.assert_check(
            "ps_server", ["--config", self.job(), "--shard-from-hostname"],
            'ps_server: shard 1 of 2 (from host name "ps-server-1"), listens on '
            "ps-server-1.ps-server.invalid:7000, binds tcp://*:7000 (cluster.bind: all)",
            prefix=prefix)
        # Not asked for: an ordinary host's digits are not a shard.
        self.assert_refused("ps_server", ["--config", self.job()], ["no shard given"],
                            prefix=self.uts_prefix("node-1"))

    def test_server_hostname_without_ordinal_is_refused(self):
        self.assert_refused("ps_server", ["--config", self.job(), "--shard-from-hostname"],
                            ['host name "ps-server"', 'does not end in "-<ordinal>"'],
                            prefix=self.uts_prefix("ps-server"))

    # ps_worker

    def test_worker_world_rank_of_a_server_is_refused(self):
        self.assert_refused("ps_worker", ["--config", self.job()],
                            ['SLURM_PROCID="1" is below the offset 2'],
                            env={"SLURM_PROCID": "1"})

    def test_worker_rank_out_of_range_is_refused(self):
        self.assert_refused("ps_worker", ["--config", self.job(), "--rank", "3"],
                            ["rank 3 (from --rank) is out of range", "valid: 0..2"])

    def test_worker_checks_the_train_section(self):
        bad = self.job(job_with(CLUSTER_JOB, "iterations: 10", "iterations: 10\n  bogus: 1"),
                       "bad_train.yaml")
        self.assert_refused("ps_worker", ["--config", bad, "--rank", "0"],
                            ["bad_train.yaml", "bogus"])

    def test_worker_without_train_section_is_refused(self):
        no_train = self.job(CLUSTER_JOB[:CLUSTER_JOB.index("train:")], "no_train.yaml")
        self.assert_refused("ps_worker", ["--config", no_train, "--rank", "0"],
                            ["no train section"])

    def test_worker_standalone(self):
        demo = os.path.join(SOURCE_DIR, "config", "fashion_mnist_mlp.yaml")
        self.assert_check("ps_worker", ["--config", demo, "--standalone"],
                          "ps_worker: train.program mlp, standalone: one process with all the "
                          "data, no servers")
        # linear_regression drives the servers itself: --standalone refuses it.
        self.assert_refused("ps_worker", ["--config", self.job(), "--standalone"],
                            ["needs the servers"], code=1)

    def test_worker_takes_pod_ordinal_when_asked(self):
        self.assert_check(
            "ps_worker", ["--config", self.job(), "--rank-from-hostname"],
            'ps_worker: train.program linear_regression, rank 2 of 3 (from host name '
            '"ps-worker-2"), 2 servers ps-server-0.ps-server.invalid:7000 '
            "ps-server-1.ps-server.invalid:7000",
            prefix=self.uts_prefix("ps-worker-2"))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    SOURCE_DIR = sys.argv.pop(1)
    BIN_DIR = sys.argv.pop(1)
    unittest.main(verbosity=2)
