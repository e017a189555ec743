"""Issue 8 (config/CLI side): load_config builds what can be built without a broker (rate traces,
dataset files, Kafka client settings) and rejects bad input with one line naming the field; numbers
are finite, ints strict, rates bounded; relative paths resolve against the config file's folder (or
the current directory for --set); secrets never reach `config show` or run directories; a config file
must name its run; every command exits 2 with one line on bad input, never a traceback."""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from edgestream.cli import app
from edgestream.config import MAX_RATE, ConfigError, is_secret_key, load_config
from edgestream.producers.from_plan import stream_producer
from edgestream.streams import build_rate_model

runner = CliRunner()
EDGESTREAM = Path(sys.executable).parent / "edgestream"
TRACE = "time,device,rate\n0,0,40\n0,1,90\n2.5,1,30\n"


def write(path: Path, raw: dict | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw))
    return path


def trace_cfg(path: str, count: int = 2, **extra) -> dict:
    return {"name": "hard", "devices": {"count": count, "rates": {"distribution": "trace", "path": path}}, **extra}


def problems_of(cfg_file: Path, overrides: list[str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(cfg_file, overrides)
    return info.value.problems


def one_problem(cfg_file: Path, field: str, *words: str) -> str:
    """load_config fails with exactly one line, starting with `field: ` and holding every word."""
    problems = problems_of(cfg_file)
    assert len(problems) == 1, problems
    line = problems[0]
    assert line.startswith(field + ": ") and "\n" not in line, line
    for w in words:
        assert w in line, (w, line)
    return line


def cli(*args: str):
    """CliRunner run that must exit 2 with exactly one stderr line and no exception but the exit."""
    res = runner.invoke(app, list(args))
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert isinstance(res.exception, SystemExit), repr(res.exception)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    return lines[0]


# ---------------------------------------------------------------- rate traces and rate bounds


@pytest.mark.parametrize("content, words", [
    (None, ("does not exist",)),
    (b"\x00\xff\xfe\x81 not text", ("not a readable CSV trace",)),
    (b"time,device,rate\n0,0,\x00\n", ("fields must be numbers (got 0,0,\\x00)",)),
    (b"t,dev,rate\n0,0,5\n", ("header must be time,device,rate",)),
    (b"time,device,rate\n0,0,40\n", ("no rows for device(s) 1",)),
    (b"time,device,rate\n", ("no rows for device(s) 0, 1",)),
    (b"time,device,rate\n0,0,x\n", ("fields must be numbers",)),
    (b"time,device,rate\n0,0,40\n0,1,5e12\n", ("trace rate 5e+12 (device 1)", "samples/s per device")),
])
def test_bad_trace_is_a_config_error(tmp_path, content, words):
    if content is not None:
        (tmp_path / "rates.csv").write_bytes(content)
    one_problem(write(tmp_path / "c.yaml", trace_cfg("rates.csv")), "devices.rates.path", *words)


def test_trace_path_that_is_a_folder(tmp_path):
    (tmp_path / "rates.csv").mkdir()
    one_problem(write(tmp_path / "c.yaml", trace_cfg("rates.csv")), "devices.rates.path", "is not a file")


@pytest.mark.parametrize("rates, field, words", [
    ({"distribution": "constant", "rate": float("inf")}, "devices.rates.rate", ("finite",)),
    ({"distribution": "constant", "rate": float("nan")}, "devices.rates.rate", ("finite",)),
    ({"distribution": "constant", "rate": 1e12}, "devices.rates.rate", (f"<= {MAX_RATE:.0f}", "samples/s")),
    ({"distribution": "constant", "rate": "1e12"}, "devices.rates.rate", (f"<= {MAX_RATE:.0f}",)),
    ({"distribution": "uniform", "low": 1, "high": 2e6}, "devices.rates.high", (f"<= {MAX_RATE:.0f}",)),
    ({"distribution": "normal", "mean": 64, "std": float("-inf")}, "devices.rates.std", ("finite",)),
])
def test_rates_are_finite_and_bounded(tmp_path, rates, field, words):
    one_problem(write(tmp_path / "c.yaml", {"name": "r", "devices": {"rates": rates}}), field, *words)


def test_a_burst_peak_above_the_bound_is_caught_when_built(tmp_path):
    raw = {"name": "r", "devices": {"rates": {"distribution": "constant", "rate": 400_000},
                                    "variation": {"kind": "bursts", "factor": 4}}}
    one_problem(write(tmp_path / "c.yaml", raw), "devices.variation", "1.6e+06 samples/s", "bursts")
    raw["devices"]["variation"]["factor"] = 2
    assert load_config(write(tmp_path / "c.yaml", raw)).devices.rates.rate == 400_000


def test_floats_are_finite_everywhere(tmp_path):
    raw = {"name": "f", "optim": {"lr": float("inf"), "milestones": [1.0, float("nan")]},
           "devices": {"compute": {"static": [1.0, float("inf")]}}, "stop": {"max_time_s": float("inf")}}
    problems = problems_of(write(tmp_path / "c.yaml", raw))
    assert sorted(p.split(":")[0] for p in problems) == [
        "devices.compute.static[1]", "optim.lr", "optim.milestones[1]", "stop.max_time_s"]
    assert all("finite" in p for p in problems), problems


@pytest.mark.parametrize("raw, field", [
    ({"devices": {"count": True}}, "devices.count"),
    ({"seed": False}, "seed"),
    ({"algorithm": {"name": "ddl", "batch": {"policy": "fixed", "size": True}}}, "algorithm.batch.size"),
    ({"stop": {"max_steps": True}}, "stop.max_steps"),
    ({"optim": {"lr": True}}, "optim.lr"),
    ({"devices": {"compute": {"static": [True]}}}, "devices.compute.static[0]"),
])
def test_booleans_are_not_numbers(tmp_path, raw, field):
    line = one_problem(write(tmp_path / "c.yaml", {"name": "b", **raw}), field, "true/false")
    assert line.split(": ")[1].split()[0] in ("true", "false"), line


def test_ints_are_strict_but_yaml_ints_and_floats_still_load(tmp_path):
    one_problem(write(tmp_path / "c.yaml", {"name": "i", "devices": {"count": 2.5}}), "devices.count", "integer")
    cfg = load_config(write(tmp_path / "c.yaml", "name: i\ndevices: {count: 3}\noptim: {lr: 1}\n"))
    assert cfg.devices.count == 3 and cfg.optim.lr == 1.0


# ---------------------------------------------------------------- dataset files


def _cifar_batch(n: int, label_key: bytes) -> dict:
    rng = np.random.default_rng(n)
    return {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), label_key: [0] * n}


def _make_cifar10(root: Path) -> Path:
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        (d / name).write_bytes(pickle.dumps(_cifar_batch(2, b"labels"), protocol=2))
    return d


def _idx(shape: tuple[int, ...], magic: int) -> bytes:
    return struct.pack(">I", magic) + struct.pack(f">{len(shape)}I", *shape) + bytes(int(np.prod(shape)))


def _make_mnist(root: Path, n_train: int = 12, n_test: int = 10) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, shape, magic in (("train-images-idx3-ubyte", (n_train, 28, 28), 0x803),
                               ("train-labels-idx1-ubyte", (n_train,), 0x801),
                               ("t10k-images-idx3-ubyte", (n_test, 28, 28), 0x803),
                               ("t10k-labels-idx1-ubyte", (n_test,), 0x801)):
        (root / name).write_bytes(_idx(shape, magic))


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100", "mnist"])
def test_dataset_root_that_does_not_exist(tmp_path, dataset):
    cfg = write(tmp_path / "c.yaml", {"name": "d", "data": {"dataset": dataset, "root": "no-such-dir"}})
    one_problem(cfg, "data.root", str(tmp_path / "no-such-dir"), "does not exist")


def test_cifar_files_are_checked_cheaply(tmp_path):
    cfg = write(tmp_path / "c.yaml", {"name": "d", "data": {"dataset": "cifar10", "root": "data"}})
    (tmp_path / "data").mkdir()
    one_problem(cfg, "data.root", "data_batch_1 not found")
    d = _make_cifar10(tmp_path / "data")
    assert load_config(cfg).data.root == str(tmp_path / "data")
    (d / "data_batch_3").unlink()
    one_problem(cfg, "data.root", "missing", "data_batch_3")
    (d / "data_batch_3").write_text("this is not a pickle")
    one_problem(cfg, "data.root", "data_batch_3", "not a CIFAR python-version batch")
    (tmp_path / "data2").write_text("")
    one_problem(write(tmp_path / "c.yaml", {"name": "d", "data": {"dataset": "cifar100", "root": "data2"}}),
                "data.root", "is not a folder")


def test_mnist_headers_are_checked(tmp_path):
    cfg = write(tmp_path / "c.yaml", {"name": "d", "data": {"dataset": "mnist", "root": "m", "n_train": 12}})
    _make_mnist(tmp_path / "m")
    assert load_config(cfg).data.n_train == 12
    one_problem(write(tmp_path / "c.yaml", {"name": "d", "data": {"dataset": "mnist", "root": "m", "n_test": 11}}),
                "data.n_test", "must be <= 10")
    labels = tmp_path / "m" / "train-labels-idx1-ubyte"
    labels.write_bytes(_idx((11,), 0x801))
    one_problem(cfg, "data.root", "12 images but 11 labels")
    labels.write_bytes(_idx((12,), 0x801)[:-3])
    one_problem(cfg, "data.root", "IDX header (12,) says 20")
    labels.write_bytes(_idx((12,), 0x803))
    one_problem(cfg, "data.root", "bad IDX magic")


# ---------------------------------------------------------------- Kafka client settings, secrets


@pytest.mark.parametrize("client, words", [
    ({"security.protocol": "BOGUS"}, ("security.protocol", "BOGUS", "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")),
    ({"security.protocol": "SSL", "ssl.ca.location": "/no/such/ca.pem"}, ("ssl.ca.location",)),
    ({"socket.timeout.ms": "soon"}, ("socket.timeout.ms",)),
])
def test_kafka_client_settings_are_checked_by_librdkafka(tmp_path, client, words):
    cfg = write(tmp_path / "c.yaml", {"name": "k", "runtime": {"kafka_client": client}})
    field = "runtime.kafka_client.security.protocol" if client.get("security.protocol") == "BOGUS" \
        else "runtime.kafka_client"
    one_problem(cfg, field, *words)


def test_every_client_gives_up_on_a_silent_broker_after_30_s_unless_the_config_says_otherwise():
    """socket.timeout.ms (docs/streaming.md, "A silent broker given up after 30 s"): librdkafka's 60 s kept a
    cut-off leader's partition waiting, and a producer's broker thread busy, twice as long; runtime.kafka_client
    wins over it, and librdkafka takes both."""
    from confluent_kafka import Consumer, Producer

    from edgestream.kafka import consumer_config, producer_config
    from edgestream.kafka.clients import client_config

    for conf in (client_config("h:1"), producer_config("h:1", outage_s=90), consumer_config("h:1", "g")):
        assert conf["socket.timeout.ms"] == 30_000
    mine = {"socket.timeout.ms": 120_000}
    for make, conf in ((Producer, producer_config("127.0.0.1:1", mine)), (Consumer, consumer_config("127.0.0.1:1", "g", mine))):
        assert conf["socket.timeout.ms"] == 120_000
        client = make(conf)  # librdkafka accepts the setting (it refuses a bad one: the test above)
        assert client is not None
        if make is Consumer:
            client.close()


def test_kafka_client_values_case_and_scalars(tmp_path):
    cfg = load_config(write(tmp_path / "c.yaml", {"name": "k", "runtime": {"kafka_client": {
        "security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN", "sasl.username": "u",
        "sasl.password": 123456, "socket.keepalive.enable": True, "request.timeout.ms": 30000}}}))
    assert cfg.runtime.kafka_client == {"security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN",
                                        "sasl.username": "u", "sasl.password": "123456",
                                        "socket.keepalive.enable": "true", "request.timeout.ms": "30000"}
    line = one_problem(write(tmp_path / "c.yaml", {"name": "k", "runtime": {"kafka_client": {
        "sasl.password": ["hunter2"]}}}), "runtime.kafka_client.sasl.password", "***")
    assert "hunter2" not in line


def test_secret_keys():
    for key in ("sasl.password", "ssl.key.password", "sasl.oauthbearer.client.secret", "ssl.keystore.password",
                "ssl.key.pem", "SASL.PASSWORD", "sasl.oauthbearer.config"):
        assert is_secret_key(key), key
    for key in ("security.protocol", "sasl.username", "ssl.key.location", "ssl.ca.location", "sasl.mechanisms"):
        assert not is_secret_key(key), key


SECRET_CLIENT = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN", "sasl.username": "alice",
                 "sasl.password": "hunter2-pw", "sasl.oauthbearer.client.secret": "oauth-s3cret"}


def test_config_show_masks_secrets_but_the_config_keeps_them(tmp_path):
    cfg_file = write(tmp_path / "c.yaml", {"name": "s", "runtime": {"kafka_client": SECRET_CLIENT}})
    res = runner.invoke(app, ["config", "show", str(cfg_file)])
    assert res.exit_code == 0, res.output
    assert "hunter2-pw" not in res.output and "oauth-s3cret" not in res.output
    shown = yaml.safe_load(res.stdout)["runtime"]["kafka_client"]
    assert shown == {**SECRET_CLIENT, "sasl.password": "***", "sasl.oauthbearer.client.secret": "***"}
    cfg = load_config(cfg_file)
    assert cfg.runtime.kafka_client == SECRET_CLIENT  # what clients connect with
    assert "hunter2-pw" in cfg.to_yaml(reveal_secrets=True)


# ---------------------------------------------------------------- relative paths


def test_relative_paths_resolve_against_the_config_folder(tmp_path, monkeypatch):
    folder = tmp_path / "exp"
    write(folder / "rates.csv", TRACE)
    _make_mnist(folder / "mnist")
    cfg_file = write(folder / "c.yaml", trace_cfg("rates.csv", data={"dataset": "mnist", "root": "mnist"}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_config(cfg_file)
    assert cfg.devices.rates.path == str(folder / "rates.csv") and cfg.data.root == str(folder / "mnist")
    # what the producers and the simulator both do with it (no base_dir): the same file, from any cwd
    model = build_rate_model(cfg.devices.rates.spec(), cfg.devices.variation.spec(), 2, cfg.seed)
    assert [model.rate(1, t) for t in (0.0, 3.0)] == [90.0, 30.0]
    # --set paths are relative to the current directory
    write(elsewhere / "other.csv", "time,device,rate\n0,0,7\n0,1,8\n")
    cfg = load_config(cfg_file, ["devices.rates.path=other.csv"])
    assert cfg.devices.rates.path == str(elsewhere / "other.csv")
    cfg = load_config(cfg_file, ["devices.rates={distribution: trace, path: other.csv}"])
    assert cfg.devices.rates.path == str(elsewhere / "other.csv")
    assert load_config(cfg_file, ["devices.count=2"]).devices.rates.path == str(folder / "rates.csv")
    one_problem_cfg = problems_of(cfg_file, ["data.root=mnist"])
    assert one_problem_cfg == [f"data.root: '{elsewhere / 'mnist'}' does not exist (the folder holding the "
                               "mnist files)"]


def test_produce_reads_the_trace_next_to_the_config(tmp_path, monkeypatch, bootstrap, run_prefix):
    """The produce path (producer_from_config) from another cwd streams at the trace's rates."""
    from edgestream.runner.plan import RunPlan

    folder = tmp_path / "exp"
    write(folder / "rates.csv", TRACE)
    cfg_file = write(folder / "c.yaml", trace_cfg("rates.csv"))
    monkeypatch.chdir(tmp_path)
    producer = stream_producer(RunPlan.resolve(load_config(cfg_file)), bootstrap, run_prefix, [0, 1])
    assert [producer.rates.base_rate(d) for d in (0, 1)] == [40.0, 90.0]
    assert producer.rates.rate(1, 3.0) == 30.0


def test_sim_run_from_another_cwd_and_its_run_directory_has_no_secrets(tmp_path, monkeypatch):
    folder = tmp_path / "exp"
    write(folder / "rates.csv", TRACE)
    cfg_file = write(folder / "c.yaml", trace_cfg(
        "rates.csv", seed=1, data={"dataset": "digits"}, model={"name": "mlp"},
        devices={"count": 2, "rates": {"distribution": "trace", "path": "rates.csv"},
                 "compute": {"base_s": 0.05, "per_sample_s": 0.002}},
        algorithm={"name": "ddl", "batch": {"policy": "fixed", "size": 16}},
        stop={"target_accuracy": 0.99, "max_time_s": 1.0}, eval={"every_s": 1.0},
        runtime={"kafka_client": SECRET_CLIENT}))
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["run", str(cfg_file.relative_to(tmp_path)), "--out", "o", "--run-id", "r", "--quiet",
                              "--json"])
    assert res.exit_code == 0, res.output
    run = tmp_path / "o" / "hard-ddl-r"
    written = yaml.safe_load((run / "config.yaml").read_text())
    assert written["devices"]["rates"]["path"] == str(folder / "rates.csv")
    assert written["runtime"]["kafka_client"]["sasl.password"] == "***"
    for f in run.rglob("*"):  # every file, the TensorBoard event files included
        if f.is_file():
            data = f.read_bytes()
            assert b"hunter2-pw" not in data and b"oauth-s3cret" not in data, f
    assert json.loads(res.stdout.strip().splitlines()[-1])["steps"] > 0


# ---------------------------------------------------------------- the run name


def test_a_config_file_must_name_its_run(tmp_path):
    empty = write(tmp_path / "empty.yaml", "")
    assert problems_of(empty) == ["name: required (the run name; topics are <name>-<algorithm>-<run id>.dev.<i>); "
                                  "the file is empty"]
    assert problems_of(write(tmp_path / "c.yaml", "# only a comment\n")) == problems_of(empty)
    nameless = write(tmp_path / "n.yaml", {"devices": {"count": 2}})
    assert problems_of(nameless) == ["name: required (the run name; topics are <name>-<algorithm>-<run id>.dev.<i>)"]
    both = problems_of(write(tmp_path / "n0.yaml", {"devices": {"count": 0}}))
    assert both[0].startswith("name: required") and both[1].startswith("devices.count: 0")
    assert load_config(nameless, ["name=given"]).name == "given"
    assert load_config(empty, ["name=given"]).devices.count == 16


# ---------------------------------------------------------------- the CLI: exit 2, one line, no traceback


def test_cli_config_errors_exit_2_with_one_line(tmp_path):
    (tmp_path / "rates.csv").write_text("time,device,rate\n0,0,40\n")
    cases = [
        (trace_cfg("rates.csv"), "devices.rates.path: trace"),
        (trace_cfg("missing.csv"), "devices.rates.path: trace file"),
        ({"name": "x", "devices": {"rates": {"distribution": "constant", "rate": float("inf")}}}, "devices.rates.rate:"),
        ({"name": "x", "devices": {"rates": {"distribution": "constant", "rate": 1e12}}}, "devices.rates.rate:"),
        ({"name": "x", "data": {"dataset": "cifar10", "root": "nope"}}, "data.root:"),
        ({"name": "x", "runtime": {"kafka_client": {"security.protocol": "BOGUS"}}},
         "runtime.kafka_client.security.protocol:"),
        ({"name": "x", "devices": {"count": True}}, "devices.count:"),
        ("", "name: required"),
    ]
    for i, (raw, start) in enumerate(cases):
        cfg_file = write(tmp_path / f"c{i}.yaml", raw)
        for args in (["config", "validate"], ["config", "show"], ["run"], ["compare", "--algorithms", "ddl"]):
            line = cli(*args, str(cfg_file))
            assert line.startswith(start), (args, line)


def test_cli_bad_paths_options_and_yaml_exit_2_with_one_line(tmp_path):
    ok = write(tmp_path / "ok.yaml", {"name": "ok", "devices": {"count": 2}})
    (tmp_path / "afile").write_text("x")
    assert cli("config", "validate", str(tmp_path / "nope.yaml")) == f"{tmp_path / 'nope.yaml'}: no such file"
    assert cli("config", "show", str(tmp_path)) == f"{tmp_path}: is a folder, not a config file"
    assert "not valid YAML" in cli("run", str(write(tmp_path / "b.yaml", "devices: [unclosed\n")))
    (tmp_path / "bin.yaml").write_bytes(b"name: \xff\xfe\x00\x81\n")
    assert cli("config", "validate", str(tmp_path / "bin.yaml")).endswith("not a text (UTF-8) file")
    assert cli("run", str(write(tmp_path / "l.yaml", "- a\n- b\n"))).startswith("(top level): must be a mapping")
    assert cli("run", str(ok), "--engine", "gpu") == "--engine: 'gpu' is not allowed; must be one of sim, local, lockstep"
    assert cli("run", str(ok), "--engine", "local", "--bootstrap", "nohost").startswith("--bootstrap: 'nohost' is not allowed")
    assert cli("run", str(ok), "--engine", "sim", "--resume", str(tmp_path)).startswith("--resume: only local runs")
    assert cli("run", str(ok), "--run-id", "a/b").startswith("--run-id: run id 'a/b' is not allowed")
    assert cli("compare", str(ok), "--algorithms", "ddl", "--run-id", "a b").startswith("--run-id:")
    assert "is not a folder" in cli("run", str(ok), "--out", str(tmp_path / "afile"))
    assert "is not a folder" in cli("compare", str(ok), "--algorithms", "ddl", "--out", str(tmp_path / "afile"))
    assert cli("config", "show", str(ok), "--set", "devices=[x").startswith("--set devices: value is not valid YAML")
    assert cli("config", "show", str(ok), "--set", "devices..count=2").startswith("--set 'devices..count=2'")
    assert cli("compare", str(ok), "--algorithms", "ddl,[oops")
    assert cli("demo", "--bootstrap", "nohost").startswith("--bootstrap: 'nohost' is not allowed")
    assert "is not a folder" in cli("demo", "--out", str(tmp_path / "afile"))
    # --set of a dotted client key sets that key (not a nested mapping)
    line = cli("config", "show", str(ok), "--set", "runtime.kafka_client.security.protocol=bogus")
    assert line.startswith("runtime.kafka_client.security.protocol: 'bogus' is not allowed")


@pytest.mark.parametrize("args, expected", [
    (["run"], "error: Missing argument 'config'. (see: edgestream run --help)"),
    (["config", "validate", "x.yaml", "--bogus"], "error: No such option: --bogus"),
    (["broker", "start", "--port", "99999"], "error: Invalid value for '--port'"),
    (["run", "x.yaml", "--engine", "gpu"], "--engine: 'gpu' is not allowed; must be one of sim, local, lockstep"),
    (["config", "validate", "."], ".: is a folder, not a config file"),
])
def test_console_script_bad_input_is_one_line(tmp_path, args, expected):
    """The installed `edgestream` script (usage errors included): exit 2, one stderr line, no traceback."""
    out = subprocess.run([str(EDGESTREAM), *args], capture_output=True, text=True, cwd=tmp_path, timeout=60,
                         env={**os.environ, "COLUMNS": "80"})
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2, out
    assert len(lines) == 1 and lines[0].startswith(expected), out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert not (tmp_path / "x.yaml").exists()
