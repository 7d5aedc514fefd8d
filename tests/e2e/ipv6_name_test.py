#!/usr/bin/env python3
"""A server named by a host name that resolves to an IPv6 address only.

The test runs in a mount namespace of its own (unshare --mount) where
/etc/hosts is a file of the test's, naming only6.test as ::1 and nothing
else: the server binds [::1], and the workers connect to the name, which
the transport must resolve to IPv6. A linear-regression job of one server
and two workers trains and every process exits 0.

  ipv6_name_test.py SOURCE_DIR BIN_DIR

Exit code 77 (a skip, with the reason) where no private mount namespace
can be made (a chroot); 0 when the job ran, 1 when it failed.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

NAME = "only6.test"
JOB = """cluster: {{ servers: ["{name}:{port}"], workers: 2, allow_remote: true }}
tables:
  - {{ name: weights, rows: 16, dim: 1, optimizer: {{ type: sgd, lr: 0.1 }} }}
consistency: {{ mode: bsp }}
rendezvous: {{ timeout_ms: 10000 }}
train: {{ table: weights, features: 16, samples_per_worker: 1024, batch_size: 32,
         iterations: 80, log_every: 40 }}
"""


def free_ipv6_port():
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
        s.bind(("::1", 0))
        return s.getsockname()[1]


def inner(bin_dir, tmp):
    """In the namespace: /etc/hosts is the test's; run the job."""
    subprocess.run(["mount", "--bind", os.path.join(tmp, "hosts"), "/etc/hosts"], check=True)
    resolved = {a[0] for a in socket.getaddrinfo(NAME, None)}
    if resolved != {socket.AF_INET6}:
        print("FAIL: %s resolves to %s, expected IPv6 only" % (NAME, resolved))
        return 1
    job = os.path.join(tmp, "job.yaml")
    with open(job, "w") as f:
        f.write(JOB.format(name=NAME, port=free_ipv6_port()))
    procs = []
    try:
        server = subprocess.Popen([os.path.join(bin_dir, "ps_server"), "--config", job,
                                   "--shard", "0"], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
        procs.append(server)
        workers = [subprocess.Popen([os.path.join(bin_dir, "ps_worker"), "--config", job,
                                     "--rank", str(r)], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True) for r in range(2)]
        procs += workers
        failed = False
        for p, who in [(w, "worker %d" % r) for r, w in enumerate(workers)] + [(server, "server")]:
            out, _ = p.communicate(timeout=60)
            if p.returncode != 0:
                print("FAIL: %s exited with %d:\n%s" % (who, p.returncode, out))
                failed = True
            elif who == "server" and "[::1]" not in out:
                print("FAIL: the server did not bind [::1]:\n" + out)
                failed = True
        return 1 if failed else 0
    except subprocess.TimeoutExpired:
        print("FAIL: the job did not finish within 60 s")
        return 1
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--inner":
        return inner(sys.argv[2], sys.argv[3])
    bin_dir = sys.argv[2]
    if shutil.which("unshare") is None:
        print("SKIP: unshare (util-linux) is not installed")
        return 77
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        # E.g. in a chroot, where the root's mount propagation cannot be
        # made private: a bind mount there would reach the real /etc/hosts.
        print("SKIP: no private mount namespace here (unshare --mount: %s)" %
              probe.stderr.strip())
        return 77
    tmp = tempfile.mkdtemp(prefix="ps_ipv6_name_")
    try:
        with open(os.path.join(tmp, "hosts"), "w") as f:
            f.write("::1 %s\n" % NAME)
        r = subprocess.run(["unshare", "--mount", sys.executable, os.path.abspath(__file__),
                            "--inner", bin_dir, tmp], timeout=120)
        if r.returncode == 0:
            print("PASS: a server named %s (IPv6 only) served two workers" % NAME)
        return r.returncode
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
