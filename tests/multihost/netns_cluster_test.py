#!/usr/bin/env python3
"""Tests of the network-namespace harness itself (netns_cluster.py).

    tests/multihost/netns_cluster_test.py [NetnsClusterTest.test_name ...]

Exit code 77 (ctest: skipped) where namespaces cannot be made (the reason
is printed).
"""

import os
import signal
import subprocess
import shutil
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import netns_cluster  # noqa: E402
from netns_cluster import Cluster, NetnsError  # noqa: E402

EXIT_SKIPPED = 77
PY = sys.executable
# A TCP server on <host>:7000 that answers each connection with the number
# of bytes it received.
SINK = ("import socket, sys\n"
        "s = socket.socket()\n"
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind((sys.argv[1], 7000))\n"
        "s.listen()\n"
        "print('listening', flush=True)\n"
        "buf = bytearray(1 << 20)\n"
        "while True:\n"
        "    c, _ = s.accept()\n"
        "    n = 0\n"
        "    while True:\n"
        "        k = c.recv_into(buf)\n"
        "        if not k:\n"
        "            break\n"
        "        n += k\n"
        "    c.sendall(str(n).encode())\n"
        "    c.close()\n")
# Sends argv[2] MB to <argv[1]>:7000; prints "<bytes acknowledged> <seconds>".
SEND = ("import socket, sys, time\n"
        "s = socket.create_connection((sys.argv[1], 7000), timeout=5)\n"
        "block = b'x' * (1 << 20)\n"
        "t = time.monotonic()\n"
        "for _ in range(int(sys.argv[2])):\n"
        "    s.sendall(block)\n"
        "s.shutdown(socket.SHUT_WR)\n"
        "n = s.recv(100)\n"
        "print(n.decode(), time.monotonic() - t)\n")


def namespaces():
    return set(netns_cluster.run(["ip", "netns", "list"], "list").split())


def own_names(tag):
    names = {n for n in namespaces() if n.startswith(tag + "-")}
    if os.path.isdir(netns_cluster.ETC_NETNS):
        names |= {n for n in os.listdir(netns_cluster.ETC_NETNS) if n.startswith(tag + "-")}
    return names


def running(pid):
    """True when `pid` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class NetnsClusterTest(unittest.TestCase):

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="ps_netns_test_")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

    def cluster(self, hosts, **kw):
        return Cluster(hosts, log_dir=self.dir, **kw)

    def start_sink(self, c, host):
        p = c.spawn(host, [PY, "-c", SINK, host])
        c.wait_for_output(p, "listening", 10)
        return p

    def send(self, c, host, to, megabytes, timeout=30):
        code, out = c.run(host, [PY, "-c", SEND, to, str(megabytes)], timeout)
        return code, out

    def test_hosts_reach_each_other_by_name(self):
        with self.cluster(["alpha", "beta"]) as c:
            self.start_sink(c, "alpha")
            code, out = self.send(c, "beta", "alpha", 1)
            self.assertEqual(code, 0, out)
            self.assertEqual(out.split()[0], str(1 << 20))
            with open(os.path.join(netns_cluster.ETC_NETNS, c.ns("beta"), "hosts")) as f:
                self.assertIn("%s alpha\n" % c.address("alpha"), f.read())

    def test_partition_drops_every_packet_until_healed(self):
        with self.cluster(["alpha", "beta", "gamma"]) as c:
            self.start_sink(c, "alpha")
            c.partition("beta")
            code, out = self.send(c, "beta", "alpha", 1)
            self.assertNotEqual(code, 0, out)
            self.assertIn("timed out", out)
            # Only beta is cut off.
            self.assertEqual(self.send(c, "gamma", "alpha", 1)[0], 0)
            c.heal("beta")
            code, out = self.send(c, "beta", "alpha", 1)
            self.assertEqual(code, 0, out)

    def test_partition_from_some_peers_only(self):
        with self.cluster(["alpha", "beta", "gamma"]) as c:
            self.start_sink(c, "alpha")
            self.start_sink(c, "gamma")
            c.partition("beta", peers=["alpha"])
            self.assertNotEqual(self.send(c, "beta", "alpha", 1)[0], 0)
            self.assertEqual(self.send(c, "beta", "gamma", 1)[0], 0)

    def test_rate_limit_holds_a_link_to_its_rate(self):
        with self.cluster(["alpha", "beta"], rate="100mbit") as c:
            self.start_sink(c, "alpha")
            code, out = self.send(c, "beta", "alpha", 25)
            self.assertEqual(code, 0, out)
            mbit_s = 25 * 8 * (1 << 20) / float(out.split()[1]) / 1e6
            # Unlimited, a veth carries several Gbit/s here.
            self.assertLess(mbit_s, 115)
            self.assertGreater(mbit_s, 50)
            for host in ("alpha", "beta"):
                c.set_rate(host, None)
            code, out = self.send(c, "beta", "alpha", 25)
            self.assertGreater(25 * 8 * (1 << 20) / float(out.split()[1]) / 1e6, 200)

    def test_teardown_kills_every_process_and_removes_every_name(self):
        c = self.cluster(["alpha"])
        c.start()
        p = c.spawn("alpha", ["sleep", "600"])
        # A process that left the cluster's process group: found by namespace.
        c.run("alpha", ["sh", "-c", "setsid sleep 600 > /dev/null 2>&1 &"], 10)
        stray = [pid for pid in netns_cluster.namespace_pids(c.ns("alpha")) if pid != p.pid]
        self.assertEqual(len(stray), 1)
        self.assertTrue(own_names(c.tag))
        c.close()
        self.assertEqual(own_names(c.tag), set())
        self.assertIsNotNone(p.poll())
        for pid in stray:
            self.assertFalse(running(pid))
        c.close()  # idempotent

    def test_teardown_on_sigterm(self):
        script = ("import sys, time\n"
                  "sys.path.insert(0, %r)\n"
                  "import netns_cluster\n"
                  "netns_cluster.handle_signals()\n"
                  "with netns_cluster.Cluster(['alpha'], log_dir=%r) as c:\n"
                  "    c.spawn('alpha', ['sleep', '600'])\n"
                  "    print(c.tag, flush=True)\n"
                  "    time.sleep(600)\n" % (HERE, self.dir))
        driver = subprocess.Popen([PY, "-c", script], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        try:
            tag = driver.stdout.readline().strip()
            self.assertTrue(own_names(tag))
            driver.send_signal(signal.SIGTERM)
            driver.wait(30)
        finally:
            driver.kill()
            driver.wait()
            driver.stdout.close()
        self.assertEqual(own_names(tag), set())

    def test_sweep_removes_what_a_dead_run_left(self):
        gone = subprocess.Popen(["true"])
        gone.wait()
        leftover = "%s%d-1-alpha" % (netns_cluster.PREFIX, gone.pid)
        netns_cluster.run(["ip", "netns", "add", leftover], "plant a leftover")
        os.makedirs(os.path.join(netns_cluster.ETC_NETNS, leftover), exist_ok=True)
        try:
            with self.cluster(["alpha"]) as c:
                self.assertNotIn(leftover, namespaces())
                self.assertFalse(os.path.exists(os.path.join(netns_cluster.ETC_NETNS,
                                                             leftover)))
                # This run's own namespaces are not leftovers.
                self.assertEqual(netns_cluster.sweep_leftovers(), [])
                self.assertIn(c.ns("alpha"), namespaces())
        finally:
            netns_cluster.delete_namespace(leftover)

    def test_a_failed_command_is_named_with_its_error(self):
        with self.assertRaises(NetnsError) as e:
            netns_cluster.run(["ip", "-n", "psnet-no-such-namespace", "link"], "list links")
        text = str(e.exception)
        self.assertIn("list links: `ip -n psnet-no-such-namespace link` failed (exit code", text)
        self.assertIn("psnet-no-such-namespace", e.exception.stderr)
        with self.cluster(["alpha"]) as c:
            with self.assertRaisesRegex(NetnsError, r"heal alpha: `ip netns exec \S+ iptables"):
                c.partitioned["alpha"] = [["INPUT", "-i", "eth0", "-j", "DROP"]]
                c.heal("alpha")  # the rule was never added: iptables -D fails

    def test_bad_arguments_are_refused_before_anything_is_made(self):
        with self.assertRaisesRegex(ValueError, "host name 'Server_0'"):
            Cluster(["Server_0"])
        with self.assertRaisesRegex(ValueError, "repeat"):
            Cluster(["alpha", "alpha"])
        with self.assertRaisesRegex(ValueError, "rate '1 gigabit'"):
            Cluster(["alpha"], rate="1 gigabit")
        with self.assertRaisesRegex(ValueError, "subnet 8.8.8.0/24"):
            Cluster(["alpha"], subnet="8.8.8.0/24")


def main():
    problem = netns_cluster.check_prerequisites()
    if problem is not None:
        print("netns_cluster_test: skipped: " + problem, file=sys.stderr)
        return EXIT_SKIPPED
    netns_cluster.handle_signals()
    program = unittest.main(exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
