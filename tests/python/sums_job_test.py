"""End to end: two real ps_server processes and two Python workers, each a
process of its own started with ps_worker's flags (sum_worker.py), under
bsp. Every integer-valued gradient they push sums exactly, in a dense and a
hashed table, and the servers exit 0 by themselves once both workers left
(server.exit_when_workers_leave)."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CLOCKS = 20


def test_two_python_workers_sum_exactly_under_bsp(cluster):
    job = cluster(servers=2, workers=2)
    workers = [subprocess.Popen(
        [sys.executable, os.path.join(HERE, "sum_worker.py"), "--config", job.path,
         "--rank", str(r), "--clocks", str(CLOCKS)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        for r in range(2)]
    try:
        outputs = [p.communicate(timeout=120)[0] for p in workers]
    finally:
        for p in workers:
            if p.poll() is None:
                p.kill()
                p.wait()
    total = sum((r + 1) * (c + 1) for r in range(2) for c in range(CLOCKS))
    for r, (p, out) in enumerate(zip(workers, outputs)):
        assert p.returncode == 0 and ("sums ok %d" % total) in out, \
            "worker %d (exit %s):\n%s" % (r, p.returncode, out)
    assert job.wait_servers(30) == [0, 0], job.server_logs()
