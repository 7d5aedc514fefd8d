"""The Python module's calls and their errors, against real ps_server
processes on loopback (conftest.py): pulls and pushes of whole tables and
of rows (range and hashed), out= written in place, futures, the GIL
released while a pull waits for another worker under bsp, and each kind
of error with its code and whole message."""

import threading
import time

import numpy as np
import pytest

import ps


def dense_of(value):
    return np.full((10, 3), value, dtype=np.float32)


def address(a):
    """Where an array's memory starts."""
    return a.__array_interface__["data"][0]


def test_job_tables_and_rank(cluster):
    job = cluster(start=False)
    w = ps.Worker(job.path, 0)
    assert (w.rank, w.rank_source, w.num_workers, w.num_servers) == (0, "--rank", 1, 2)
    assert w.config == job.path and not w.joined and not w.closed
    assert list(w.tables) == ["dense", "by_id"]
    dense, by_id = w.tables["dense"], w.tables["by_id"]
    assert (dense.name, dense.id, dense.kind, dense.rows, dense.dim, dense.shape) == \
        ("dense", 0, "range", 10, 3, (10, 3))
    assert (by_id.kind, by_id.rows, by_id.shape) == ("hashed", None, (None, 2))
    assert (dense.wire_pull, dense.wire_push) == ("fp32", "fp32")
    assert repr(dense) == "<ps.Table dense range rows=10 dim=3 wire=fp32/fp32>"
    with pytest.raises(KeyError):
        w.tables["nope"]
    w.close()
    assert w.closed


def test_dense_push_and_pull_sum_exactly(cluster):
    job = cluster()
    with ps.Worker(job.path, 0) as w:
        assert w.joined and w.current_clock == 0
        t = w.tables["dense"]
        np.testing.assert_array_equal(t.pull(), dense_of(0))
        t.push(dense_of(2))
        t.push(np.arange(30, dtype=np.float32).reshape(10, 3))
        w.clock()
        assert w.current_clock == 1
        got = t.pull()
        assert got.dtype == np.float32 and got.shape == (10, 3) and got.flags.owndata
        np.testing.assert_array_equal(got, 2 + np.arange(30, dtype=np.float32).reshape(10, 3))
    assert w.closed and not w.joined


def test_pull_into_out_writes_in_place(cluster):
    job = cluster()
    with ps.Worker(job.path, 0) as w:
        t = w.tables["dense"]
        t.push(dense_of(5))
        out = np.full((10, 3), -1, dtype=np.float32)
        before = address(out)
        got = t.pull(out=out)
        assert got is out and address(out) == before and np.shares_memory(got, out)
        np.testing.assert_array_equal(out, dense_of(5))
        rows_out = np.zeros((3, 3), dtype=np.float32)
        got = t.pull(np.array([9, 0, 9], dtype=np.uint64), out=rows_out)
        assert got is rows_out and np.shares_memory(got, rows_out)
        np.testing.assert_array_equal(rows_out, np.full((3, 3), 5, np.float32))


def test_rows_of_a_range_table(cluster):
    job = cluster()
    with ps.Worker(job.path, 0) as w:
        t = w.tables["dense"]
        ids = np.array([7, 2], dtype=np.uint64)
        t.push(ids, np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32))
        np.testing.assert_array_equal(
            t.pull(np.array([2, 7, 3], dtype=np.uint64)),
            np.array([[4, 5, 6], [1, 2, 3], [0, 0, 0]], dtype=np.float32))
        empty = t.pull(np.array([], dtype=np.uint64))
        assert empty.shape == (0, 3)


def test_any_uint64_id_of_a_hashed_table(cluster):
    job = cluster()
    with ps.Worker(job.path, 0) as w:
        t = w.tables["by_id"]
        ids = np.array([2**64 - 1, 12345678901234567, 2**64 - 1], dtype=np.uint64)
        t.push(ids, np.array([[1, 1], [2, 2], [10, 10]], dtype=np.float32))
        got = t.pull(np.array([12345678901234567, 2**64 - 1, 5], dtype=np.uint64))
        np.testing.assert_array_equal(got, [[2, 2], [11, 11], [0, 0]])


def test_wrong_arrays_raise_naming_expected_and_got(cluster):
    job = cluster(start=False)
    w = ps.Worker(job.path, 0)
    t = w.tables["dense"]
    with pytest.raises(TypeError, match=r"grads: expected a float32 array.*got float64"):
        t.push(np.zeros((10, 3)))
    with pytest.raises(ValueError, match=r"grads: expected shape \(10, 3\), got \(3, 10\)"):
        t.push(np.zeros((3, 10), np.float32))
    with pytest.raises(ValueError, match=r"out: expected shape \(2, 3\), got \(6,\)"):
        t.pull(np.array([1, 2], np.uint64), out=np.zeros(6, np.float32))
    with pytest.raises(ValueError, match=r"out: expected a C-contiguous array, got strides"):
        t.pull(out=np.zeros((3, 10), np.float32).T)
    read_only = np.zeros((10, 3), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match=r"out: expected a writable array"):
        t.pull(out=read_only)
    with pytest.raises(TypeError, match=r"ids: expected a one-dimensional uint64 array.*got int64"):
        t.pull(np.array([1, 2]))
    with pytest.raises(TypeError, match=r"ids: expected .* got list"):
        t.pull([1, 2])
    with pytest.raises(ValueError, match=r"ids: expected one dimension, got shape \(1, 2\)"):
        t.pull(np.array([[1, 2]], np.uint64))
    with pytest.raises(ValueError, match=r"ids: expected a contiguous array"):
        t.pull(np.arange(4, dtype=np.uint64)[::2])
    w.close()


def test_errors_carry_the_status_code_and_whole_message(cluster):
    job = cluster()
    with ps.Worker(job.path, 0) as w:
        dense, by_id = w.tables["dense"], w.tables["by_id"]
        with pytest.raises(ps.InvalidArgumentError) as e:
            dense.pull(np.array([3, 10], np.uint64))
        assert isinstance(e.value, ps.Error) and isinstance(e.value, ValueError)
        assert (e.value.code, e.value.code_name, e.value.retryable) == (3, "InvalidArgument", False)
        assert str(e.value) == "InvalidArgument: " + e.value.message
        assert "10" in e.value.message and "dense" in e.value.message
        with pytest.raises(ps.InvalidArgumentError, match="hashed"):
            by_id.pull()
        with pytest.raises(ps.FailedPreconditionError, match="joined the job already"):
            w.join()
    with pytest.raises(ps.FailedPreconditionError, match=r"pull\(\): worker 0 is closed"):
        dense.pull()
    with pytest.raises(ps.FailedPreconditionError, match="current_clock"):
        w.current_clock


def test_a_bad_job_file_names_file_path_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text('cluster:\n  servers: ["127.0.0.1:1"]\n  workers: 1\n'
                   'tables:\n  - name: t\n    rows: 0\n')
    with pytest.raises(ps.InvalidArgumentError) as e:
        ps.Worker(str(bad), 0)
    assert str(bad) in str(e.value) and "tables[0].rows" in str(e.value)
    assert "line 6" in str(e.value)
    with pytest.raises(ps.NotFoundError, match="no-such.yaml") as e:
        ps.Worker(str(tmp_path / "no-such.yaml"), 0)
    assert e.value.code == 5


def test_a_rank_outside_the_job_is_refused(cluster):
    job = cluster(start=False)
    with pytest.raises(ps.InvalidArgumentError, match=r"rank 1 \(from --rank\) is out of range"):
        ps.Worker(job.path, 1)


def test_join_names_the_servers_that_did_not_answer(cluster):
    job = cluster(servers=1, start=False, extra="rendezvous: { timeout_ms: 300 }\n")
    w = ps.Worker(job.path, 0)
    with pytest.raises(ps.DeadlineExceededError) as e:
        w.join()
    assert isinstance(e.value, TimeoutError) and e.value.retryable
    assert "127.0.0.1:" in str(e.value)
    w.close()


def test_futures(cluster):
    job = cluster()
    with ps.Worker(job.path, 0) as w:
        t = w.tables["dense"]
        grads = dense_of(3)
        pushed = t.push_async(grads)
        assert pushed.wait() is None and pushed.done()
        assert pushed.wait() is None  # again: the same result
        clocked = w.clock_async()
        assert w.current_clock == 1  # at once: later pulls carry the next clock
        out = np.zeros((10, 3), np.float32)
        pulled = t.pull_async(out=out)
        deadline = time.monotonic() + 10
        while not pulled.done() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert pulled.done() and clocked.done()
        assert pulled.wait() is out
        np.testing.assert_array_equal(out, dense_of(3))
        assert clocked.wait() is None
        with pytest.raises(ps.InvalidArgumentError, match="99"):
            t.pull_async(np.array([99], np.uint64))  # refused before anything is sent
        # A future dropped unwaited: its arrays live on until close() waits for it.
        t.pull_async(np.array([1], np.uint64))
    assert w.closed


def test_push_batch_issues_pushes_to_several_tables_as_one_call(cluster):
    job = cluster()
    with ps.Worker(job.path, 0) as w:
        dense, by_id = w.tables["dense"], w.tables["by_id"]
        assert dense.worker is w
        ids = np.array([7, 2**64 - 1], np.uint64)
        w.push_batch([(dense, dense_of(1)), (by_id, ids, np.full((2, 2), 3, np.float32)),
                      (dense, np.array([9], np.uint64), np.full((1, 3), 10, np.float32))])
        future = w.push_batch_async([(dense, dense_of(2)), (by_id, ids[:1], np.ones((1, 2),
                                                                                    np.float32))])
        assert future.wait() is None and future.done()
        assert w.push_batch_async([]).wait() is None
        w.clock()
        expected = dense_of(3)
        expected[9] += 10
        np.testing.assert_array_equal(dense.pull(), expected)
        np.testing.assert_array_equal(by_id.pull(ids), [[4, 4], [3, 3]])

        # Wrong arguments name their push, and nothing is sent.
        with pytest.raises(ValueError, match=r"pushes\[1\]\.grads: expected shape \(10, 3\), "
                                             r"got \(3, 10\)"):
            w.push_batch([(dense, dense_of(100)), (dense, np.zeros((3, 10), np.float32))])
        with pytest.raises(TypeError, match=r"pushes\[0\]\.ids: expected a one-dimensional "
                                            r"uint64 array"):
            w.push_batch([(by_id, np.array([1]), np.ones((1, 2), np.float32))])
        with pytest.raises(TypeError, match=r"pushes\[0\]: expected a \(table, grads\) or "
                                            r"\(table, ids, grads\) tuple, got list"):
            w.push_batch([[dense, dense_of(100)]])
        with pytest.raises(TypeError, match=r"pushes\[0\]: expected a ps.Table first, got str"):
            w.push_batch([("dense", dense_of(100))])
        other = ps.Worker(job.path, 0)
        with pytest.raises(ValueError, match=r"pushes\[0\]: table 'dense' is a table of "
                                             r"another worker"):
            w.push_batch([(other.tables["dense"], dense_of(100))])
        other.close()
        np.testing.assert_array_equal(dense.pull(), expected)

        # A push the client refuses: those issued before it go on.
        with pytest.raises(ps.InvalidArgumentError, match="99"):
            w.push_batch([(dense, dense_of(1)),
                          (dense, np.array([99], np.uint64), np.ones((1, 3), np.float32))])
        w.clock()
        np.testing.assert_array_equal(dense.pull(), expected + 1)


def test_the_gil_is_released_while_a_pull_waits_for_another_worker(cluster):
    job = cluster(workers=2)
    with ps.Worker(job.path, 0) as w0, ps.Worker(job.path, 1) as w1:
        t0, t1 = w0.tables["dense"], w1.tables["dense"]
        t0.push(dense_of(1))
        w0.clock()
        pulled = {}

        def pull():
            pulled["values"] = t0.pull()

        puller = threading.Thread(target=pull)
        puller.start()
        try:
            # Under bsp worker 0's pull at clock 1 waits until worker 1
            # finished clock 0. This thread runs meanwhile only if the pull
            # let go of the GIL.
            spins = 0
            until = time.monotonic() + 0.5
            while time.monotonic() < until:
                spins += 1
            assert puller.is_alive() and "values" not in pulled, "the pull did not wait"
            assert spins > 1000
            # The same worker takes another call while its pull waits.
            pending = t0.pull_async()
            assert not pending.done()
            t1.push(dense_of(2))
            w1.clock()
        finally:
            puller.join(15)
        assert not puller.is_alive()
        np.testing.assert_array_equal(pulled["values"], dense_of(3))
        np.testing.assert_array_equal(pending.wait(), dense_of(3))
