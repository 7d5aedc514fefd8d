"""What the launcher tests share: a small training job on free loopback
ports, a command run in a process group of its own with a deadline, the
check that every worker trained, and the copy-paste blocks of the deploy
READMEs (the tests run those blocks, so the docs cannot drift from what
works).

Exit codes of a test script: 0 passed, 1 failed, SKIP (77, ctest's
SKIP_RETURN_CODE) when a component it needs cannot run on this machine.
"""

import os
import re
import shlex
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "util"))
from ports import free_ports  # noqa: E402,F401 (launcher_job.free_ports for the tests)

SKIP = 77


class Failure(Exception):
    """A check of the test failed; the message says what and shows the output."""


def _write_job_file(path, servers, workers, rest):
    """Writes to `path` a job of `servers` shards on free loopback ports and
    `workers` workers, under bsp, with the sections `rest`; returns `path`."""
    endpoints = ", ".join('"127.0.0.1:%d"' % p for p in free_ports(servers))
    with open(path, "w") as f:
        f.write("cluster: { servers: [%s], workers: %d }\nconsistency: { mode: bsp }\n%s"
                % (endpoints, workers, rest))
    return path


def write_job(path, servers, workers, iterations=150):
    """Writes a linear-regression job of `servers` shards on free loopback
    ports and `workers` workers to `path`. Linear regression is the program
    whose success is checkable from the output: each worker prints its
    first and final loss and how far its weights are from the generating
    ones, and exits 1 unless they are within 5%."""
    return _write_job_file(
        path, servers, workers,
        "tables:\n"
        "  - { name: weights, rows: 32, dim: 1, optimizer: { type: sgd, lr: 0.1 } }\n"
        "train: { table: weights, features: 32, samples_per_worker: 2048, batch_size: 32,\n"
        "         iterations: %d, log_every: 50 }\n" % iterations)


def write_sums_job(path, servers, workers, extra="", optimizer="{ type: add }"):
    """Writes a job for the Python workers of tests/python/sum_worker.py to
    `path`: `servers` shards on free loopback ports, `workers` workers, bsp,
    and the two tables that sum what is pushed (a dense one and a hashed
    one), so that every worker's result is checked exactly. `extra` is
    appended (e.g. a train section). Another `optimizer` for the dense
    table makes the workers fail (exit 1): what they pull is not the sum."""
    return _write_job_file(
        path, servers, workers,
        "tables:\n"
        "  - { name: dense, rows: 10, dim: 3, optimizer: %s }\n"
        "  - { name: by_id, keys: hashed, dim: 2, max_rows: 1000, optimizer: { type: add } }\n"
        "%s" % (optimizer, extra))


def _each_rank_once(pattern, output, workers, what):
    """{rank: the match's other groups} of the lines that `pattern`
    (group 1: the rank) finds in `output`: Failure unless each rank
    0..workers-1 has one, and only one."""
    done = {}
    for m in pattern.finditer(output):
        rank = int(m.group(1))
        if rank in done:
            raise Failure("worker %d finished twice (two processes took one rank):\n%s"
                          % (rank, output))
        done[rank] = m.groups()[1:]
    if sorted(done) != list(range(workers)):
        raise Failure("expected %s 0..%d to finish, got %s:\n%s"
                      % (what, workers - 1, sorted(done), output))
    return done


# sum_worker.py's last line (tests/python/sum_worker.py).
_SUMS = re.compile(r"^worker (\d+): sums ok (\d+) \(rank from (.*)\)$", re.M)


def check_sums(output, workers, clocks, source):
    """Every rank 0..workers-1 of sum_worker.py finished once, with exactly
    the sum that `workers` workers push over `clocks` clocks, and took its
    rank from where the regular expression `source` says."""
    done = _each_rank_once(_SUMS, output, workers, "Python workers")
    total = sum((r + 1) * (c + 1) for r in range(workers) for c in range(clocks))
    for rank, (got, rank_source) in sorted(done.items()):
        if int(got) != total:
            raise Failure("worker %d summed %s, expected %d:\n%s" % (rank, got, total, output))
        if not re.fullmatch(source, rank_source):
            raise Failure("worker %d took its rank from %s, expected /%s/:\n%s"
                          % (rank, rank_source, source, output))
    return total


# ps_worker's last line of a linear-regression run (worker/linear_regression.cc).
_DONE = re.compile(r"worker (\d+):? done: first loss ([0-9.]+), final loss ([0-9.]+), "
                   r"\|w - w\*\|/\|w\*\| = ([0-9.]+)")


def check_training(output, workers):
    """Every rank 0..workers-1 finished once, recovered the generating
    weights (relative error < 5%) and ended well below the first loss any
    worker saw."""
    done = {rank: tuple(float(g) for g in groups)
            for rank, groups in _each_rank_once(_DONE, output, workers, "workers").items()}
    first_max = max(first for first, _, _ in done.values())
    for rank, (_, final, error) in sorted(done.items()):
        if error >= 0.05 or final >= first_max * 0.01:
            raise Failure("worker %d did not train: final loss %g (first %g), "
                          "|w - w*|/|w*| %g:\n%s" % (rank, final, first_max, error, output))


def check_servers(output, job_path):
    """Shard i served the endpoint cluster.servers[i] of the job file (so
    its index is the one the launcher gave) and exited by itself, once,
    when every worker had left."""
    with open(job_path) as f:
        ports = re.findall(r"127\.0\.0\.1:(\d+)", f.read())
    for shard, port in enumerate(ports):
        if not re.search(r"shard %d serving .* on tcp://127\.0\.0\.1:%s " % (shard, port),
                         output):
            raise Failure("shard %d did not serve its endpoint 127.0.0.1:%s:\n%s"
                          % (shard, port, output))
        exits = re.findall(r"shard %d: every worker has left the job; the shard exits" % shard,
                           output)
        if len(exits) != 1:
            raise Failure("shard %d did not exit once by itself when the workers left:\n%s"
                          % (shard, output))


def read_text(path):
    """The whole text of a log file ("" when it cannot be read)."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def group_alive(pgid):
    """Whether any process of the process group `pgid` is still running."""
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def kill_group(pgid, grace_s=3.0):
    """SIGTERM to the process group, SIGKILL to what is left after
    `grace_s`; returns once the group is gone (bounded by `grace_s` + 5 s)."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and group_alive(pgid):
            time.sleep(0.05)
        if not group_alive(pgid):
            return


def run_in_group(argv, timeout_s, cwd=None, env=None):
    """Runs `argv` as the leader of a new process group with its output
    (stdout and stderr together) captured. Returns (exit code, output).
    Past `timeout_s` the whole group is killed and Failure names the command
    and shows what it printed. Once the command has exited, nothing of its
    group may still run: a leftover process is killed and reported."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        out, _ = proc.communicate()
        raise Failure("%s did not finish within %d s; its output:\n%s"
                      % (shlex.join(argv), timeout_s, out.decode(errors="replace")))
    except BaseException:
        kill_group(proc.pid)
        proc.wait()
        raise
    text = out.decode(errors="replace")
    if group_alive(proc.pid):
        kill_group(proc.pid)
        raise Failure("%s exited (%d) but left processes of its group running (killed); "
                      "its output:\n%s" % (shlex.join(argv), proc.returncode, text))
    return proc.returncode, text


def readme_text(readme_path, marker):
    """The text of the fenced block that follows `<!-- marker -->` in a
    README, as printed. Failure when the marker or its block is missing."""
    with open(readme_path) as f:
        text = f.read()
    m = re.search(r"<!-- %s -->\s*```[a-z]*\n(.*?)```" % re.escape(marker), text, re.S)
    if not m:
        raise Failure("%s: no fenced block after <!-- %s -->" % (readme_path, marker))
    return m.group(1)


def readme_block(readme_path, marker):
    """The command of the fenced block that follows `<!-- marker -->` in a
    README, as one line (backslash continuations joined, `#` comments
    dropped). Failure when the marker or its block is missing."""
    lines = []
    for line in readme_text(readme_path, marker).splitlines():
        line = line.split(" #", 1)[0].rstrip() if not line.lstrip().startswith("#") else ""
        if line:
            lines.append(line)
    return " ".join(l[:-1].rstrip() if l.endswith("\\") else l for l in lines)


def exit_on_signals():
    """SIGTERM, SIGINT and SIGHUP end the test through SystemExit, so the
    cleanup of run_in_group and of every `finally` runs (ctest sends
    SIGTERM-like stops on Ctrl-C; its TIMEOUT is longer than the tests' own
    deadlines, which come first)."""
    def stop(signum, _frame):
        raise SystemExit("stopped by signal %d" % signum)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
