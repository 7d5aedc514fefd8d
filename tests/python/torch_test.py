"""CPU torch tensors through the ps module with no copy, against real
ps_server processes on loopback (conftest.py)."""

import subprocess
import sys

import numpy as np
import pytest
import torch

import ps


def test_pull_into_a_tensor_writes_in_place(cluster):
    job = cluster()
    with ps.Worker(job.path, 0) as w:
        t = w.tables["dense"]
        t.push(np.full((10, 3), 5, np.float32))
        out = torch.full((10, 3), -1.0)
        before = out.data_ptr()
        got = t.pull(out=out)
        assert got is out and out.data_ptr() == before
        assert torch.equal(out, torch.full((10, 3), 5.0))
        rows_out = torch.zeros(2, 3)
        got = t.pull(torch.tensor([9, 0]), out=rows_out)
        assert got is rows_out and torch.equal(rows_out, torch.full((2, 3), 5.0))
        out.zero_()
        future = t.pull_async(out=out)
        assert future.wait() is out and out.data_ptr() == before and future.done()
        assert torch.equal(out, torch.full((10, 3), 5.0))


def test_a_pull_by_id_tensor_returns_a_tensor_over_the_pulled_memory(cluster):
    job = cluster()
    with ps.Worker(job.path, 0) as w:
        t = w.tables["dense"]
        t.push(np.arange(30, dtype=np.float32).reshape(10, 3))
        got = t.pull(torch.tensor([2, 7]))
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
        assert torch.equal(got, torch.tensor([[6.0, 7, 8], [21, 22, 23]]))
        assert isinstance(t.pull(), np.ndarray)  # arrays stay arrays


def test_pushed_tensors_sum_exactly(cluster):
    job = cluster()
    with ps.Worker(job.path, 0) as w:
        t = w.tables["dense"]
        t.push(torch.full((10, 3), 2.0))
        t.push_async(torch.arange(30, dtype=torch.float32).reshape(10, 3)).wait()
        grads = torch.ones(10, 3, requires_grad=True)  # sent without autograd
        t.push(grads)
        t.push(torch.tensor([0, 9]), torch.full((2, 3), 100.0))
        w.clock()
        expected = 3 + np.arange(30, dtype=np.float32).reshape(10, 3)
        expected[[0, 9]] += 100
        np.testing.assert_array_equal(t.pull(), expected)


def test_int64_id_tensors_are_read_as_uint64(cluster):
    job = cluster()
    with ps.Worker(job.path, 0) as w:
        t = w.tables["by_id"]
        t.push(torch.tensor([-1, 12345, -1]), torch.tensor([[1.0, 1], [2, 2], [10, 10]]))
        got = t.pull(np.array([2**64 - 1, 12345], np.uint64))
        np.testing.assert_array_equal(got, [[11, 11], [2, 2]])
        np.testing.assert_array_equal(t.pull(torch.tensor([12345])).numpy(), [[2, 2]])


def test_wrong_tensors_raise_naming_expected_and_got(cluster):
    job = cluster(start=False)
    w = ps.Worker(job.path, 0)
    t = w.tables["dense"]
    with pytest.raises(TypeError, match=r"grads: expected a float32 tensor \(torch.float32\), "
                                        r"got torch.float64"):
        t.push(torch.zeros(10, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"grads: expected shape \(10, 3\), got \(3, 10\)"):
        t.push(torch.zeros(3, 10))
    with pytest.raises(ValueError, match=r"out: expected a contiguous tensor, got strides"):
        t.pull(out=torch.zeros(3, 10).t())
    with pytest.raises(TypeError, match=r"ids: expected an int64 tensor .* got torch.int32"):
        t.pull(torch.tensor([1, 2], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"ids: expected one dimension, got shape \(1, 2\)"):
        t.pull(torch.tensor([[1, 2]]))
    with pytest.raises(TypeError, match=r"out: expected a CPU tensor, got a tensor on meta"):
        t.pull(out=torch.zeros(10, 3, device="meta"))
    with pytest.raises(TypeError, match=r"grads: expected a CPU tensor"):
        t.push(torch.tensor([1]), torch.zeros(1, 3, device="meta"))
    w.close()


def test_import_ps_works_without_torch():
    code = "import sys; sys.modules['torch'] = None\nimport ps\nprint('ps ok, ps.torch needs torch')\n"
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert got.returncode == 0 and "ps ok, ps.torch needs torch" in got.stdout, got.stderr
