"""ps.read_checkpoint and ps.load_export against a 2-shard checkpoint
written by the real writer (tests/server/write_test_checkpoint.cc, values
by the formula of tests/util/test_checkpoint.h) and its `ps_ctl export`.
No job runs: both read folders.
"""

import json
import os
import subprocess
import time

import numpy as np
import pytest

import ps
from conftest import BIN_DIR

HASHED = "user ids/v2"
RANGE_TABLES = [("emb", 1000, 8, ["first_moment", "second_moment"]),
                ("w.bias", 10, 1, []),
                ("long", 40000, 1, ["momentum"])]


def run(*argv):
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=120)


@pytest.fixture
def checkpoint(tmp_path):
    """A checkpoint.dir with generations 4 and 8 of 2 shards."""
    ckpt = tmp_path / "ckpt"
    for clock in ("4", "8"):
        r = run(os.path.join(BIN_DIR, "write_test_checkpoint"), str(ckpt), clock, "2")
        assert r.returncode == 0, r.stderr
    return ckpt


def exported(checkpoint, out, *flags):
    r = run(os.path.join(BIN_DIR, "ps_ctl"), "export", "--checkpoint-dir", str(checkpoint),
            "--out", str(out), *flags)
    assert r.returncode == 0, r.stderr
    return r


def expected_range(index, rows, dim, k):
    row = np.arange(rows, dtype=np.float64)[:, None]
    col = np.arange(dim, dtype=np.float64)[None, :]
    return (index * 100000.0 + row * dim + col).astype(np.float32) + np.float32(0.25 * k)


def expected_hashed(ids, k):
    col = np.arange(4, dtype=np.float64)[None, :]
    return ((ids % 65536).astype(np.float64)[:, None] * 8 + col).astype(np.float32) + \
        np.float32(0.25 * k)


def test_read_checkpoint_puts_every_shard_together(checkpoint):
    tables = ps.read_checkpoint(checkpoint)
    assert list(tables) == ["emb", "w.bias", "long", HASHED]
    for index, (name, rows, dim, slots) in enumerate(RANGE_TABLES):
        t = tables[name]
        assert (t.kind, t.rows, t.dim, t.clock) == ("range", rows, dim, 8)
        assert t.ids is None and t.hash_slots is None
        assert t.values.dtype == np.float32 and t.values.shape == (rows, dim)
        np.testing.assert_array_equal(t.values, expected_range(index, rows, dim, 0))
        assert list(t.state) == slots == t.slots
        for k, slot in enumerate(slots, start=1):
            np.testing.assert_array_equal(t.state[slot], expected_range(index, rows, dim, k))
    assert tables["emb"].optimizer == "adam"
    assert tables["emb"].optimizer_settings.startswith("adam lr=0.01")

    h = tables[HASHED]
    assert (h.kind, h.dim, h.hash_slots, h.optimizer) == ("hashed", 4, 64, "ftrl")
    assert h.ids.dtype == np.uint64 and h.ids.shape == (h.rows,)
    assert h.rows > 200
    assert np.all(h.ids[1:] > h.ids[:-1]), "ids are not strictly ascending"
    np.testing.assert_array_equal(h.values, expected_hashed(h.ids, 0))
    assert list(h.state) == ["z", "n"]
    np.testing.assert_array_equal(h.state["z"], expected_hashed(h.ids, 1))
    np.testing.assert_array_equal(h.state["n"], expected_hashed(h.ids, 2))


def test_read_checkpoint_takes_a_clock(checkpoint):
    assert ps.read_checkpoint(checkpoint, clock=4)["emb"].clock == 4
    with pytest.raises(ps.NotFoundError, match="generation 6 is not complete in every shard"):
        ps.read_checkpoint(checkpoint, clock=6)


def test_read_checkpoint_names_what_is_missing(tmp_path, checkpoint):
    with pytest.raises(ps.NotFoundError, match="no such folder") as e:
        ps.read_checkpoint(tmp_path / "nothing")
    assert str(tmp_path / "nothing") in e.value.message
    os.rename(checkpoint / "shard-1", tmp_path / "aside")
    with pytest.raises(ps.NotFoundError, match="shard-1 is missing"):
        ps.read_checkpoint(checkpoint)


def test_load_export_equals_read_checkpoint_bit_for_bit(tmp_path, checkpoint):
    out = tmp_path / "export"
    r = exported(checkpoint, out)
    assert "exported generation 8" in r.stdout
    assert "reading shard 2 of 2" in r.stderr

    read = ps.read_checkpoint(checkpoint)
    for mmap_mode in (None, "r"):
        loaded = ps.load_export(out, mmap_mode=mmap_mode)
        assert list(loaded) == list(read)
        for name, t in read.items():
            e = loaded[name]
            assert (e.kind, e.rows, e.dim, e.slots, e.clock) == (t.kind, t.rows, t.dim, t.slots, 8)
            assert e.values.tobytes() == t.values.tobytes(), name
            for slot in t.slots:
                assert e.state[slot].tobytes() == t.state[slot].tobytes(), (name, slot)
            if t.kind == "hashed":
                assert e.ids.tobytes() == t.ids.tobytes()

    # numpy alone, by the manifest's file names.
    manifest = json.loads((out / "manifest.json").read_text())
    h = next(t for t in manifest["tables"] if t["name"] == HASHED)
    assert h["files"]["ids"] == "user%20ids%2Fv2.ids.npy"
    ids = np.load(out / h["files"]["ids"])
    np.testing.assert_array_equal(ids, read[HASHED].ids)
    np.testing.assert_array_equal(np.load(out / "emb.second_moment.npy"),
                                  read["emb"].state["second_moment"])


def test_ps_ctl_export_refuses_a_folder_with_files(tmp_path, checkpoint):
    out = tmp_path / "export"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    ctl = os.path.join(BIN_DIR, "ps_ctl")
    r = run(ctl, "export", "--checkpoint-dir", str(checkpoint), "--out", str(out))
    assert r.returncode == 1
    assert "--force" in r.stderr and str(out) in r.stderr
    exported(checkpoint, out, "--force", "--clock", "4")
    assert ps.load_export(out)["emb"].clock == 4
    assert (out / "keep.txt").read_text() == "mine"

    r = run(ctl, "export", "--out", str(tmp_path / "x"))
    assert r.returncode == 2 and "--checkpoint-dir" in r.stderr
    r = run(ctl, "export", "--checkpoint-dir", str(tmp_path / "none"), "--out",
            str(tmp_path / "y"))
    assert r.returncode == 1 and "no such folder" in r.stderr


def test_load_export_refuses_what_is_not_a_finished_export(tmp_path, checkpoint):
    with pytest.raises(FileNotFoundError, match="not a finished export"):
        ps.load_export(tmp_path)
    out = tmp_path / "export"
    exported(checkpoint, out)
    np.save(out / "emb.values.npy", np.zeros((3, 8), np.float32))
    with pytest.raises(ValueError, match="emb.values.npy: float32 \\(3, 8\\)"):
        ps.load_export(out)


def test_a_running_jobs_checkpoint_reads_back_as_the_worker_pulled_it(cluster, tmp_path):
    """Two real ps_server processes write generations every 2 clocks while
    one worker pushes integers (add: exact sums); generation 4 read with
    read_checkpoint and exported with `ps_ctl export --config` holds what
    the worker pulls after clock 4, bit for bit."""
    ckpt = tmp_path / "job_ckpt"
    job = cluster(servers=2, workers=1,
                  extra="checkpoint: { dir: %s, every_clocks: 2, sync: false }\n" % ckpt)
    ids = np.array([3, 17, 2**40 + 5, 2**63 + 11, 123456789], dtype=np.uint64)
    with ps.Worker(job.path, 0) as w:
        dense, by_id = w.tables["dense"], w.tables["by_id"]
        initial = dense.pull()
        for clock in range(4):
            dense.push(np.full((10, 3), clock + 1, np.float32))
            by_id.push(ids[clock:], np.arange(2 * len(ids[clock:]), dtype=np.float32)
                       .reshape(-1, 2) + clock)
            w.clock()
        pulled_dense = dense.pull()
        pulled_rows = by_id.pull(np.sort(ids))
        np.testing.assert_array_equal(pulled_dense, initial + 10)  # 1 + 2 + 3 + 4
        gens = [ckpt / ("shard-%d" % s) / "gen-4" for s in range(2)]
        deadline = time.monotonic() + 30
        while not all(g.is_dir() for g in gens) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(g.is_dir() for g in gens), "no generation 4 in 30 s:\n" + job.server_logs()

    tables = ps.read_checkpoint(ckpt, clock=4)
    assert tables["dense"].values.tobytes() == pulled_dense.tobytes()
    h = tables["by_id"]
    assert h.kind == "hashed" and h.ids.tolist() == sorted(ids.tolist())
    assert h.values.tobytes() == pulled_rows.tobytes()

    out = tmp_path / "export"
    r = run(os.path.join(BIN_DIR, "ps_ctl"), "export", "--config", job.path, "--clock", "4",
            "--out", str(out))
    assert r.returncode == 0, r.stderr
    loaded = ps.load_export(out)
    assert loaded["dense"].values.tobytes() == pulled_dense.tobytes()
    assert loaded["by_id"].ids.tobytes() == h.ids.tobytes()
    assert loaded["by_id"].values.tobytes() == pulled_rows.tobytes()
