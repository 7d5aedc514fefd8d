#!/usr/bin/env python3
"""A job under security.mode curve with the real binaries, as a user runs it.

`ps_ctl keygen` writes the keys; a ps_server and two ps_workers train a
linear-regression job over CurveZMQ; while the server runs, `ps_ctl status`
with the admin key answers, while `ps_ctl` with the job's keys but no admin
secret, with another job's keys, or with security.mode none (a plain ZeroMQ
client) gets nothing and changes nothing; `ps_ctl shutdown` with the admin
key stops the server. A worker whose secret key has mode 0644 refuses to
start and says `chmod 600`.

  curve_job_test.py BIN_DIR

Exit code 0 when every check held, 1 otherwise. Every process is killed at
the end, also on failure.
"""

import os
import re
import shutil
import subprocess
import sys

from job_checks import Checks, run

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "util"))
from ports import free_port  # noqa: E402

JOB = """cluster: {{ servers: ["127.0.0.1:{port}"], workers: 2 }}
tables:
  - {{ name: weights, rows: 16, dim: 1, optimizer: {{ type: sgd, lr: 0.1 }} }}
consistency: {{ mode: bsp }}
rendezvous: {{ timeout_ms: 10000 }}
server: {{ exit_when_workers_leave: false }}
client: {{ request_timeout_ms: 9500 }}
security: {{ mode: {mode}{keys} }}
train: {{ table: weights, features: 16, samples_per_worker: 1024, batch_size: 32,
         iterations: 60, log_every: 30 }}
"""

checks = Checks()
check = checks.check


def write_job(path, port, mode, keys):
    with open(path, "w") as f:
        f.write(JOB.format(port=port, mode=mode, keys=(", keys_dir: " + keys) if keys else ""))


def main():
    bin_dir = sys.argv[1]
    ps_ctl = os.path.join(bin_dir, "ps_ctl")
    def body(tmp, procs):
        port = free_port()
        keys = os.path.join(tmp, "keys")
        job = os.path.join(tmp, "job.yaml")
        write_job(job, port, "curve", keys)

        rc, out = run([ps_ctl, "keygen", "--config", job])
        check(rc == 0 and "wrote CurveZMQ key pairs" in out, "ps_ctl keygen writes the keys", out)
        names = sorted(os.listdir(keys))
        expected = sorted(n + s for n in ["server", "worker-0", "worker-1", "evaluator", "admin"]
                          for s in [".public", ".secret"])
        check(names == expected, "one pair per identity: %s" % names)
        check(all(os.stat(os.path.join(keys, n)).st_mode & 0o077 == 0
                  for n in names if n.endswith(".secret")), "secret files are mode 0600")
        rc, out = run([ps_ctl, "keygen", "--config", job])
        check(rc != 0 and "--force" in out, "a second keygen does not replace the keys", out)

        # A worker host with a secret others can read refuses to start.
        os.chmod(os.path.join(keys, "worker-1.secret"), 0o644)
        rc, out = run([os.path.join(bin_dir, "ps_worker"), "--config", job, "--rank", "1"])
        check(rc != 0 and "chmod 600" in out, "a worker refuses a 0644 secret key", out)
        os.chmod(os.path.join(keys, "worker-1.secret"), 0o600)

        server = subprocess.Popen([os.path.join(bin_dir, "ps_server"), "--config", job,
                                   "--shard", "0"], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
        procs.append(server)
        workers = [subprocess.Popen([os.path.join(bin_dir, "ps_worker"), "--config", job,
                                     "--rank", str(r)], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True) for r in range(2)]
        procs += workers
        for r, w in enumerate(workers):
            out, _ = w.communicate(timeout=90)
            check(w.returncode == 0 and "done" in out, "worker %d trained under curve" % r, out)

        rc, status = run([ps_ctl, "status", "--config", job, "--raw"])
        check(rc == 0 and "security curve" in status and "worker_clocks 60 60" in status,
              "ps_ctl status with the admin key", status)

        # Clients without the admin's secret: nothing, and no change.
        no_admin = os.path.join(tmp, "no_admin")
        shutil.copytree(keys, no_admin)
        os.remove(os.path.join(no_admin, "admin.secret"))
        job_no_admin = os.path.join(tmp, "no_admin.yaml")
        write_job(job_no_admin, port, "curve", no_admin)
        rc, out = run([ps_ctl, "shutdown", "--config", job_no_admin])
        check(rc != 0 and "admin.secret" in out, "ps_ctl without admin.secret stops nothing", out)

        other = os.path.join(tmp, "other")
        job_other = os.path.join(tmp, "other.yaml")
        write_job(job_other, port, "curve", other)
        run([ps_ctl, "keygen", "--config", job_other])
        shutil.copy(os.path.join(keys, "server.public"), os.path.join(other, "server.public"))
        rc, out = run([ps_ctl, "shutdown", "--config", job_other, "--timeout-ms", "2000"])
        check(rc != 0 and "refused this process's key" in out,
              "another job's admin key is refused", out)

        job_plain = os.path.join(tmp, "plain.yaml")
        write_job(job_plain, port, "none", "")
        rc, out = run([ps_ctl, "shutdown", "--config", job_plain, "--timeout-ms", "2000"])
        check(rc != 0 and "speaks CurveZMQ" in out, "a plain client is refused", out)

        check(server.poll() is None, "the server still runs after the refused clients")
        rc, status2 = run([ps_ctl, "status", "--config", job, "--raw"])
        clocks = re.search(r"worker_clocks .*", status2)
        check(rc == 0 and clocks and clocks.group(0) == "worker_clocks 60 60",
              "nothing changed: %s" % (clocks.group(0) if clocks else status2))
        refused = re.search(r"refused_handshakes (\d+)", status2)
        check(refused is not None and int(refused.group(1)) >= 1,
              "the server counted the refused handshakes", status2)

        rc, out = run([ps_ctl, "shutdown", "--config", job])
        check(rc == 0, "ps_ctl shutdown with the admin key", out)
        out, _ = server.communicate(timeout=30)
        check(server.returncode == 0, "the server exited 0 after SHUTDOWN", out)
        check("refused a CURVE handshake from 127.0.0.1" in out,
              "the server logged the refused key with the peer's address", out)

    return checks.run_and_clean_up(body, prefix="ps_curve_job_")


if __name__ == "__main__":
    sys.exit(main())
