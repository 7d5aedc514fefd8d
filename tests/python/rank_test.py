"""A Python worker's rank comes from where ps_worker's does (common/rank.h):
rank=, the flags a launcher passes (ps_launch: --config and --rank), Open
MPI, PMI, Slurm and a Kubernetes Indexed Job's environment, the host name
when asked for; with the same precedence and errors, checked against
ps_worker --check in the same environment. No server is needed: a Worker
connects without waiting."""

import os
import re
import socket
import subprocess

import pytest

import ps
from conftest import BIN_DIR

RANK_VARIABLES = ["OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                  "SLURM_PROCID", "SLURM_NTASKS", "JOB_COMPLETION_INDEX"]


@pytest.fixture
def job(tmp_path, monkeypatch):
    """A job of 2 servers and 3 workers (nothing listens), in an environment
    without any launcher's variables."""
    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "job.yaml"
    path.write_text('cluster:\n  servers: ["127.0.0.1:1", "127.0.0.1:2"]\n  workers: 3\n'
                    "tables:\n  - { name: t, rows: 4 }\n")
    return str(path)


def rank_of(job, **kwargs):
    w = ps.Worker(job, **kwargs)
    try:
        return w.rank, w.rank_source
    finally:
        w.close()


@pytest.mark.parametrize("variables, rank, source", [
    # mpirun -np 2 ps_server : -np 3 python3 train.py: world ranks 2..4.
    ({"OMPI_COMM_WORLD_RANK": "4", "OMPI_COMM_WORLD_SIZE": "5"}, 2,
     'OMPI_COMM_WORLD_RANK="4" minus offset 2'),
    # mpirun -np 3 python3 train.py: the workers alone, ranks 0..2.
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "3"}, 1, 'OMPI_COMM_WORLD_RANK="1"'),
    ({"PMI_RANK": "3", "PMI_SIZE": "5"}, 1, 'PMI_RANK="3" minus offset 2'),
    # srun --multi-prog over servers and workers.
    ({"SLURM_PROCID": "2", "SLURM_NTASKS": "5"}, 0, 'SLURM_PROCID="2" minus offset 2'),
    ({"SLURM_PROCID": "2", "SLURM_NTASKS": "3"}, 2, 'SLURM_PROCID="2"'),
    # A Kubernetes Indexed Job of the workers.
    ({"JOB_COMPLETION_INDEX": "1"}, 1, 'JOB_COMPLETION_INDEX="1"'),
    # A world rank wins over the pod's index (mpirun inside a pod).
    ({"JOB_COMPLETION_INDEX": "0", "SLURM_PROCID": "3", "SLURM_NTASKS": "5"}, 1,
     'SLURM_PROCID="3" minus offset 2'),
])
def test_rank_from_the_launchers_environment(job, monkeypatch, variables, rank, source):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    got_rank, got_source = rank_of(job)
    assert got_rank == rank
    assert source in got_source


@pytest.mark.parametrize("variables", [
    # mpirun -np 2 ps_server : -np 3 (ps_worker or python3 train.py)
    {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "5"},
    # the workers started by an mpirun of their own
    {"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "3"},
    # no world size: the offset applies
    {"OMPI_COMM_WORLD_RANK": "4"},
    {"PMI_RANK": "2", "PMI_SIZE": "3"},
    # srun --multi-prog (ps_job.sbatch), and srun of the workers alone
    {"SLURM_PROCID": "4", "SLURM_NTASKS": "5"},
    {"SLURM_PROCID": "0", "SLURM_NTASKS": "3"},
    {"JOB_COMPLETION_INDEX": "2", "SLURM_PROCID": "3", "SLURM_NTASKS": "5"},
    # refused alike: a server's world rank, one worker too many, not a number, none
    {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "5"},
    {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "6"},
    {"SLURM_PROCID": "-1", "SLURM_NTASKS": "5"},
    {},
])
def test_the_same_rank_or_error_as_ps_worker(job, monkeypatch, variables):
    """ps_worker --check and ps.Worker in one environment: the same rank
    from the same source, or the same error."""
    with open(job, "a") as f:
        f.write("train: { table: t, features: 4 }\n")  # ps_worker needs a program
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    cpp = subprocess.run([os.path.join(BIN_DIR, "ps_worker"), "--config", job, "--check"],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    try:
        rank, source = rank_of(job)
    except ps.InvalidArgumentError as e:
        assert cpp.returncode == 2 and str(e) in cpp.stderr, (str(e), cpp.stdout, cpp.stderr)
        return
    assert cpp.returncode == 0, cpp.stderr
    assert "rank %d of 3 (from %s)" % (rank, source) in cpp.stdout, (rank, source, cpp.stdout)


def test_rank_argument_wins_over_the_environment(job, monkeypatch):
    monkeypatch.setenv("SLURM_PROCID", "4")
    assert rank_of(job, rank=0) == (0, "--rank")


def test_ps_launch_flags(job):
    # What ps_launch gives a worker (tools/launch_plan.cc): --config and --rank.
    w, rest = ps.worker_from_argv(["--config", job, "--rank", "2", "--epochs", "3"])
    try:
        assert (w.rank, w.rank_source, w.config) == (2, "--rank", job)
        assert rest == ["--epochs", "3"]
    finally:
        w.close()


def test_bad_ranks_are_refused_naming_the_source(job, monkeypatch):
    with pytest.raises(ps.InvalidArgumentError, match="no rank given"):
        ps.Worker(job)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "seven")
    with pytest.raises(ps.InvalidArgumentError, match="OMPI_COMM_WORLD_RANK"):
        ps.Worker(job)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "5")
    with pytest.raises(ps.InvalidArgumentError, match="below the offset 2"):
        ps.Worker(job)
    monkeypatch.delenv("OMPI_COMM_WORLD_RANK")
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "3")
    with pytest.raises(ps.InvalidArgumentError, match="out of range"):
        ps.Worker(job)
    with pytest.raises(ps.InvalidArgumentError, match="either --rank or --rank-from-hostname"):
        ps.Worker(job, 1, rank_from_hostname=True)


def test_rank_from_the_host_name_only_when_asked(job, monkeypatch):
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "0")
    assert rank_of(job)[0] == 0
    ordinal = re.search(r"-(\d+)$", socket.gethostname())
    if ordinal and int(ordinal.group(1)) < 3:
        assert rank_of(job, rank_from_hostname=True)[0] == int(ordinal.group(1))
    else:
        with pytest.raises(ps.InvalidArgumentError, match=re.escape(socket.gethostname())):
            ps.Worker(job, rank_from_hostname=True)
