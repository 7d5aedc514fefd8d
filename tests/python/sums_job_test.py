"""End to end: two real ps_server processes and two Python workers, each a
process of its own started with ps_worker's flags (sum_worker.py), under
bsp. Every integer-valued gradient they push sums exactly, in a dense and a
hashed table, and the servers exit 0 by themselves once both workers left
(server.exit_when_workers_leave)."""

from conftest import run_python_workers

CLOCKS = 20


def test_two_python_workers_sum_exactly_under_bsp(cluster):
    job = cluster(servers=2, workers=2)
    results = run_python_workers("sum_worker.py", job.path, 2, ["--clocks", str(CLOCKS)])
    total = sum((r + 1) * (c + 1) for r in range(2) for c in range(CLOCKS))
    for r, (code, out) in enumerate(results):
        assert code == 0 and ("sums ok %d" % total) in out, \
            "worker %d (exit %s):\n%s" % (r, code, out)
    assert job.wait_servers(30) == [0, 0], job.server_logs()
