"""The Python examples (examples/python/) run as their job files say, with
ps_launch starting the real ps_server processes and the Python workers on
loopback: the PyTorch Fashion-MNIST MLP reaches test accuracy 0.87 under
bsp with 2 workers, the click model's held-out loss falls and its AUC
rises, and a worker without the data set fails the job saying what to
install.

Each test runs the example's own job file with free ports and the
scripts' absolute paths (and --summary, for the figures), from a folder
without the ps module: ps_launch's build tree provides it.
"""

import gzip
import json
import os
import sys

import yaml

import ps.torch
from conftest import free_port, run_ps_launch

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "python")
sys.path.insert(0, EXAMPLES)
import click_model  # noqa: E402
import fashion_mnist_mlp  # noqa: E402


def example_job(tmp_path, name, extra_args=(), workers=None):
    """examples/python/<name>.yaml with free ports, the command's script by
    its absolute path and `extra_args` appended, written to tmp_path;
    returns (its path, the job as a dict)."""
    with open(os.path.join(EXAMPLES, name + ".yaml")) as f:
        job = yaml.safe_load(f)
    job["cluster"]["servers"] = ["127.0.0.1:%d" % free_port()
                                 for _ in job["cluster"]["servers"]]
    if workers is not None:
        job["cluster"]["workers"] = workers
    command = job["train"]["command"]
    assert command[1] == "examples/python/%s.py" % name, command
    command[1] = os.path.join(EXAMPLES, name + ".py")
    command.extend(extra_args)
    path = str(tmp_path / (name + ".yaml"))
    with open(path, "w") as f:
        yaml.safe_dump(job, f, sort_keys=False)
    return path, job


def launch(tmp_path, config, timeout=300):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return run_ps_launch(config, str(tmp_path), timeout, env)


def summaries(prefix, workers):
    result = []
    for rank in range(workers):
        with open("%s%d.json" % (prefix, rank)) as f:
            result.append(json.load(f))
    return result


def test_the_pytorch_mlp_reaches_0_87_under_bsp_with_two_workers(tmp_path):
    prefix = str(tmp_path / "mlp")
    config, job = example_job(tmp_path, "fashion_mnist_mlp", ["--summary", prefix])
    assert job["consistency"]["mode"] == "bsp" and job["cluster"]["workers"] == 2
    code, out = launch(tmp_path, config)
    assert code == 0, out
    assert "job succeeded" in out, out
    results = summaries(prefix, 2)
    accuracy = results[0]["test_accuracy"]
    assert accuracy >= 0.87, "final test accuracy %.4f < 0.87:\n%s" % (accuracy, out)
    assert "[worker 0] worker 0: final test accuracy %.4f" % accuracy in out, out
    # Worker 0 reported as it went, from the initial parameters on.
    steps = [step for step, _ in results[0]["evaluations"]]
    assert steps[0] == 0 and len(steps) >= 5 and steps[-1] == results[0]["steps"], steps
    assert results[0]["evaluations"][0][1] < 0.5  # before training
    # Both workers trained every step on their own half of the images.
    for r in results:
        assert r["workers"] == 2 and r["steps"] == results[0]["steps"] and r["steps"] > 0
        assert r["samples_per_s"] > 0
        assert "[worker %d] worker %d: step 250/" % (r["rank"], r["rank"]) in out, out


def job_tables(name):
    with open(os.path.join(EXAMPLES, name + ".yaml")) as f:
        return yaml.safe_load(f)["tables"]


def shapes(tables):
    return [(t["name"], t["rows"], t["dim"], t.get("init")) for t in tables]


def test_the_job_files_have_the_tables_of_their_models():
    """Each job file's range tables are its model's parameters (names,
    shapes, initial values) as ps.torch.tables_for writes them."""
    written = yaml.safe_load(ps.torch.tables_for(fashion_mnist_mlp.make_model()))["tables"]
    assert shapes(job_tables("fashion_mnist_mlp")) == shapes(written)
    embeddings, *mlp = job_tables("click_model")
    defaults = click_model.parse_args([])
    model = click_model.ClickModel(None, defaults.fields, embeddings["dim"], defaults.dense)
    written = yaml.safe_load(ps.torch.tables_for(model.mlp, prefix="mlp."))["tables"]
    assert shapes(mlp) == shapes(written)
    assert embeddings["name"] == defaults.table and embeddings["keys"] == "hashed"


def test_a_worker_without_the_data_set_fails_the_job_saying_what_to_install(tmp_path):
    config, _ = example_job(tmp_path, "fashion_mnist_mlp",
                            ["--data-dir", str(tmp_path / "nowhere")], workers=1)
    code, out = launch(tmp_path, config, timeout=120)
    assert code != 0, out
    assert "nowhere/train-labels-idx1-ubyte.gz: no such file; install the Debian package " \
           "dataset-fashion-mnist" in out, out


def test_a_truncated_data_file_is_refused_naming_it(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with gzip.open(data / "train-labels-idx1-ubyte.gz", "wb") as f:
        f.write(b"\x00\x00\x08\x01" + (60000).to_bytes(4, "big") + bytes(100))
    try:
        fashion_mnist_mlp.load_fashion_mnist(str(data), "train")
    except fashion_mnist_mlp.DataError as e:
        assert "train-labels-idx1-ubyte.gz: IDX dimensions (60000,) and 100 payload bytes, " \
               "expected (60000,)" in str(e), str(e)
    else:
        raise AssertionError("a truncated file was read")


def test_the_click_model_learns_its_loss_falls_and_auc_rises(tmp_path):
    prefix = str(tmp_path / "click")
    # A shorter run than the example's: 100,000 samples a worker.
    config, job = example_job(tmp_path, "click_model",
                              ["--summary", prefix, "--samples", "100000", "--eval-every", "130"])
    assert job["tables"][0]["keys"] == "hashed"
    code, out = launch(tmp_path, config)
    assert code == 0, out
    results = summaries(prefix, 2)
    evaluations = results[0]["evaluations"]  # (step, log-loss, AUC)
    assert len(evaluations) >= 3, evaluations
    first, last = evaluations[0], evaluations[-1]
    assert first[0] == 0 and last[0] == results[0]["steps"]
    assert last[1] < first[1] - 0.05, evaluations  # held-out log-loss
    assert last[2] > first[2] + 0.03 and last[2] > 0.72, evaluations  # AUC
    for r in results:  # every worker's training loss falls
        losses = [loss for _, loss in r["training_losses"]]
        assert len(losses) >= 3 and losses[-1] < losses[0], losses
    assert "held-out log-loss" in out and "teacher on the 20000 held-out samples" in out, out
