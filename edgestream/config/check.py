"""What `load_config` checks beyond the schema: everything a config names that can be built or read
without a broker, so `edgestream config validate` (and `run`, `compare`, `produce`, which load configs
the same way) reject at load time what would otherwise fail later as a traceback.

`check_buildable(cfg)` returns one line per problem, naming the field (edgestream.config's style):

- devices.rates / devices.variation: the rate model is built (`edgestream.streams.build_rate_model`),
  which reads a rate trace whole (header, every row, a row for every configured device); the
  per-device rates it gives (base rates, trace rows, burst and sinusoid peaks) must stay <= MAX_RATE.
  A random walk's excursions are not bounded here (they depend on the run's length).
- data: the dataset is loaded exactly as `run` loads it (`RunPlan.dataset_of`, the same function and
  arguments: the task, the file formats' fields, num_classes, n_train / n_test...), so `config validate`
  and `run` agree; the loaded dataset is kept for the run (edgestream.data.datasets memo). For cifar10,
  cifar100 and mnist the files are first checked cheaply for a pointed message: the CIFAR batches exist
  and start like pickles, the MNIST IDX files (or .gz) exist and their headers have the right magic,
  dimensions and sizes (images and labels agree in number); n_train / n_test fit the split.
- devices.compute.profile: the compute profile loads (edgestream.profiles) and has the entry the run
  uses (profile_model, else the one named like model.name, else its only one).
- runtime.kafka_client: librdkafka itself checks the settings by creating a producer with them and
  no bootstrap servers (it opens no connection), e.g. an ssl.ca.location it cannot load.
"""

from __future__ import annotations

import csv
import gzip
import math
import struct
from pathlib import Path
from typing import Any

from edgestream.config.base import MAX_RATE, SECRET_MASK, is_secret_key


def check_buildable(cfg: Any) -> list[str]:
    """Problems building `cfg`'s broker-free parts (an ExperimentConfig that passed the schema)."""
    return [*_rate_problems(cfg), *_dataset_problems(cfg), *_client_problems(cfg.runtime.kafka_client),
            *_profile_problems(cfg.devices.compute, cfg.model.name)]


def _profile_problems(compute: Any, model: str) -> list[str]:
    """devices.compute.profile: the profile loads and has the entry the run (of `model`) uses."""
    if compute.profile is None:
        return []
    from edgestream.profiles import ProfileError, load_profile

    try:
        load_profile(compute.profile).curve(compute.profile_model, model)
    except ProfileError as exc:
        field = "profile_model" if compute.profile_model is not None and "no entry" in str(exc) else "profile"
        return [f"devices.compute.{field}: {_line(exc)}"]
    return []


def _line(text: Any) -> str:
    """`text` on one line, control characters (e.g. a NUL from a garbled file) escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in " ".join(str(text).split()))


# ---------------------------------------------------------------- rates


def _rate_problems(cfg: Any) -> list[str]:
    from edgestream.streams import build_rate_model
    from edgestream.streams.trace import read_trace

    dev = cfg.devices
    spec = dev.rates.spec()
    if spec.get("distribution") == "trace":
        path = Path(spec["path"])
        if not path.exists():
            return [f"devices.rates.path: trace file {str(path)!r} does not exist"]
        if not path.is_file():
            return [f"devices.rates.path: {str(path)!r} is not a file (a CSV trace time,device,rate)"]
    try:
        model = build_rate_model(spec, dev.variation.spec(), dev.count, cfg.seed, min_rate=dev.rates.min_rate)
    except (ValueError, OSError, csv.Error) as exc:  # a garbled trace: UnicodeDecodeError, csv.Error (NUL)
        return [_rate_error(exc, spec)]
    return _peak_problems(model, spec, dev, read_trace)


def _rate_error(exc: Exception, spec: dict) -> str:
    msg = _line(exc)
    for section in ("rates.", "variation."):
        if msg.startswith(section):
            return "devices." + msg
    if msg.startswith(("devices.", "seed:")):
        return msg
    if spec.get("distribution") == "trace":
        return f"devices.rates.path: {spec['path']}: not a readable CSV trace (time,device,rate): {msg}"
    return f"devices.rates: {msg}"


def _peak_problems(model: Any, spec: dict, dev: Any, read_trace: Any) -> list[str]:
    """Per-device rates above MAX_RATE (one line, naming the worst device)."""
    if spec.get("distribution") == "trace":
        rows = read_trace(spec["path"])
        worst = max(((max(r for _, r in rows[d]), d) for d in range(dev.count)), default=(0.0, 0))
        if worst[0] > MAX_RATE:
            return [f"devices.rates.path: trace rate {worst[0]:g} (device {worst[1]}) is not allowed; "
                    f"rates must be <= {MAX_RATE:.0f} (samples/s per device)"]
        return []
    var = dev.variation
    factor = {"sinusoid": 1.0 + (var.amplitude if var.amplitude is not None else 0.5),
              "bursts": max(1.0, var.factor if var.factor is not None else 4.0)}.get(var.kind, 1.0)
    base = model.base_rates
    d = int(base.argmax())
    peak = float(base[d]) * factor
    if peak > MAX_RATE:
        what = "base rate" if factor == 1.0 else f"peak rate with variation {var.kind!r}"
        field = "devices.rates" if factor == 1.0 else "devices.variation"
        return [f"{field}: device {d} would stream at {peak:.6g} samples/s ({what}); rates must be <= "
                f"{MAX_RATE:.0f} (samples/s per device)"]
    return []


# ---------------------------------------------------------------- datasets


def _dataset_problems(cfg: Any) -> list[str]:
    """The cheap file checks, then the dataset loaded as the run loads it (one line per problem). External
    streams: the eval.path file and the record decoder (streams.format with its fields), as the run builds them."""
    if cfg.streams.external:
        from edgestream.runner.plan import RunPlan

        try:
            RunPlan.resolve(cfg).record_decoder()
        except ValueError as exc:
            return [_line(p) for p in str(exc).splitlines() if p.strip()]
        return []
    problems = _dataset_file_problems(cfg.data)
    if problems:
        return problems
    from edgestream.data.cifar import UNREADABLE
    from edgestream.runner.plan import RunPlan

    try:
        RunPlan.dataset_of(cfg)
    except ValueError as exc:
        return [line if line.startswith(("data.", "task:")) else f"data.{line}"
                for line in (_line(p) for p in str(exc).splitlines() if p.strip())]
    except UNREADABLE as exc:  # a file the cheap checks passed but cannot be read
        return [f"data.{'path' if cfg.data.path else 'root'}: {_line(exc)}"]
    return []


def _dataset_file_problems(data: Any) -> list[str]:
    if data.dataset not in ("cifar10", "cifar100", "mnist") or not data.root:
        return []
    root = Path(data.root).expanduser()
    if not root.exists():
        return [f"data.root: {data.root!r} does not exist (the folder holding the {data.dataset} files)"]
    if not root.is_dir():
        return [f"data.root: {data.root!r} is not a folder (the folder holding the {data.dataset} files)"]
    try:
        sizes = _check_mnist(root) if data.dataset == "mnist" else _check_cifar(root, data.dataset)
    except (OSError, ValueError, EOFError) as exc:
        return [f"data.root: {_line(exc)}"]
    problems = []
    for field, split in (("n_train", "train"), ("n_test", "test")):
        n, have = getattr(data, field), sizes.get(split)
        if n is not None and have is not None and n > have:
            problems.append(f"data.{field}: {n} is not allowed; must be <= {have} (the {split} split of "
                            f"{data.dataset} under {data.root})")
    return problems


def _check_cifar(root: Path, dataset: str) -> dict[str, int]:
    """The batch files load_cifar reads exist and start like pickles (not unpickled: that reads them
    whole). Returns {} (sizes unknown without unpickling)."""
    from edgestream.data.cifar import CIFAR10_DIR, CIFAR10_TEST, CIFAR10_TRAIN, CIFAR100_DIR, _find_dir

    if dataset == "cifar10":
        d = _find_dir(root, CIFAR10_DIR, CIFAR10_TRAIN[0])
        names = (*CIFAR10_TRAIN, CIFAR10_TEST)
    else:
        d = _find_dir(root, CIFAR100_DIR, "train")
        names = ("train", "test")
    missing = [str(d / n) for n in names if not (d / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{dataset} files missing: {', '.join(missing)}")
    for n in names:
        with (d / n).open("rb") as f:
            head = f.read(2)
        # protocol 2+ pickles start with PROTO <n>; protocol 0/1 dicts with MARK or EMPTY_DICT
        if not ((len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5) or head[:1] in (b"(", b"}")):
            raise ValueError(f"{d / n}: not a CIFAR python-version batch (not a pickle: starts with {head!r})")
    return {}


def _check_mnist(root: Path) -> dict[str, int]:
    """Every IDX file load_mnist reads exists with a valid header and the size it declares (for .gz
    files only the header: their size needs a full decompression). Returns {split: samples}."""
    from edgestream.data.mnist import FILES, IMAGES_MAGIC, LABELS_MAGIC, _find

    sizes = {}
    for split in ("train", "test"):
        dims = {}
        for kind, magic in (("images", IMAGES_MAGIC), ("labels", LABELS_MAGIC)):
            path = _find(root, FILES[f"{split}_{kind}"])
            dims[kind] = _idx_header(path, magic)
        if dims["images"][0] != dims["labels"][0]:
            raise ValueError(f"mnist {split}: {dims['images'][0]} images but {dims['labels'][0]} labels")
        sizes[split] = dims["images"][0]
    return sizes


def _idx_header(path: Path, magic: int) -> tuple[int, ...]:
    gz = path.suffix == ".gz"
    try:
        with (gzip.open(path, "rb") if gz else path.open("rb")) as f:
            head = f.read(4)
            if len(head) < 4:
                raise ValueError(f"{path}: {len(head)} bytes is too short for an IDX header")
            (got,) = struct.unpack(">I", head)
            if got != magic:
                raise ValueError(f"{path}: bad IDX magic 0x{got:08x}, expected 0x{magic:08x}")
            ndim = got & 0xFF
            raw = f.read(4 * ndim)
    except (gzip.BadGzipFile, EOFError) as exc:
        raise ValueError(f"{path}: not a gzip file ({_line(exc)})") from None
    if len(raw) < 4 * ndim:
        raise ValueError(f"{path}: truncated IDX header")
    dims = struct.unpack(f">{ndim}I", raw)
    if not gz:
        want = 4 + 4 * ndim + math.prod(dims)
        have = path.stat().st_size
        if have != want:
            raise ValueError(f"{path}: {have} bytes, IDX header {dims} says {want}")
    return dims


# ---------------------------------------------------------------- Kafka client settings


def _client_problems(client: dict[str, str]) -> list[str]:
    if not client:
        return []
    from confluent_kafka import KafkaException, Producer

    from edgestream.kafka.clients import CLIENT_LOGGER

    try:
        producer = Producer({"logger": CLIENT_LOGGER, **client})
    except KafkaException as exc:
        err = exc.args[0] if exc.args else exc
        return [f"runtime.kafka_client: {_masked(getattr(err, 'str', lambda: err)(), client)} (librdkafka)"]
    except (TypeError, ValueError) as exc:
        return [f"runtime.kafka_client: {_masked(exc, client)}"]
    del producer
    return []


#: a secret value shorter than this is masked only where it stands as its key's value (key=value,
#: key: value): as a bare token it would hide ordinary words ("o" in "No such ... property")
MASK_MIN_LEN = 4


def _masked(text: Any, client: dict[str, str]) -> str:
    """`text` on one line with the secret values of `client` masked by key, not by substring: a value
    right after its key (`key=value`, `key: value`, quoted or not) always, and elsewhere as a whole
    token (not inside a longer word) when it has at least MASK_MIN_LEN characters."""
    import re

    line = _line(text)
    for key, value in client.items():
        if not (is_secret_key(key) and value):
            continue
        v = re.escape(value)
        line = re.sub(rf"({re.escape(key)}[\"'`]?\s*[=:]\s*[\"'`]?){v}(?=[\"'`]?(?:[\s,;)}}\]]|$))",
                      lambda m: m.group(1) + SECRET_MASK, line)
        if len(value) >= MASK_MIN_LEN:
            line = re.sub(rf"(?<![\w]){v}(?![\w])", lambda m: SECRET_MASK, line)
    return line


# ---------------------------------------------------------------- what a run builds first


def check_runnable(cfg: Any) -> list[str]:
    """Problems building what a run builds before its first step -- the run plan (algorithm params, batch
    and buffer policies), the dataset as the task reads it, its shards, the model on the data's shape --
    by the same code the run uses, so `config validate` refuses exactly what `run` would. One line each,
    naming the field. (`load_config` does not call this: it loads the dataset, which every process of a
    run does anyway through its plan.)"""
    from edgestream.plugins import PluginError
    from edgestream.runner.plan import PlanError, RunPlan

    try:
        plan = RunPlan.resolve(cfg)
        if plan.external:  # external streams: the eval file and the record decoder, no shards to split
            plan.serde  # noqa: B018
        else:
            plan.shards  # noqa: B018 - loads the dataset, then splits it over the devices
    except PlanError as exc:
        return [_line(p) for p in exc.problems]
    try:
        plan.check_model()  # a built-in model: no torch (see RunPlan.check_model)
    except PluginError as exc:
        return [_line(exc)]
    except (ValueError, TypeError, RuntimeError) as exc:
        text = _line(exc)
        return [text if text.startswith("model.") else f"model.name: {cfg.model.name!r} cannot be built for the "
                f"data's samples: {text}"]
    return []
