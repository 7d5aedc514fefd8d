"""CPU torch tensors through the ps module with no copy, and ps.torch:
tables written from a module, checked against the job, and a module's
parameters trained through real ps_server processes on loopback
(conftest.py): under bsp matching a one-process PyTorch run on the same
batches (an MLP; an embedding model under bsp with aggregate), under ssp
and asp lowering the loss."""

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


def test_a_tensor_whose_memory_changed_is_written_where_it_is_now(cluster):
    job = cluster()
    with ps.Worker(job.path, 0) as w:
        t = w.tables["dense"]
        t.push(np.full((10, 3), 5, np.float32))
        out = torch.zeros(10, 3)
        t.pull(out=out)
        views = len(ps._tensors._views)
        t.pull(out=out)  # the same tensor: its numpy view is kept
        assert len(ps._tensors._views) == views
        out.set_(torch.zeros(10, 3))  # other memory
        t.pull(out=out)
        assert torch.equal(out, torch.full((10, 3), 5.0))
        rows = torch.zeros(2, 3)
        t.pull(torch.tensor([1, 2]), out=rows)
        rows.set_(torch.zeros(5, 3))  # other memory and shape
        t.pull(torch.tensor([1, 2, 3, 4, 5]), out=rows)
        assert torch.equal(rows, torch.full((5, 3), 5.0))
        # Strides changed in place: checked again, and refused.
        rows = torch.zeros(10, 3)
        t.pull(out=rows)
        rows.as_strided_((10, 3), (1, 10))
        with pytest.raises(ValueError, match=r"out: expected a contiguous tensor"):
            t.pull(out=rows)
        del out, rows
        # The views went with their tensors.
        assert all(entry[0]() is not None for entry in ps._tensors._views.values())
        assert len(ps._tensors._views) < views


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
        server = ps.torch.ParameterServer(w, model, overlap=True, bucket_mb=0)
        with torch.no_grad():  # zeros would give zero gradients
            for p in model.parameters():
                p.fill_(0.5)
        model(torch.ones(2, 4)).sum().backward()
        # A bucket a parameter (bucket_mb=0): each pushed from its hook.
        assert server.buckets == [["2.bias"], ["2.weight"], ["0.bias"], ["0.weight"]]
        in_flight = [b.future for b in server._buckets]
        assert all(future is not None for future in in_flight)
        for future in in_flight:
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


def test_buckets_take_parameters_in_reverse_order_up_to_bucket_mb():
    mib = 2**20
    assert ps.torch.make_buckets([], 1) == []
    assert ps.torch.make_buckets([4, 12, 12, 48], 0) == [[3], [2], [1], [0]]
    assert ps.torch.make_buckets([4, 12, 12, 48], 1) == [[3, 2, 1, 0]]
    assert ps.torch.make_buckets([48, 12, 12, 4], 28 / mib) == [[3, 2, 1], [0]]
    # A parameter larger than a bucket is a bucket of its own.
    assert ps.torch.make_buckets([mib, 3 * mib, mib // 2, mib // 2], 1) == [[3, 2], [1], [0]]
    with pytest.raises(ValueError, match=r"bucket_mb: expected a size >= 0 \(MiB\), got -1"):
        ps.torch.make_buckets([4], -1)


def added_tables(model):
    """Tables of `model` that sum what is pushed (`add`), starting at 0."""
    return ps.torch.tables_for(model, optimizer={"type": "add"},
                               init={"type": "constant", "value": 0.0})


def server_values(w, model):
    """{parameter name: its table's values on the servers, shaped as the parameter}."""
    return {n: torch.from_numpy(w.tables[n].pull()).reshape(p.shape)
            for n, p in model.named_parameters()}


def test_a_bucket_is_pushed_once_all_its_gradients_are_in_during_the_backward_pass(cluster):
    model = small_model()
    job = cluster(tables=added_tables(model))
    with ps.Worker(job.path, 0) as w:
        # 16 bytes: the output layer's bias and weight share a bucket.
        server = ps.torch.ParameterServer(w, model, overlap=True, bucket_mb=16 / 2**20)
        assert server.buckets == [["2.bias", "2.weight"], ["0.bias"], ["0.weight"]]
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(0.5)
        # Hooks after the server's: what each gradient's arrival left sent.
        seen = []
        parameters = dict(model.named_parameters())
        for name in ("2.bias", "2.weight"):
            parameters[name].register_hook(lambda grad, name=name: seen.append(
                (name, [b.future is not None for b in server._buckets])))
        model(torch.ones(2, 4)).sum().backward()
        # The first gradient of the bucket sends nothing; the second sends the
        # bucket, before the first layer's gradients exist.
        assert [sent for _, sent in seen] == [[False, False, False], [True, False, False]]
        assert sorted(name for name, _ in seen) == ["2.bias", "2.weight"]
        assert all(b.future is not None for b in server._buckets)
        server._buckets[0].future.wait()
        got = server_values(w, model)
        for name in ("2.bias", "2.weight"):
            assert torch.equal(got[name], parameters[name].grad)
        server.step()
        for name, p in model.named_parameters():
            assert torch.equal(p.detach(), parameters[name].grad)


class TwoHeads(torch.nn.Module):
    """Two linear heads on the same input: a loss of one gives gradients to
    its parameters alone."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 1)
        self.b = torch.nn.Linear(4, 1)

    def forward(self, x):
        return self.a(x), self.b(x)


def test_a_bucket_is_never_pushed_before_all_its_gradients_are_in(cluster):
    model = TwoHeads()
    job = cluster(tables=added_tables(model))
    x = torch.ones(2, 4)
    with ps.Worker(job.path, 0) as w:
        server = ps.torch.ParameterServer(w, model, overlap=True)  # one bucket of 40 bytes
        assert server.buckets == [["b.bias", "b.weight", "a.bias", "a.weight"]]
        zeros = server_values(w, model)
        model(x)[0].sum().backward()  # a's gradients only
        assert model.a.weight.grad is not None and model.b.weight.grad is None
        assert server._buckets[0].future is None and server._buckets[0].ready == 2
        for name, values in server_values(w, model).items():
            assert torch.equal(values, zeros[name]), name  # nothing sent
        model(x)[1].sum().backward()  # b's: the bucket is complete
        assert server._buckets[0].future is not None
        server._buckets[0].future.wait()
        got = server_values(w, model)
        for name, p in model.named_parameters():
            assert torch.equal(got[name], p.grad), name

        # A pass that leaves a bucket incomplete: step() pushes what it holds.
        server.step()
        server.zero_grad()
        model(x)[0].sum().backward()
        assert server._buckets[0].future is None
        server.step()
        got = server_values(w, model)
        assert torch.equal(got["a.weight"], 2 * torch.full((1, 4), 2.0))
        assert torch.equal(got["b.weight"], torch.full((1, 4), 2.0))
        with pytest.raises(RuntimeError, match=r"parameter 'a\.(bias|weight)': a second "
                                               r"gradient before step\(\)"):
            model(x)[0].sum().backward()
            model(x)[0].sum().backward()
        server.close()  # pushes the incomplete bucket
        got = server_values(w, model)
        assert torch.equal(got["a.weight"], 3 * torch.full((1, 4), 2.0))


@pytest.mark.parametrize("bucket_mb", [0, 28 / 2**20, ps.torch.DEFAULT_BUCKET_MB],
                         ids=["bucket_per_parameter", "two_buckets", "default"])
def test_bucketed_pushes_train_to_the_same_bits_as_unbucketed_ones(cluster, bucket_mb):
    """Each table takes one push a step whatever the buckets: the values
    after training equal those of a push per parameter in step() bit for bit."""
    x, y = trainer.make_data()

    def train(job, overlap, bucket_mb):
        model = trainer.make_model()
        with ps.Worker(job.path, 0) as w:
            server = ps.torch.ParameterServer(w, model, overlap=overlap, bucket_mb=bucket_mb)
            for step in range(5):
                xb, yb = trainer.batch(x, y, step)
                server.zero_grad()
                torch.nn.functional.mse_loss(model(xb), yb).backward()
                server.step()
            server.close()
        return {n: p.detach().clone() for n, p in model.named_parameters()}

    tables = ps.torch.tables_for(trainer.make_model(), optimizer={"type": "sgd", "lr": 0.1})
    unbucketed = cluster(tables=tables)
    reference = train(unbucketed, overlap=False, bucket_mb=0)
    unbucketed.stop()
    got = train(cluster(tables=tables), overlap=True, bucket_mb=bucket_mb)
    for name, values in reference.items():
        assert torch.equal(got[name], values), name


@pytest.mark.parametrize("args", [[], ["--overlap"], ["--overlap", "--bucket-mb", "0"],
                                  ["--overlap", "--bucket-mb", repr(100 / 2**20)]],
                         ids=["push_in_step", "overlap", "overlap_bucket_per_parameter",
                              "overlap_three_buckets"])
def test_two_workers_train_as_one_pytorch_process_under_bsp(cluster, tmp_path, args):
    job = cluster(servers=2, workers=2,
                  tables=ps.torch.tables_for(trainer.make_model(),
                                             optimizer={"type": "sgd", "lr": trainer.LR}))
    prefix = str(tmp_path / "params")
    for r, (code, out) in enumerate(run_python_workers(
            "torch_train_worker.py", job.path, 2, ["--out", prefix] + args)):
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


@pytest.mark.parametrize("mode", ["aggregate", "barrier"])
def test_two_workers_train_an_embedding_model_as_one_pytorch_process(cluster, tmp_path, mode):
    """The click model of examples/python/ (a ps.torch.Embedding over a
    hashed table, an MLP on top) trained by 2 workers under bsp ends where
    one PyTorch process with torch.nn.Embedding ends with plain SGD on the
    union of their batches: every step's gradients, the embedding rows'
    summed over repeated ids, are the same.

    aggregate: a shard applies a clock's pushes only once every worker
    finished the clock, so the embedding's pull in a forward pass never
    sees another worker's pushes of the same clock (here the results agree
    to 2e-8). barrier: plain bsp with ParameterServer(barrier=True), worker
    1 slowed down so that worker 0 runs ahead: the embedding pulls in the
    forward pass, and its gradients are held until every worker reached
    step() (without that hold the results were 2e-5 apart, more than atol
    here)."""
    import torch_embedding_worker as emb
    tables = ("  - { name: embeddings, keys: hashed, dim: %d, max_rows: 1000,\n"
              "      init: { type: normal, stddev: 0.3, seed: 5 },\n"
              "      optimizer: { type: sgd, lr: %r } }\n" % (emb.DIM, emb.LR))
    tables += ps.torch.tables_for(emb.make_model(None).mlp, prefix="mlp.",
                                  optimizer={"type": "sgd", "lr": emb.LR}).replace("tables:\n", "")
    job = cluster(servers=2, workers=2,
                  consistency="bsp, aggregate: true" if mode == "aggregate" else "bsp",
                  tables="tables:\n" + tables)
    prefix = str(tmp_path / "params")
    args = ["--out", prefix]
    if mode == "barrier":
        args += ["--barrier", "--sum", "--slow-rank", "1"]
    for r, (code, out) in enumerate(run_python_workers(
            "torch_embedding_worker.py", job.path, 2, args)):
        assert code == 0 and "trained" in out, "worker %d (exit %s):\n%s" % (r, code, out)
    results = [torch.load("%s%d.pt" % (prefix, r)) for r in range(2)]
    ids = results[0]["ids"]
    for result in results:
        assert torch.equal(result["ids"], ids)
        assert torch.equal(result["initial"]["rows"], results[0]["initial"]["rows"])

    # One process: torch.nn.Embedding over the ids made compact, the
    # servers' initial values, the whole batch of each step, plain SGD.
    reference = torch.nn.Embedding(len(ids), emb.DIM)
    model = emb.make_model(reference)
    start = results[0]["initial"]
    with torch.no_grad():
        reference.weight.copy_(start["rows"])
        for name, p in model.mlp.named_parameters():
            p.copy_(start["mlp"]["mlp." + name])
    data = emb.make_data()
    for step in range(emb.STEPS):
        batch_ids, dense, clicks = emb.batch(data, step)
        model.zero_grad()
        torch.nn.functional.binary_cross_entropy_with_logits(
            model(torch.searchsorted(ids, batch_ids), dense), clicks).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= emb.LR * p.grad
    expected = {"rows": reference.weight.detach()}
    expected.update({"mlp." + n: p.detach() for n, p in model.mlp.named_parameters()})
    for r, result in enumerate(results):
        got = {"rows": result["final"]["rows"], **result["final"]["mlp"]}
        assert sorted(got) == sorted(expected)
        for name, value in expected.items():
            initial = start["rows"] if name == "rows" else start["mlp"][name]
            assert not torch.equal(got[name], initial), name
            torch.testing.assert_close(got[name], value, rtol=0, atol=1e-6,
                                       msg=lambda m: "worker %d, %s: %s" % (r, name, m))


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


def test_a_parameter_server_trains_staged_parameters_as_cpu_ones(cluster, staged_cpu):
    model = small_model()
    job = cluster(tables=ps.torch.tables_for(model, init={"type": "constant", "value": 0.25}))
    with ps.Worker(job.path, 0) as w:
        server = ps.torch.ParameterServer(w, model, overlap=True)
        for p in model.parameters():
            assert torch.equal(p.detach(), torch.full_like(p, 0.25))
        model(torch.ones(2, 4)).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        server.step()
        for name, p in model.named_parameters():
            expected = torch.full_like(p, 0.25) - torch.tensor(0.1) * grads[name]
            torch.testing.assert_close(p.detach(), expected, rtol=0, atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no CUDA device (torch.cuda.is_available() is False); the staging "
                           "path runs on the CPU in the tests above")
def test_cuda_tensors_pull_and_push_through_pinned_memory(cluster):
    model = small_model()
    job = cluster(tables=ps.torch.tables_for(model, init={"type": "constant", "value": 0.25}))
    with ps.Worker(job.path, 0) as w:
        t = w.tables["0.weight"]
        out = torch.zeros(3, 4, device="cuda")
        assert t.pull(out=out) is out and torch.equal(out.cpu(), torch.full((3, 4), 0.25))
        assert staging_buffer(t, "pull").is_pinned()
        t.push(torch.ones(3, 4, device="cuda"))
        assert staging_buffer(t, "push").is_pinned()
        w.clock()
        assert torch.equal(t.pull(out=out).cpu(), torch.full((3, 4), 0.25 - 0.1))
        rows = t.pull(torch.tensor([2, 0], device="cuda"))
        assert rows.device.type == "cuda" and rows.shape == (2, 4)

        cuda_model = small_model().cuda()
        server = ps.torch.ParameterServer(w, cuda_model, overlap=True)
        cuda_model(torch.ones(2, 4, device="cuda")).sum().backward()
        grads = {n: p.grad.cpu() for n, p in cuda_model.named_parameters()}
        before = {n: p.detach().cpu() for n, p in cuda_model.named_parameters()}
        server.step()
        for name, p in cuda_model.named_parameters():
            torch.testing.assert_close(p.detach().cpu(), before[name] - 0.1 * grads[name],
                                       rtol=0, atol=1e-6)


def embedding_bag_batches():
    """(input, offsets, per_sample_weights or None) batches of ids 0..9 with
    repeats within and across bags, an empty bag, and 2-D equal bags."""
    return [
        (torch.tensor([1, 2, 1, 9, 0, 1, 1]), torch.tensor([0, 3, 3, 5])),  # bag 1 is empty
        (torch.tensor([4, 4, 4, 2]), torch.tensor([0, 1])),
        (torch.tensor([[3, 1, 3], [1, 8, 8]]), None),
    ]


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_equals_torch_embedding_bag(cluster, mode):
    job = cluster()  # dense: 10 x 3, by_id: hashed, dim 2; both sum what is pushed
    with ps.Worker(job.path, 0) as w:
        values = torch.randn(10, 3, generator=torch.Generator().manual_seed(3))
        w.tables["dense"].push(values)
        bag = ps.torch.EmbeddingBag(w, "dense", mode=mode)
        reference = torch.nn.EmbeddingBag(10, 3, mode=mode)
        with torch.no_grad():
            reference.weight.copy_(values)
        for step, (ids, offsets) in enumerate(embedding_bag_batches()):
            out = bag(ids, offsets)
            expected = reference(ids, offsets)
            assert out.shape == expected.shape
            torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)
            weights = torch.randn(expected.shape, generator=torch.Generator().manual_seed(step))
            reference.zero_grad()
            (out * weights).sum().backward()
            (expected * weights).sum().backward()
            bag.wait()
            # `add`: what the shards hold now minus before is the pushed gradient.
            now = torch.from_numpy(w.tables["dense"].pull())
            torch.testing.assert_close(now - reference.weight.detach(), reference.weight.grad,
                                       rtol=0, atol=1e-5)
            with torch.no_grad():
                reference.weight.copy_(now)  # the next batch reads the new rows
        assert "mode=%r" % mode in repr(bag)


def test_embedding_bag_per_sample_weights_last_offsets_and_hashed_ids(cluster):
    job = cluster()
    with ps.Worker(job.path, 0) as w:
        values = torch.arange(30, dtype=torch.float32).reshape(10, 3)
        w.tables["dense"].push(values)
        bag = ps.torch.EmbeddingBag(w, "dense", mode="sum", include_last_offset=True)
        reference = torch.nn.EmbeddingBag(10, 3, mode="sum", include_last_offset=True)
        with torch.no_grad():
            reference.weight.copy_(values)
        ids, offsets = torch.tensor([5, 5, 0, 7, 5]), torch.tensor([0, 2, 5])
        weights = torch.tensor([0.5, 2.0, -1.0, 3.0, 0.25])
        out = bag(ids, offsets, per_sample_weights=weights)
        expected = reference(ids, offsets, per_sample_weights=weights)
        assert torch.equal(out, expected)
        out.sum().backward()
        expected.sum().backward()
        bag.wait()
        pushed = torch.from_numpy(w.tables["dense"].pull()) - values
        assert torch.equal(pushed, reference.weight.grad)

        # A hashed table: any int64 id (read as uint64), summed as by row.
        by_id = ps.torch.EmbeddingBag(w, "by_id", mode="sum")
        ids = torch.tensor([-1, 2**40, -1, 7])
        out = by_id(ids, torch.tensor([0, 2]))
        assert torch.equal(out, torch.zeros(2, 2))  # zeros: the table's init
        (out * torch.tensor([[1.0, 2], [3, 4]])).sum().backward()
        by_id.wait()
        got = w.tables["by_id"].pull(np.array([2**64 - 1, 2**40, 7], np.uint64))
        np.testing.assert_array_equal(got, [[4, 6], [1, 2], [3, 4]])
        with torch.no_grad():
            assert torch.equal(by_id(torch.tensor([[7, 2**40]])), torch.tensor([[4.0, 6]]))
        assert by_id._in_flight == []
        with pytest.raises(ValueError, match=r"EmbeddingBag 'dense': mode: expected \"sum\", "
                                             r"\"mean\" or \"max\", got 'min'"):
            ps.torch.EmbeddingBag(w, "dense", mode="min")
        with pytest.raises(TypeError, match=r"EmbeddingBag 'dense': expected int64 ids "
                                            r"\(torch.int64\), got torch.int32"):
            bag(torch.tensor([1, 2], dtype=torch.int32), torch.tensor([0]))


class Recommender(torch.nn.Module):
    """Two embedding modules over declared tables and a linear head."""

    def __init__(self, worker=None):
        super().__init__()
        self.words = ps.torch.Embedding(worker, "words", rows=20, dim=4)
        self.tags = ps.torch.EmbeddingBag(worker, "tags", mode="sum", dim=4, max_rows=1000,
                                          init={"type": "constant", "value": 0.5},
                                          optimizer={"type": "adagrad", "lr": 0.05})
        self.head = torch.nn.Linear(8, 1)

    def forward(self, words, tags, offsets):
        return self.head(torch.cat([self.words(words), self.tags(tags, offsets)], dim=1))


def test_tables_for_writes_the_tables_embedding_modules_declare(cluster):
    text = ps.torch.tables_for(Recommender(), optimizer={"type": "sgd", "lr": 0.1})
    assert 'name: "words"\n    rows: 20\n    dim: 4\n    init: { type: normal, stddev: 1.0, ' \
           'seed: 3 }\n    optimizer: { type: sgd, lr: 0.1 }' in text
    assert 'name: "tags"\n    keys: hashed\n    dim: 4\n    max_rows: 1000\n    init: { type: ' \
           'constant, value: 0.5 }\n    optimizer: { type: adagrad, lr: 0.05 }' in text
    job = cluster(tables=text)
    with ps.Worker(job.path, 0) as w:
        assert list(w.tables) == ["head.weight", "head.bias", "words", "tags"]
        assert (w.tables["words"].kind, w.tables["words"].shape) == ("range", (20, 4))
        assert (w.tables["tags"].kind, w.tables["tags"].dim) == ("hashed", 4)
        model = Recommender()  # declared without a worker
        with pytest.raises(RuntimeError, match=r"Embedding 'words' is not bound to a worker"):
            model(torch.tensor([1]), torch.tensor([3]), torch.tensor([0]))
        server = ps.torch.ParameterServer(w, model)  # binds them
        assert model.words.table.name == "words" and model.tags.table.name == "tags"
        assert list(server.parameters()) == ["head.weight", "head.bias"]
        out = model(torch.tensor([1, 2]), torch.tensor([10**12, 3, 3]), torch.tensor([0, 1]))
        assert out.shape == (2, 1)
        with torch.no_grad():
            assert torch.equal(model.tags(torch.tensor([[5, 6]])), torch.full((1, 4), 1.0))
        out.sum().backward()
        server.step()  # waits for the embeddings' pushes too
        assert model.words._in_flight == [] and model.tags._in_flight == []
        # Bound at construction: the job's tables checked against the declaration.
        assert Recommender(w).words.rows == 20
        with pytest.raises(ValueError, match=r"Embedding: table 'words' of .*job.yaml is "
                                             r"declared rows: 30, dim: 4, got rows: 20"):
            ps.torch.Embedding(w, "words", rows=30, dim=4)
        with pytest.raises(ValueError, match=r"EmbeddingBag: table 'words' of .*job.yaml is "
                                             r"declared keys: hashed, dim: 8, got keys: range, "
                                             r"dim: 4"):
            ps.torch.EmbeddingBag(w, "words", dim=8, max_mb=1)
        undeclared = ps.torch.Embedding(w, "words")
        assert (undeclared.rows, undeclared.dim, undeclared.hashed) == (20, 4, False)


def test_tables_for_refuses_embedding_tables_it_cannot_write():
    def model(*modules):
        return torch.nn.Sequential(*modules)

    with pytest.raises(ValueError, match=r"Embedding 'e': declare dim="):
        ps.torch.tables_for(model(ps.torch.Embedding(None, "e")))
    with pytest.raises(ValueError, match=r"Embedding 'e': declare rows= \(a range table\) or "
                                         r"max_rows= / max_mb="):
        ps.torch.tables_for(model(ps.torch.Embedding(None, "e", dim=2)))
    with pytest.raises(ValueError, match=r"Embedding 'e': rows= declares a range table, "
                                         r"max_rows= and max_mb= a hashed one"):
        ps.torch.Embedding(None, "e", rows=2, dim=2, max_rows=5)
    with pytest.raises(ValueError, match=r"EmbeddingBag 'e': dim: expected an integer >= 1, "
                                         r"got 0"):
        ps.torch.EmbeddingBag(None, "e", rows=2, dim=0)
    with pytest.raises(ValueError, match=r"EmbeddingBag 'e': declared as .* by one module and as "
                                         r"\{'name': 'e', 'rows': 3"):
        ps.torch.tables_for(model(ps.torch.Embedding(None, "e", rows=2, dim=2),
                                  ps.torch.EmbeddingBag(None, "e", rows=3, dim=2)))
    with pytest.raises(ValueError, match=r"Embedding '0.weight': a parameter's table has that "
                                         r"name already"):
        ps.torch.tables_for(model(torch.nn.Linear(2, 2),
                                  ps.torch.Embedding(None, "0.weight", rows=2, dim=2)))
    # Two modules over one table declared alike: one table.
    text = ps.torch.tables_for(model(ps.torch.Embedding(None, "e", rows=2, dim=2),
                                     ps.torch.EmbeddingBag(None, "e", rows=2, dim=2)))
    assert text.count('name: "e"') == 1
