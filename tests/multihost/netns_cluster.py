"""Hosts made of Linux network namespaces, for multi-host tests on one machine.

A Cluster is N "hosts": one network namespace each, joined by veth pairs to
a bridge that lives in a namespace of its own (the switch), so nothing is
added to the machine's own network. Each host has

  - loopback up, and eth0 with a private address 10.213.0.<i+1>/24 (the
    subnet is a parameter; the addresses exist only inside the namespaces,
    so parallel clusters may use the same one);
  - /etc/netns/<namespace>/hosts naming every host ("10.213.0.1 server0"),
    which `ip netns exec` mounts over /etc/hosts for the commands it runs,
    so a job file can name its servers by host name;
  - optionally a tbf rate limit on its link, both directions (see Link rates
    below).

    with Cluster(["server0", "server1", "worker0"], rate="1gbit") as c:
        server = c.spawn("server0", ["build/bin/ps_server", "--config", job,
                                     "--shard", "0"], log="server0.log")
        c.wait_for_output(server, r"serving", timeout=20)
        c.partition("worker0")      # iptables DROP on worker0's eth0
        c.heal("worker0")
        c.kill_host("server0")      # SIGKILL every process in the namespace

Teardown (leaving the with-block, close(), also on an exception; Ctrl-C
and SIGTERM are turned into exceptions by handle_signals()) kills every
process the cluster started (its process group, and whatever else is in
its namespaces), then deletes the namespaces (which deletes their veths),
the switch with its bridge and the /etc/netns folders. Namespaces are named
psnet-<pid>-<seq>-<host> (the switch: psnet-<pid>-<seq>-sw), so clusters
of parallel runs cannot collide, and a new Cluster first sweeps what a
crashed earlier run left behind: namespaces and /etc/netns folders of a pid
that no longer runs.

Link rates. `rate` (tc syntax: "1gbit", "10gbit", "500mbit") puts a tbf on
both ends of each host's veth: the host's eth0 (what it sends) and the
switch's side (what it receives). burst is 4 ms at the rate (at least
64 KiB): tbf refills its bucket on timer ticks, and a bucket smaller than
what the rate sends between two ticks (4 ms at HZ=250) caps the throughput
below the rate. latency is 20 ms: a packet that would wait longer in the
queue is dropped, which bounds the queue at 20 ms of traffic (2.5 MB at
1 Gbit/s) instead of growing the round-trip time without limit. There is no
delay emulation (this kernel has no netem).

Needs root, iproute2 and iptables. Every command that fails raises
NetnsError with the command, its exit code and its stderr. Thread-safe: no;
one thread drives a Cluster.
"""

import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time

PREFIX = "psnet-"
SWITCH = "sw"
ETC_NETNS = "/etc/netns"
# A host name: what /etc/hosts and the job file's cluster.servers accept.
HOST_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")
# How long one setup or teardown command may take.
COMMAND_TIMEOUT_S = 30
# tbf settings (see the module comment).
BURST_SECONDS = 0.004
MIN_BURST_BYTES = 64 * 1024
LATENCY = "20ms"

_sequence = 0


class NetnsError(RuntimeError):
    """A command of the cluster's setup, teardown or partitioning failed."""

    def __init__(self, what, argv, returncode=None, stderr=""):
        detail = "exit code %s" % returncode if returncode is not None else "did not finish"
        text = "%s: `%s` failed (%s)" % (what, " ".join(argv), detail)
        if stderr and stderr.strip():
            text += ": " + stderr.strip()
        super().__init__(text)
        self.argv = argv
        self.returncode = returncode
        self.stderr = stderr


def run(argv, what, timeout=COMMAND_TIMEOUT_S, check=True):
    """Runs a setup command; returns its stdout. NetnsError when it fails
    (check) or runs past `timeout` seconds."""
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise NetnsError(what, argv, None, e.stderr or "") from None
    except OSError as e:
        raise NetnsError(what, argv, None, str(e)) from None
    if check and done.returncode != 0:
        raise NetnsError(what, argv, done.returncode, done.stderr)
    return done.stdout


def parse_rate(rate):
    """Bits per second of a tc rate such as "1gbit", "10gbit", "500mbit"."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(k|m|g|)bit", rate.strip().lower())
    if not m:
        raise ValueError("rate %r: expected a number and kbit, mbit, gbit or bit "
                         "(e.g. \"1gbit\")" % rate)
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


def tbf_args(rate):
    """The tc arguments of a tbf at `rate` (see the module comment)."""
    burst = max(MIN_BURST_BYTES, int(parse_rate(rate) / 8 * BURST_SECONDS))
    return ["tbf", "rate", rate, "burst", str(burst), "latency", LATENCY]


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def namespace_pids(ns):
    """Pids of the processes in namespace `ns` (none when it is gone)."""
    out = run(["ip", "netns", "pids", ns], "list the processes of " + ns, check=False)
    return [int(p) for p in out.split() if p.isdigit()]


def kill_namespace_processes(ns, sig=signal.SIGKILL):
    """Sends `sig` to every process in namespace `ns`; returns their pids."""
    pids = namespace_pids(ns)
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return pids


def delete_namespace(ns):
    """Kills what runs in `ns`, deletes it and its /etc/netns folder.
    Returns the errors met (empty when all went well)."""
    errors = []
    kill_namespace_processes(ns)
    # A namespace goes away once its last process is gone; wait for that a
    # little, so that its interfaces are gone too when this returns.
    for _ in range(50):
        if not namespace_pids(ns):
            break
        time.sleep(0.02)
    if os.path.exists(os.path.join("/run/netns", ns)):
        try:
            run(["ip", "netns", "delete", ns], "delete namespace " + ns)
        except NetnsError as e:
            errors.append(str(e))
    folder = os.path.join(ETC_NETNS, ns)
    if os.path.isdir(folder):
        try:
            shutil.rmtree(folder)
        except OSError as e:
            errors.append("remove %s: %s" % (folder, e))
    return errors


def sweep_leftovers():
    """Deletes the namespaces and /etc/netns folders of clusters whose
    process no longer runs (a crashed or killed earlier run). Returns the
    names removed."""
    names = set(run(["ip", "netns", "list"], "list namespaces").split())
    if os.path.isdir(ETC_NETNS):
        names.update(os.listdir(ETC_NETNS))
    removed = []
    for name in sorted(names):
        m = re.match(re.escape(PREFIX) + r"(\d+)-", name)
        if not m or pid_alive(int(m.group(1))):
            continue
        errors = delete_namespace(name)
        if errors:
            raise NetnsError("sweep a leftover of process %s" % m.group(1),
                             ["ip", "netns", "delete", name], None, "; ".join(errors))
        removed.append(name)
    return removed


def check_prerequisites():
    """None when this machine can make a cluster, else the reason it cannot."""
    if os.geteuid() != 0:
        return "network namespaces need root (running as uid %d)" % os.geteuid()
    for tool in ("ip", "iptables", "tc"):
        if shutil.which(tool) is None:
            return "%s not found (Debian packages iproute2 and iptables)" % tool
    probe = "%s%d-probe" % (PREFIX, os.getpid())
    try:
        run(["ip", "netns", "add", probe], "create a probe namespace")
        run(["ip", "-n", probe, "link", "add", "probe0", "type", "veth", "peer", "name",
             "probe1"], "create a veth pair in a namespace")
    except NetnsError as e:
        return str(e)
    finally:
        delete_namespace(probe)
    return None


def partition_rules(addresses=None):
    """The iptables rules that cut a host's eth0 off: every packet, or only
    those to and from `addresses`."""
    if not addresses:
        return [["INPUT", "-i", "eth0", "-j", "DROP"], ["OUTPUT", "-o", "eth0", "-j", "DROP"]]
    rules = []
    for a in addresses:
        rules += [["INPUT", "-i", "eth0", "-s", a, "-j", "DROP"],
                  ["OUTPUT", "-o", "eth0", "-d", a, "-j", "DROP"]]
    return rules


def change_rule(ns, rule, add, what):
    """Adds (or deletes) iptables `rule` in namespace `ns`."""
    run(["ip", "netns", "exec", ns, "iptables", "-w", "5", "-I" if add else "-D"] + rule, what)


class Process:
    """A command the cluster started in one of its hosts."""

    def __init__(self, host, argv, popen, log):
        self.host = host
        self.argv = argv
        self.popen = popen
        self.log = log          # path of its stdout and stderr together
        self.pid = popen.pid    # also its process group

    def poll(self):
        return self.popen.poll()

    def wait(self, timeout):
        """Its exit code; None when it still runs after `timeout` seconds."""
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def output(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def describe(self):
        return "%s on %s (pid %d)" % (os.path.basename(self.argv[0]), self.host, self.pid)


class Cluster:
    """Network-namespace hosts on one bridge; see the module comment."""

    def __init__(self, hosts, rate=None, subnet="10.213.0.0/24", log_dir=None):
        for h in hosts:
            if not HOST_NAME.match(h) or h == SWITCH:
                raise ValueError("host name %r: expected lower-case letters, digits and '-', "
                                 "starting with a letter (not %r)" % (h, SWITCH))
        if len(set(hosts)) != len(hosts):
            raise ValueError("host names repeat: %s" % ", ".join(hosts))
        net = ipaddress.ip_network(subnet)
        if not net.is_private or net.num_addresses < len(hosts) + 2:
            raise ValueError("subnet %s: expected a private network with room for %d hosts" %
                             (subnet, len(hosts)))
        if rate is not None:
            parse_rate(rate)
        global _sequence
        _sequence += 1
        self.tag = "%s%d-%d" % (PREFIX, os.getpid(), _sequence)
        self.hosts = list(hosts)
        self.rate = rate
        self.prefix_len = net.prefixlen
        addresses = net.hosts()
        self.addresses = {h: str(next(addresses)) for h in hosts}
        self.log_dir = log_dir or os.getcwd()
        self.processes = []
        self.partitioned = {}   # host -> the iptables rules added
        self.namespaces = []    # created, in order
        self.up = False

    # -- names -----------------------------------------------------------

    def ns(self, host):
        """The namespace of `host`."""
        if host not in self.addresses:
            raise KeyError("no host %r in this cluster (it has %s)" %
                           (host, ", ".join(self.hosts)))
        return "%s-%s" % (self.tag, host)

    @property
    def switch(self):
        return "%s-%s" % (self.tag, SWITCH)

    def address(self, host):
        self.ns(host)
        return self.addresses[host]

    def hosts_file(self):
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        lines += ["%s %s" % (self.addresses[h], h) for h in self.hosts]
        return "\n".join(lines) + "\n"

    # -- setup and teardown ------------------------------------------------

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _add_namespace(self, ns):
        run(["ip", "netns", "add", ns], "create namespace " + ns)
        self.namespaces.append(ns)
        run(["ip", "-n", ns, "link", "set", "lo", "up"], "bring loopback up in " + ns)

    def start(self):
        """Sweeps leftovers of dead runs, then creates the switch and every
        host. On a failure, removes what it made and raises NetnsError."""
        sweep_leftovers()
        try:
            sw = self.switch
            self._add_namespace(sw)
            run(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"],
                "create the bridge in " + sw)
            run(["ip", "-n", sw, "link", "set", "br0", "up"], "bring the bridge up")
            for i, host in enumerate(self.hosts):
                ns = self.ns(host)
                self._add_namespace(ns)
                folder = os.path.join(ETC_NETNS, ns)
                os.makedirs(folder, exist_ok=True)
                with open(os.path.join(folder, "hosts"), "w") as f:
                    f.write(self.hosts_file())
                port = "h%d" % i
                # Both ends are made inside namespaces: no name in the
                # machine's own namespace, not even for a moment.
                run(["ip", "-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                     "netns", ns], "create the link of " + host)
                run(["ip", "-n", sw, "link", "set", port, "master", "br0", "up"],
                    "attach the link of %s to the bridge" % host)
                run(["ip", "-n", ns, "addr", "add",
                     "%s/%d" % (self.addresses[host], self.prefix_len), "dev", "eth0"],
                    "give %s its address" % host)
                run(["ip", "-n", ns, "link", "set", "eth0", "up"], "bring eth0 up in " + host)
                if self.rate:
                    self.set_rate(host, self.rate)
            self.up = True
        except BaseException:
            self.close()
            raise

    def set_rate(self, host, rate):
        """Limits `host`'s link to `rate` both ways (tbf; None: no limit)."""
        i = self.hosts.index(host)
        for ns, dev in ((self.ns(host), "eth0"), (self.switch, "h%d" % i)):
            if rate is None:
                run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"],
                    "remove the rate limit of " + host, check=False)
            else:
                run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root"] +
                    tbf_args(rate), "limit the link of %s to %s" % (host, rate))

    def close(self):
        """Kills every process started, deletes every namespace and folder.
        Idempotent. Raises NetnsError listing what could not be removed."""
        self.kill_all()
        errors = []
        for ns in reversed(self.namespaces):
            errors += delete_namespace(ns)
        self.namespaces = []
        self.up = False
        if errors:
            raise NetnsError("tear down cluster " + self.tag, ["ip", "netns", "delete"], None,
                             "; ".join(errors))

    def kill_all(self):
        """SIGKILLs every process the cluster started and anything else in
        its namespaces, and reaps them."""
        for p in self.processes:
            self._kill_group(p, signal.SIGKILL)
        for ns in self.namespaces:
            kill_namespace_processes(ns)
        for p in self.processes:
            p.wait(timeout=10)

    @staticmethod
    def _kill_group(p, sig):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass

    # -- running commands ----------------------------------------------------

    def command(self, host, argv):
        """The argv that runs `argv` in `host`."""
        return ["ip", "netns", "exec", self.ns(host)] + list(argv)

    def spawn(self, host, argv, log=None, env=None):
        """Starts `argv` in `host`, its stdout and stderr into the file `log`
        (default <log_dir>/<host>-<n>.log), in a process group of its own.
        The cluster kills it at teardown."""
        if not self.up:
            raise RuntimeError("cluster %s is not up" % self.tag)
        log = log or os.path.join(self.log_dir, "%s-%d.log" % (host, len(self.processes)))
        with open(log, "w") as out:
            popen = subprocess.Popen(self.command(host, argv), stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=subprocess.STDOUT,
                                     start_new_session=True,
                                     env=None if env is None else {**os.environ, **env})
        p = Process(host, list(argv), popen, log)
        self.processes.append(p)
        return p

    def run(self, host, argv, timeout):
        """Runs `argv` in `host` to its end; returns (exit code, output).
        A command still running after `timeout` seconds is killed and
        NetnsError raised."""
        p = self.spawn(host, argv)
        code = p.wait(timeout)
        if code is None:
            self._kill_group(p, signal.SIGKILL)
            p.wait(10)
            raise NetnsError("run in " + host, argv, None,
                             "still running after %g s; output: %s" % (timeout, p.output()))
        return code, p.output()

    def wait_for_output(self, process, pattern, timeout):
        """Waits until `process`'s output has a line matching `pattern`;
        returns the match. RuntimeError when the process ends first or
        `timeout` seconds pass."""
        regex = re.compile(pattern, re.M)
        deadline = time.monotonic() + timeout
        while True:
            m = regex.search(process.output())
            if m:
                return m
            if process.poll() is not None:
                m = regex.search(process.output())
                if m:
                    return m
                raise RuntimeError("%s exited with %s before printing /%s/; output:\n%s" %
                                   (process.describe(), process.poll(), pattern,
                                    process.output()[-4000:]))
            if time.monotonic() > deadline:
                raise RuntimeError("%s did not print /%s/ within %g s; output:\n%s" %
                                   (process.describe(), pattern, timeout,
                                    process.output()[-4000:]))
            time.sleep(0.05)

    def wait_all(self, processes, timeout):
        """Waits for every process to exit, all within `timeout` seconds;
        returns {process: exit code or None (still running)}."""
        deadline = time.monotonic() + timeout
        return {p: p.wait(max(0.0, deadline - time.monotonic())) for p in processes}

    # -- faults ---------------------------------------------------------

    def partition(self, host, peers=None):
        """Drops every packet `host` sends or receives on its link (loopback
        keeps working), or only those to and from the hosts in `peers`."""
        if host in self.partitioned:
            raise RuntimeError("%s is already partitioned" % host)
        rules = partition_rules([self.address(p) for p in peers] if peers else None)
        self.partitioned[host] = []
        for rule in rules:
            change_rule(self.ns(host), rule, True, "partition " + host)
            self.partitioned[host].append(rule)

    def heal(self, host):
        """Removes the partition of `host`."""
        for rule in self.partitioned.pop(host, []):
            change_rule(self.ns(host), rule, False, "heal " + host)

    def kill_host(self, host, sig=signal.SIGKILL):
        """Sends `sig` to every process in `host` (a host lost), reaps the
        ones the cluster started there; returns the pids signalled."""
        pids = kill_namespace_processes(self.ns(host), sig)
        for p in self.processes:
            if p.host == host:
                if sig == signal.SIGKILL:
                    self._kill_group(p, sig)
                    p.wait(10)
        return pids


class Stopped(BaseException):
    """Raised in the main thread by SIGTERM or SIGHUP once handle_signals()
    ran, so that with-blocks (a Cluster's teardown) run as for Ctrl-C."""


def handle_signals():
    """Makes SIGTERM and SIGHUP raise an exception as Ctrl-C does, so that a
    Cluster in a with-block is torn down when the run is stopped. A run
    killed with SIGKILL cannot clean up: the next Cluster's sweep removes
    what it left."""
    def raise_signalled(signum, frame):
        raise Stopped("stopped by signal %d" % signum)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, raise_signalled)
