"""Loopback TCP ports for a test's servers, as tests/util/free_port.h gives
the C++ tests.

Ports come from below the kernel's ephemeral range (ip_local_port_range):
a port in that range may become the source port of any process's outgoing
connection between the pick and the test server's bind (a job's later
servers, a reshard's next map, a restarted replica), and the suite runs
several tests at once. Each pick is random in [12000, 30000), never the
same one twice in a process; where the ephemeral range starts lower, the
kernel picks.
"""

import random
import socket

LOW, HIGH = 12000, 30000
_rng = random.SystemRandom()
_handed_out = set()


def ephemeral_ports_from():
    """The first port of the kernel's ephemeral range (32768 where it
    cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
        return low if low > 1024 else 32768
    except (OSError, ValueError, IndexError):
        return 32768


def port_free(port):
    """True when loopback TCP port `port` (1..65535) can be bound now."""
    if not 0 < port <= 65535:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _kernel_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port():
    """A loopback TCP port that was free a moment ago."""
    if ephemeral_ports_from() >= HIGH + 2768:
        for _ in range(2000):
            port = _rng.randrange(LOW, HIGH)
            if port not in _handed_out and port_free(port):
                _handed_out.add(port)
                return port
    return _kernel_port()


def free_ports(count):
    """`count` distinct loopback TCP ports that were free a moment ago."""
    ports = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


def free_port_run(n):
    """The first of `n` consecutive loopback TCP ports that were free a
    moment ago (metrics ports: shards, then workers)."""
    for _ in range(100):
        first = _rng.randrange(LOW, HIGH - n)
        run = range(first, first + n)
        if not _handed_out.intersection(run) and all(port_free(p) for p in run):
            _handed_out.update(run)
            return first
    raise RuntimeError("no %d consecutive free loopback ports in [%d, %d)" % (n, LOW, HIGH))


def free_port_offset(ports, replicas=2):
    """A port offset (replication.port_offset) from 1000 up such that every
    port + j x offset, j = 1 .. replicas - 1, is free now and none of
    `ports`; raises when there is none."""
    for offset in range(1000, 20000, 97):
        if all(port_free(p + j * offset) and p + j * offset not in ports
               for p in ports for j in range(1, replicas)):
            return offset
    raise RuntimeError("no replication.port_offset leaves ports %s free" % (ports,))
