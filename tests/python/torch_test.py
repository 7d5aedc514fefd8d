"""CPU torch tensors through the ps module with no copy, and ps.torch:
tables written from a module, checked against the job, and a module's
parameters trained through real ps_server processes on loopback
(conftest.py): under bsp matching a one-process PyTorch run on the same
batches, under ssp and asp lowering the loss."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import ps
import ps.torch
from conftest import run_python_workers

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_train_worker as trainer  # noqa: E402


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
    with pytest.raises(TypeError, match=r"out: expected a CPU or CUDA tensor, got a tensor on "
                                        r"meta \(move it with out.cpu\(\)"):
        t.pull(out=torch.zeros(10, 3, device="meta"))
    with pytest.raises(TypeError, match=r"grads: expected a CPU or CUDA tensor, got a tensor on "
                                        r"meta"):
        t.push(torch.tensor([1]), torch.zeros(1, 3, device="meta"))
    with pytest.raises(TypeError, match=r"ids: expected a CPU or CUDA tensor, got a tensor on "
                                        r"meta"):
        t.pull(torch.zeros(2, dtype=torch.int64, device="meta"))
    w.close()


def test_import_ps_works_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import ps\n"
            "try:\n    import ps.torch\nexcept ImportError:\n    print('ps ok, ps.torch needs torch')\n")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert got.returncode == 0 and "ps ok, ps.torch needs torch" in got.stdout, got.stderr


def small_model():
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))


def test_tables_for_writes_a_table_per_parameter_that_the_job_file_takes(cluster):
    model = small_model()
    text = ps.torch.tables_for(model, optimizer={"type": "adam", "lr": 0.01})
    job = cluster(start=False, tables=text)
    w = ps.Worker(job.path, 0)
    assert list(w.tables) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert [t.shape for t in w.tables.values()] == [(3, 4), (3, 1), (1, 3), (1, 1)]
    assert "optimizer: { type: adam, lr: 0.01 }" in text
    assert "init: { type: uniform, scale: 0.5, seed: 1 }" in text  # 1/sqrt(fan_in 4)
    tables = ps.torch.check_tables(w, model)
    assert tables["2.weight"] is not None and tables["2.weight"].name == "2.weight"
    wider = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.ReLU(), torch.nn.Linear(5, 1))
    with pytest.raises(ValueError, match=r"parameter '0.weight' \(shape \(5, 4\)\) needs table "
                                         r"'0.weight' .* rows: 5 and dim: 4, got rows: 3, dim: 4"):
        ps.torch.check_tables(w, wider)
    deeper = torch.nn.Sequential(*small_model(), torch.nn.Linear(1, 1))
    with pytest.raises(ValueError, match=r"parameter '3.weight' \(shape \(1, 1\)\) has no "
                                         r"table '3.weight' in .*job.yaml"):
        ps.torch.ParameterServer(w, deeper)
    w.close()


def test_parameter_server_pulls_into_the_parameters_in_place(cluster):
    model = small_model()
    job = cluster(tables=ps.torch.tables_for(model, init={"type": "constant", "value": 0.25}))
    with ps.Worker(job.path, 0) as w:
        pointers = [p.data_ptr() for p in model.parameters()]
        server = ps.torch.ParameterServer(w, model)
        assert [p.data_ptr() for p in model.parameters()] == pointers
        for p in model.parameters():
            assert torch.equal(p.detach(), torch.full_like(p, 0.25))
        model(torch.ones(2, 4)).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        server.step()  # sgd, lr 0.1
        assert [p.data_ptr() for p in model.parameters()] == pointers
        for name, p in model.named_parameters():
            expected = torch.full_like(p, 0.25) - torch.tensor(0.1) * grads[name]
            torch.testing.assert_close(p.detach(), expected, rtol=0, atol=1e-6)
        with pytest.raises(TypeError, match=r"parameter '0.weight': expected a float32 tensor"):
            ps.torch.ParameterServer(w, small_model().double())


def test_overlap_pushes_each_gradient_during_the_backward_pass(cluster):
    model = small_model()
    job = cluster(tables=ps.torch.tables_for(model, optimizer={"type": "add"},
                                             init={"type": "constant", "value": 0.0}))
    with ps.Worker(job.path, 0) as w:
        server = ps.torch.ParameterServer(w, model, overlap=True)
        with torch.no_grad():  # zeros would give zero gradients
            for p in model.parameters():
                p.fill_(0.5)
        model(torch.ones(2, 4)).sum().backward()
        in_flight = server._in_flight
        assert sorted(in_flight) == ["0.bias", "0.weight", "2.bias", "2.weight"]
        for future in in_flight.values():
            future.wait()
        for name, p in model.named_parameters():  # pushed already, summed by `add`
            np.testing.assert_array_equal(w.tables[name].pull().reshape(p.shape),
                                          p.grad.numpy())
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        server.step()  # waits for those pushes and pushes nothing again
        for name, p in model.named_parameters():
            assert torch.equal(p.detach(), grads[name])
        model(torch.ones(1, 4)).sum().backward()
        with pytest.raises(RuntimeError, match=r"parameter '2\.(bias|weight)': a second gradient "
                                               r"before step\(\)"):
            model(torch.ones(1, 4)).sum().backward()
        server.close()
        model(torch.ones(1, 4)).sum().backward()  # no hooks any more


@pytest.mark.parametrize("overlap", [False, True], ids=["push_in_step", "overlap"])
def test_two_workers_train_as_one_pytorch_process_under_bsp(cluster, tmp_path, overlap):
    job = cluster(servers=2, workers=2,
                  tables=ps.torch.tables_for(trainer.make_model(),
                                             optimizer={"type": "sgd", "lr": trainer.LR}))
    prefix = str(tmp_path / "params")
    for r, (code, out) in enumerate(run_python_workers(
            "torch_train_worker.py", job.path, 2,
            ["--out", prefix] + (["--overlap"] if overlap else []))):
        assert code == 0 and "trained" in out, "worker %d (exit %s):\n%s" % (r, code, out)
    results = [torch.load("%s%d.pt" % (prefix, r)) for r in range(2)]

    # One process, the whole batch of each step, plain SGD, from the
    # servers' initial values.
    model = trainer.make_model()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(results[0]["initial"][name])
    x, y = trainer.make_data()
    for step in range(trainer.STEPS):
        xb, yb = trainer.batch(x, y, step)
        model.zero_grad()
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= trainer.LR * p.grad
    for r, result in enumerate(results):
        for name, p in model.named_parameters():
            assert torch.equal(result["initial"][name], results[0]["initial"][name])
            assert not torch.equal(result["final"][name], result["initial"][name]), name
            torch.testing.assert_close(result["final"][name], p.detach(), rtol=0, atol=1e-5,
                                       msg=lambda m: "worker %d, %s: %s" % (r, name, m))


@pytest.mark.parametrize("consistency", ["ssp, staleness: 2", "asp"], ids=["ssp", "asp"])
def test_two_workers_train_under_ssp_and_asp(cluster, tmp_path, consistency):
    job = cluster(servers=2, workers=2, consistency=consistency,
                  tables=ps.torch.tables_for(trainer.make_model(),
                                             optimizer={"type": "sgd", "lr": trainer.LR}))
    prefix = str(tmp_path / "params")
    for r, (code, out) in enumerate(run_python_workers(
            "torch_train_worker.py", job.path, 2, ["--out", prefix, "--overlap"])):
        assert code == 0 and "trained" in out, "worker %d (exit %s):\n%s" % (r, code, out)
    x, y = trainer.make_data()
    model = trainer.make_model()

    def loss(params):
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(params[name])
            return torch.nn.functional.mse_loss(model(x), y).item()

    results = [torch.load("%s%d.pt" % (prefix, r)) for r in range(2)]
    # Without a bsp barrier a worker that starts late reads values the
    # other already trained: the servers' init is the worse of the two.
    start = max(loss(result["initial"]) for result in results)
    for r, result in enumerate(results):
        assert loss(result["final"]) < 0.9 * start, "worker %d: loss %s -> %s" % (
            r, start, loss(result["final"]))


def test_embedding_pulls_rows_and_pushes_the_gradients_of_torch_embedding(cluster):
    job = cluster()  # dense: 10 x 3, by_id: hashed, dim 2; both sum what is pushed
    with ps.Worker(job.path, 0) as w:
        values = np.arange(30, dtype=np.float32).reshape(10, 3)
        w.tables["dense"].push(values)
        embedding = ps.torch.Embedding(w, "dense")
        reference = torch.nn.Embedding(10, 3)
        with torch.no_grad():
            reference.weight.copy_(torch.from_numpy(values))
        ids = torch.tensor([[1, 2, 1], [9, 0, 1]])
        out = embedding(ids)
        assert out.shape == (2, 3, 3) and torch.equal(out, reference(ids))
        weights = torch.arange(18, dtype=torch.float32).reshape(2, 3, 3)
        (embedding(ids) * weights).sum().backward()
        (reference(ids) * weights).sum().backward()
        embedding.wait()
        pushed = w.tables["dense"].pull() - values  # `add`: the pushed gradients
        np.testing.assert_array_equal(pushed, reference.weight.grad.numpy())

        by_id = ps.torch.Embedding(w, "by_id")
        ids = torch.tensor([-1, 5, -1])
        (by_id(ids) * torch.tensor([[1.0], [2], [3]])).sum().backward()
        by_id.wait()
        np.testing.assert_array_equal(w.tables["by_id"].pull(np.array([2**64 - 1, 5], np.uint64)),
                                      [[4, 4], [2, 2]])
        with torch.no_grad():
            assert torch.equal(by_id(torch.tensor([5])), torch.tensor([[2.0, 2]]))
        assert by_id._in_flight == []  # no_grad: nothing to push
        with pytest.raises(ValueError, match=r"Embedding: .*job.yaml has no table 'nope'"):
            ps.torch.Embedding(w, "nope")


def test_parameter_server_waits_for_the_pushes_of_its_embeddings(cluster):
    head = torch.nn.Sequential(torch.nn.Identity(), torch.nn.Flatten(), torch.nn.Linear(6, 1))
    tables = ps.torch.tables_for(head) + ("  - name: emb\n    rows: 10\n    dim: 3\n"
                                          "    init: { type: constant, value: 0.5 }\n"
                                          "    optimizer: { type: sgd, lr: 0.1 }\n")
    job = cluster(tables=tables)
    with ps.Worker(job.path, 0) as w:
        embedding = ps.torch.Embedding(w, "emb")
        model = torch.nn.Sequential(embedding, *head[1:])
        server = ps.torch.ParameterServer(w, model)
        assert list(server.parameters()) == ["2.weight", "2.bias"]
        ids = torch.tensor([[3, 7]])
        rows = embedding(ids)
        rows.retain_grad()
        model[2](model[1](rows)).sum().backward()
        server.step()
        assert embedding._in_flight == []
        got = w.tables["emb"].pull()
        expected = np.full((10, 3), 0.5, np.float32)
        expected[[3, 7]] -= np.float32(0.1) * rows.grad[0].numpy()
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-7)


@pytest.fixture
def staged_cpu(monkeypatch):
    """CPU tensors through the staging path of CUDA tensors (ps/_tensors.py):
    its buffers, reuse and waits run without a GPU (pinned memory needs
    CUDA, so the buffers are plain host memory here)."""
    monkeypatch.setattr(ps._tensors, "STAGED_DEVICES", {"cuda", "cpu"})


def staging_buffer(table, direction):
    return table.worker._staging[(table.id, direction)].buffer


def test_staged_pulls_and_pushes_reuse_one_buffer_per_table(cluster, staged_cpu):
    job = cluster()
    with ps.Worker(job.path, 0) as w:
        t = w.tables["dense"]
        values = torch.arange(30, dtype=torch.float32).reshape(10, 3)
        t.push(values)
        pushed = staging_buffer(t, "push")
        assert pushed.data_ptr() != values.data_ptr()  # sent from the buffer, a copy
        out = torch.zeros(10, 3)
        before = out.data_ptr()
        assert t.pull(out=out) is out and out.data_ptr() == before
        assert torch.equal(out, values)
        buffer = staging_buffer(t, "pull")
        future = t.pull_async(out=torch.zeros(10, 3))
        assert torch.equal(future.wait(), values) and future.done()
        assert staging_buffer(t, "pull").data_ptr() == buffer.data_ptr()  # reused

        # The source may change once push_async returns: the buffer holds a
        # copy. A second push of the table waits for the first's buffer.
        grads = torch.ones(10, 3)
        first = t.push_async(grads)
        grads.fill_(1000)
        second = t.push_async(torch.full((10, 3), 2.0))
        assert first.done()
        first.wait()
        second.wait()
        assert staging_buffer(t, "push").data_ptr() == pushed.data_ptr()
        w.clock()
        assert torch.equal(t.pull(out=torch.empty(10, 3)), values + 3)

        # Rows by id land in a new tensor on the ids' device; the buffer
        # grows to the largest call and serves smaller ones.
        rows = t.pull(torch.tensor([9, 0]))
        assert isinstance(rows, torch.Tensor) and torch.equal(rows, (values + 3)[[9, 0]])
        t.pull(torch.arange(10))
        grown = staging_buffer(t, "pull")
        assert grown.numel() == 30
        assert torch.equal(t.pull(torch.tensor([4])), (values + 3)[[4]])
        assert staging_buffer(t, "pull").data_ptr() == grown.data_ptr()

        by_id = w.tables["by_id"]
        w.push_batch([(t, torch.ones(10, 3)),
                      (by_id, torch.tensor([-1, 5]), torch.tensor([[1.0, 2], [3, 4]]))])
        w.clock()
        assert torch.equal(t.pull(out=torch.empty(10, 3)), values + 4)
        assert torch.equal(by_id.pull(torch.tensor([5, -1])), torch.tensor([[3.0, 4], [1, 2]]))
        with pytest.raises(ValueError, match=r"out: expected shape \(10, 3\), got \(3, 10\)"):
            t.pull(out=torch.zeros(3, 10))
