"""The experiment configuration: pydantic models of the YAML file, defaults, presets and validation.

Field names follow ../shared/DESIGN.md ("Experiment configuration"). Unknown fields are errors so a
typo never passes silently. `load_config(path)` raises `ConfigError` whose `problems` are one line
each, naming the field path, the bad value and what is allowed, e.g.
``devices.count: -3 is not allowed; must be >= 1``.

Rules beyond the field types:
- numbers: every float must be finite (no .inf / .nan); integer fields are strict (true/false or 4.0
  are not integers) and no number field takes true/false; per-device rates (rate, low, high, mean,
  std, min_rate) are at most MAX_RATE samples/s.
- a config *file* must give `name` (an empty file is an error); `validate_dict` keeps the default
  name for configs built in code.
- relative paths (data.root, devices.rates.path) in a file resolve against the file's folder; one
  given with `--set` resolves against the current directory. `load_config` stores them absolute, so
  every consumer of the config (simulator, producers, run directories) reads the same files.
  runtime.out stays relative to the current directory (default runs/).
- `load_config` also builds what can be built without a broker (edgestream.config_check: the rate
  model and its trace file, the dataset files' presence and headers, the Kafka client settings) so
  `config validate` catches what `run` or `produce` would otherwise fail on.
- secrets in runtime.kafka_client (keys holding password, secret or key, except *.location paths)
  show as "***" in `to_yaml()` (what `config show` prints and run directories store); the config
  object keeps the real values.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from edgestream.config_check import check_buildable
from edgestream.config_kafka import KafkaConfig
from edgestream.config_streams import StreamsConfig
from edgestream.config_types import MAX_RATE, SECRET_MASK, Float, Int, _Model, is_secret_key
from edgestream.engine_names import ENGINES

RATE_PRESETS = ("S1", "S2", "S1'", "S2'")
PRESET_ALIASES = {"S1p": "S1'", "S2p": "S2'", "S1prime": "S1'", "S2prime": "S2'"}
DISTRIBUTIONS = ("constant", "uniform", "normal", "lognormal", "exponential", "trace")
VARIATIONS = ("none", "sinusoid", "random_walk", "bursts")
PARTITIONS = ("iid", "labels", "dirichlet")
MEMORIES = ("none", "residual", "dgc")
#: Client settings a user may pass through to librdkafka (brokers on a WAN need them).
CLIENT_KEY_PREFIXES = ("security.protocol", "sasl.", "ssl.", "client.id", "socket.", "request.timeout.ms")
#: topic settings users try to pass as client settings -> the kafka.topics field that sets them
TOPIC_KEYS = {"replication.factor": "replication_factor", "default.replication.factor": "replication_factor",
              "min.insync.replicas": "min_insync_replicas", "retention.ms": "retention_ms",
              "retention.bytes": "retention_bytes", "num.partitions": "partitions (layout: partitioned)"}
#: security.protocol values librdkafka accepts (case-insensitive).
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: config fields that hold file-system paths (resolved against the config file's folder).
PATH_FIELDS = (("data", "root"), ("data", "path"), ("devices", "rates", "path"), ("devices", "compute", "profile"),
               ("eval", "path"), ("streams", "schema"))
#: path fields that may also hold a bare name (a shipped compute profile): resolved only when path-like
NAME_OR_PATH = {("devices", "compute", "profile")}
NAME_REQUIRED = "name: required (the run name; topics are <name>-<algorithm>-<run id>.dev.<i>)"


def bootstrap_ok(value: str) -> bool:
    """Whether `value` reads as Kafka bootstrap servers HOST:PORT[,HOST:PORT...] (port 1..65535)."""
    for part in value.split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            return False
    return True




class ConfigError(ValueError):
    """An invalid experiment config; `problems` holds one human-readable line per problem."""

    def __init__(self, problems: list[str], source: str = "config") -> None:
        self.problems = problems
        self.source = source
        super().__init__(f"{source}: {len(problems)} problem(s)\n" + "\n".join(problems))


def _plugin_name(registry: Any, name: str) -> str:
    """A name `registry` (edgestream.plugins) resolves: a built-in, an entry point or an import path
    (imported now, so `config validate` refuses what `run` would). ValueError: one line."""
    from edgestream.plugins import PluginError

    if name in registry.builtins:
        return name
    try:
        registry.load(name)
    except PluginError as exc:
        raise PluginError(str(exc)) from None
    return name


class DataConfig(_Model):
    """The dataset (a built-in of edgestream.data, a user's factory by import path or entry point) and how
    it is split over the devices. Which fields a built-in takes: edgestream.data.formats."""

    dataset: str = "digits"
    root: str | None = None
    path: str | None = None  # npz / csv / parquet / windows: the file
    target: str | list[str] | None = None  # csv / parquet / windows: the target column(s)
    features: list[str] | None = None  # csv / parquet / windows: the input columns (default: all others)
    window: Int | None = Field(None, ge=1)  # windows: samples per window
    stride: Int | None = Field(None, ge=1)  # windows: step between windows (default 1)
    horizon: Int | None = Field(None, ge=0)  # windows: how far past the window's end the target is (default 1)
    test_fraction: Float | None = Field(None, gt=0, lt=1)  # held-out share when a file has no test split (0.2)
    kwargs: dict[str, Any] = Field(default_factory=dict)  # a dataset factory's keyword arguments
    partition: Literal["iid", "labels", "dirichlet"] = "iid"
    labels_per_device: Int = Field(1, ge=1)
    alpha: Float = Field(0.5, gt=0)
    share_samples: bool = False  # more devices than the partition can give disjoint shards: devices share them
    shape: list[Int] | None = None
    num_classes: Int | None = Field(None, ge=2)
    n_train: Int | None = Field(None, ge=10)
    n_test: Int | None = Field(None, ge=10)
    signal: Float | None = Field(None, gt=0, le=10)  # synthetic only: class-pattern strength (1.0; lower is harder)
    target_dim: Int | None = Field(None, ge=1)  # external streams, regression: a vector target of K (default scalar)

    @field_validator("dataset")
    @classmethod
    def _dataset(cls, name: str) -> str:
        from edgestream.plugins import DATASETS

        return _plugin_name(DATASETS, name)

    @field_validator("shape")
    @classmethod
    def _shape(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not 1 <= len(v) <= 3 or any(d < 1 for d in v)):
            raise ValueError("must be [features], [channels, length] or [channels, height, width], "
                             "every entry >= 1")
        return v

    @model_validator(mode="after")
    def _root(self) -> DataConfig:
        if self.dataset in ("cifar10", "cifar100", "mnist", "folder") and not self.root:
            raise ValueError(f"root: required for dataset {self.dataset!r} (the folder holding its files)")
        if self.dataset in ("npz", "csv", "parquet", "windows") and not self.path:
            raise ValueError(f"path: required for dataset {self.dataset!r} (the file to read)")
        if self.signal is not None and self.dataset != "synthetic":
            raise ValueError(f"signal: only the synthetic dataset takes it (this is {self.dataset!r})")
        return self


class RatesConfig(_Model):
    """Per-device stream rates S_i: a preset of paper 004 Table I, or a distribution."""

    preset: str | None = None
    distribution: Literal["constant", "uniform", "normal", "lognormal", "exponential", "trace"] | None = None
    rate: Float | None = Field(None, gt=0)
    low: Float | None = Field(None, ge=0)
    high: Float | None = Field(None, gt=0)
    mean: Float | None = Field(None, gt=0)
    std: Float | None = Field(None, ge=0)
    sigma: Float | None = Field(None, ge=0)
    path: str | None = None
    min_rate: Float = Field(1.0, gt=0)

    _required = {
        "constant": ("rate",), "uniform": ("low", "high"), "normal": ("mean", "std"),
        "lognormal": ("mean", "sigma"), "exponential": ("mean",), "trace": ("path",),
    }

    @field_validator("rate", "low", "high", "mean", "std", "min_rate")
    @classmethod
    def _at_most_max_rate(cls, v: float | None) -> float | None:
        if v is not None and v > MAX_RATE:
            raise ValueError(f"must be <= {MAX_RATE:.0f} (samples/s per device)")
        return v

    @field_validator("preset")
    @classmethod
    def _preset(cls, v: str | None) -> str | None:
        if v is None:
            return v
        v = PRESET_ALIASES.get(v, v)
        if v not in RATE_PRESETS:
            raise ValueError(f"must be one of {', '.join(RATE_PRESETS)}")
        return v

    @model_validator(mode="after")
    def _combination(self) -> RatesConfig:
        if (self.preset is None) == (self.distribution is None):
            raise ValueError("give exactly one of 'preset' or 'distribution'")
        given = {k for k in ("rate", "low", "high", "mean", "std", "sigma", "path") if getattr(self, k) is not None}
        if self.preset is not None:
            if given:
                raise ValueError(f"preset {self.preset!r} takes no other fields (got {', '.join(sorted(given))})")
            return self
        need = self._required[self.distribution]
        missing = [k for k in need if getattr(self, k) is None]
        if missing:
            raise ValueError(f"distribution {self.distribution!r} needs {', '.join(need)}; "
                             f"missing {', '.join(missing)}")
        extra = given - set(need)
        if extra:
            raise ValueError(f"distribution {self.distribution!r} takes only {', '.join(need)}; "
                             f"remove {', '.join(sorted(extra))}")
        if self.distribution == "uniform" and self.low >= self.high:
            raise ValueError(f"uniform needs low < high (got low={self.low}, high={self.high})")
        return self

    def spec(self) -> dict[str, Any]:
        """The plain dict streams.build_rate_model takes (without min_rate)."""
        return self.model_dump(exclude_none=True, exclude={"min_rate"})


class VariationConfig(_Model):
    """Intra-device rate variation over time."""

    kind: Literal["none", "sinusoid", "random_walk", "bursts"] = "none"
    period_s: Float | None = Field(None, gt=0)
    amplitude: Float | None = Field(None, ge=0, lt=1)
    sigma: Float | None = Field(None, ge=0)
    step_s: Float | None = Field(None, gt=0)
    every_s: Float | None = Field(None, gt=0)
    duration_s: Float | None = Field(None, gt=0)
    factor: Float | None = Field(None, gt=0)

    _allowed = {
        "none": (), "sinusoid": ("period_s", "amplitude"), "random_walk": ("sigma", "step_s"),
        "bursts": ("every_s", "duration_s", "factor"),
    }

    @model_validator(mode="after")
    def _fields(self) -> VariationConfig:
        allowed = self._allowed[self.kind]
        given = {k for k in ("period_s", "amplitude", "sigma", "step_s", "every_s", "duration_s", "factor")
                 if getattr(self, k) is not None}
        extra = given - set(allowed)
        if extra:
            raise ValueError(f"variation {self.kind!r} takes only {', '.join(allowed) or 'no fields'}; "
                             f"remove {', '.join(sorted(extra))}")
        return self

    def spec(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class ComputeConfig(_Model):
    """Step time t_i(b) = t(b) * static_i * (1 + U(0, dynamic)), t(b) = base_s + per_sample_s * b, or the
    measured curve of a compute profile (`profile`: a shipped NAME or a FILE, edgestream.profiles;
    `profile_model`: its entry, default the one named like model.name, else the profile's only one); neither:
    timed on this machine."""

    static: list[Float] = Field(default_factory=lambda: [1.0], min_length=1)
    dynamic: Float = Field(0.0, ge=0)
    base_s: Float | None = Field(None, ge=0)
    per_sample_s: Float | None = Field(None, ge=0)
    profile: str | None = Field(None, min_length=1)
    profile_model: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one_step_model(self) -> ComputeConfig:
        if self.profile is not None and (self.base_s is not None or self.per_sample_s is not None):
            raise ValueError("profile: give either a compute profile or base_s / per_sample_s, not both")
        if self.profile_model is not None and self.profile is None:
            raise ValueError("profile_model: names an entry of a compute profile; set profile too")
        return self

    @field_validator("static")
    @classmethod
    def _positive(cls, v: list[float]) -> list[float]:
        if any(s <= 0 for s in v):
            raise ValueError("every static factor must be > 0")
        return v


class NetworkConfig(_Model):
    latency_ms: Float = Field(5.0, ge=0)
    bandwidth_mbps: Float = Field(1000.0, gt=0)


class DevicesConfig(_Model):
    count: Int = Field(16, ge=1, le=100_000)
    rates: RatesConfig = Field(default_factory=lambda: RatesConfig(preset="S1"))
    variation: VariationConfig = Field(default_factory=VariationConfig)
    compute: ComputeConfig = Field(default_factory=ComputeConfig)
    network: NetworkConfig = Field(default_factory=NetworkConfig)


class ModelConfig(_Model):
    """A built-in model, or a user's factory by import path / entry point, called as
    factory(input_shape, num_outputs, **kwargs) -> torch.nn.Module (edgestream.plugins.MODELS)."""

    name: str = "cnn-small"
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        from edgestream.plugins import MODELS

        return _plugin_name(MODELS, name)


class ServerOptimConfig(_Model):
    """The parameter server's optimizer (PS algorithms): SGD on W, plain by default as in the papers."""

    momentum: Float = Field(0.0, ge=0, lt=1)
    weight_decay: Float = Field(0.0, ge=0)


class OptimConfig(_Model):
    """lr and its schedule for every algorithm; momentum / weight_decay: the workers' local SGD;
    server: the parameter server's SGD (PS algorithms only)."""

    lr: Float = Field(0.1, gt=0)
    momentum: Float = Field(0.9, ge=0, lt=1)
    weight_decay: Float = Field(1e-4, ge=0)
    milestones: list[Float] = Field(default_factory=list)
    gamma: Float = Field(0.2, gt=0, le=1)
    server: ServerOptimConfig = Field(default_factory=ServerOptimConfig)


class BatchConfig(_Model):
    policy: Literal["fixed", "rate", "available"]
    size: Int | None = Field(None, ge=1)
    min: Int | None = Field(None, ge=1)
    max: Int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _fields(self) -> BatchConfig:
        if self.policy == "fixed":
            if self.size is None:
                self.size = 64
            if self.min is not None or self.max is not None:
                raise ValueError("policy 'fixed' takes only 'size'")
        elif self.policy == "rate":
            if self.size is not None:
                raise ValueError("policy 'rate' takes 'min' and 'max', not 'size'")
            self.min = 8 if self.min is None else self.min
            self.max = 1024 if self.max is None else self.max
            if self.min > self.max:
                raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        else:
            if self.size is not None or self.min is not None:
                raise ValueError("policy 'available' takes only 'max'")
            self.max = 512 if self.max is None else self.max
        return self

    def spec(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class InjectionConfig(_Model):
    """ScaDLES randomized data injection: ceil(alpha*M) peers get floor(beta*b_i) samples each step."""

    alpha: Float = Field(0.1, gt=0, le=1)
    beta: Float = Field(0.1, gt=0, le=1)
    mode: Literal["samples", "labels"] = "samples"


class AlgorithmConfig(_Model):
    name: str = "scadles"
    batch: BatchConfig | None = None
    buffer: Literal["persist", "truncate"] = "persist"
    #: bound on a device's backlog in seconds of data (null: unbounded). A device whose oldest unread
    #: sample is older than this skips ahead to the samples of the last `max_lag_s` seconds before it takes
    #: a batch (the truncate reading, whatever `buffer` says); the skipped samples are counted as dropped
    max_lag_s: Float | None = Field(None, gt=0)
    injection: InjectionConfig | None = None
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _registered(cls, name: str) -> str:
        """A built-in algorithm of edgestream.sync, or a user's AlgorithmSpec by import path / entry point."""
        from edgestream.sync.registry import get_algorithm

        get_algorithm(name, field="")
        return name

    @model_validator(mode="after")
    def _default_batch(self) -> AlgorithmConfig:
        if self.batch is None:  # the algorithm declares its default batch policy in the registry
            from edgestream.sync.registry import get_algorithm

            self.batch = BatchConfig(**get_algorithm(self.name).default_batch)
        return self


class CompressionConfig(_Model):
    """A built-in compressor or a user's factory(spec) -> Compressor (edgestream.plugins.COMPRESSORS);
    kwargs: a user compressor's own options (they reach its factory in the spec)."""

    name: str = "none"
    kwargs: dict[str, Any] = Field(default_factory=dict)
    ratio: Float = Field(0.1, gt=0, le=1)
    delta: Float = Field(0.3, ge=0)
    levels: Int = Field(256, ge=2)
    memory: Literal["none", "residual", "dgc"] | None = None
    statistic: Literal["ewma", "reference"] = "ewma"

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        from edgestream.plugins import COMPRESSORS

        return _plugin_name(COMPRESSORS, name)

    def spec(self) -> dict[str, Any]:
        out = self.model_dump(exclude_none=True)
        if not out.get("kwargs"):
            out.pop("kwargs", None)
        return out


class TargetMetricConfig(_Model):
    """Stop when an evaluation reaches `value` of metric `name` (accuracy: >=; rmse, mae, loss: <=)."""

    name: str
    value: Float


class StopConfig(_Model):
    """When a run ends: the first of max_steps, max_time_s and the target (target_accuracy, or
    target_metric). A config without `stop` gets the defaults (target_accuracy 0.9, max_time_s 600);
    `stop: {}` (or `stop:` with nothing) is continuous training: no target, no time or step limit, the
    run trains until it is interrupted (SIGTERM / Ctrl-C: a resumable checkpoint, `--resume`). Fields
    set to null spell the same: with none left the run is continuous; with only a target it trains
    until the target or an interrupt. Real runs only: the simulator needs max_time_s or max_steps."""

    target_accuracy: Float | None = Field(0.9, gt=0, le=1)
    target_metric: TargetMetricConfig | None = None
    max_time_s: Float | None = Field(600.0, gt=0)
    max_steps: Int | None = Field(None, ge=1)

    @property
    def bounded(self) -> bool:
        """Whether the run has a time or step limit (it ends even if it never reaches its target)."""
        return self.max_time_s is not None or self.max_steps is not None

    @property
    def continuous(self) -> bool:
        """Continuous training: no target, no time or step limit (`stop: {}`)."""
        return not self.bounded and self.target_accuracy is None and self.target_metric is None


class EvalConfig(_Model):
    """When the global model is scored, and on what: data.dataset's test split (internal streams); external
    streams: a file (`path`: an .npz with x, y or x_test, y_test) or a deterministic hold-out of the streams
    (`holdout`: the share of each device's records, chosen by a hash of device and offset, never trained on;
    the evaluator keeps the newest `holdout_max` of them)."""

    every_s: Float = Field(5.0, gt=0)
    path: str | None = Field(None, min_length=1)
    holdout: Float | None = Field(None, gt=0, lt=1)
    holdout_max: Int = Field(10000, ge=10)

    @model_validator(mode="after")
    def _one_set(self) -> EvalConfig:
        if self.path is not None and self.holdout is not None:
            raise ValueError("give either path (a file) or holdout (a share of the streams), not both")
        return self


class CheckpointConfig(_Model):
    """Real runs (engine local / `edgestream train`): save model, optimizer, algorithm state and the
    committed offsets every `every_steps` steps (null: never); acks are committed with each checkpoint."""

    every_steps: Int | None = Field(None, ge=1)
    #: seconds of training between checkpoints (alongside every_steps: either or both; null: no timer). A
    #: run without a time or step limit (`stop: {}`) that gives neither field gets CONTINUOUS_EVERY_S (`config show`).
    #: Collective algorithms: the ranks agree on the step (rank 0's clock decides, edgestream.trainer.schedule)
    every_s: Float | None = Field(None, gt=0)

    @property
    def enabled(self) -> bool:
        return self.every_steps is not None or self.every_s is not None


#: checkpoint.every_s of a continuous run that gives neither checkpoint field
CONTINUOUS_EVERY_S = 60.0


class RuntimeConfig(_Model):
    engine: Literal[ENGINES] = "sim"  # edgestream.engine_names
    bootstrap: str | None = None
    out: str = "runs/"
    kafka_client: dict[str, str] = Field(default_factory=dict)
    #: the real trainers' AllReduce (edgestream.trainer.collectives): "allreduce" = torch.distributed.all_reduce
    #: in buckets (ring/tree by the backend); "exact" = all-gather + rank-order sum, bitwise the simulator's
    reduction: Literal["allreduce", "exact"] = "allreduce"
    #: the all-reduce bucket size in MiB (DDP's bucket_cap_mb); "allreduce" only
    bucket_mb: Float = Field(25.0, gt=0)
    #: real runs: how long trainers, the producer and the parameter server wait for an unreachable Kafka
    #: (a broker restart, a rolling upgrade, a network blip) before the run stops, resumable
    kafka_outage_s: Float = Field(300.0, gt=0)
    #: real runs: a warning line when a device's backlog (consumer lag) has kept growing for this long
    lag_warning_s: Float = Field(60.0, gt=0)
    #: real runs: what happens to the run's topics and consumer groups when it ends; "delete-on-success"
    #: removes them after a finished run (a failed or stopped run keeps them for --resume)
    cleanup: Literal["keep", "delete-on-success"] = "keep"
    #: real runs: the GPUs (torch indices among those CUDA_VISIBLE_DEVICES shows) the trainer ranks of a
    #: host take, local rank r -> gpus[r % len]; null = all, r % device_count (edgestream.trainer.gpus)
    gpus: list[Int] | None = None

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or any(i < 0 for i in v)):
            raise ValueError("must list GPU indices >= 0 (e.g. [0, 1]), or be null for all "
                             "(EDGESTREAM_DEVICE=cpu for the CPU)")
        return v

    @field_validator("kafka_client", mode="before")
    @classmethod
    def _client_values(cls, v: Any) -> Any:
        """Scalar values become the strings librdkafka takes (true/false lowercase); a secret's value
        never appears in an error message."""
        if not isinstance(v, dict):
            return v
        out = {}
        for key, val in v.items():
            if isinstance(val, bool):
                val = "true" if val else "false"
            elif isinstance(val, (int, float)) and not isinstance(val, bool):
                if isinstance(val, float) and not math.isfinite(val):
                    raise ValueError(f"{key}: {val} is not allowed; must be finite")
                val = str(val)
            elif not isinstance(val, str):
                shown = SECRET_MASK if is_secret_key(str(key)) else repr(val)
                raise ValueError(f"{key}: {shown} is not allowed; must be a string or a number")
            out[key] = val
        return out

    @field_validator("bootstrap")
    @classmethod
    def _bootstrap(cls, v: str | None) -> str | None:
        if v is not None and not bootstrap_ok(v):
            raise ValueError("must be HOST:PORT[,HOST:PORT...]")
        return v

    @field_validator("kafka_client")
    @classmethod
    def _client_keys(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if key in TOPIC_KEYS:
                raise ValueError(f"key {key!r} is a setting of the run's topics, not of a client; use "
                                 f"kafka.topics.{TOPIC_KEYS[key]}")
            if not key.startswith(CLIENT_KEY_PREFIXES):
                raise ValueError(f"key {key!r} is not a pass-through client setting; allowed: "
                                 + ", ".join(p + ("*" if p.endswith(".") else "") for p in CLIENT_KEY_PREFIXES))
        proto = v.get("security.protocol")
        if proto is not None and proto.upper() not in SECURITY_PROTOCOLS:
            raise ValueError(f"security.protocol: {proto!r} is not allowed; must be one of "
                             f"{', '.join(SECURITY_PROTOCOLS)} (any case)")
        return {k: str(val) for k, val in v.items()}


class ExperimentConfig(_Model):
    name: str = Field("edgestream", pattern=r"^[A-Za-z0-9][A-Za-z0-9_\-]*$", max_length=100)
    seed: Int = 0
    data: DataConfig = Field(default_factory=DataConfig)
    devices: DevicesConfig = Field(default_factory=DevicesConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    task: str = "classification"  # a built-in task, or a user's edgestream.tasks.Task (edgestream.plugins.TASKS)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    compression: CompressionConfig = Field(default_factory=CompressionConfig)
    stop: StopConfig = Field(default_factory=StopConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    kafka: KafkaConfig = Field(default_factory=KafkaConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    streams: StreamsConfig = Field(default_factory=StreamsConfig)

    @field_validator("task")
    @classmethod
    def _task(cls, name: str) -> str:
        from edgestream.plugins import TASKS

        return _plugin_name(TASKS, name)

    @field_validator("stop", mode="before")
    @classmethod
    def _continuous(cls, v: Any) -> Any:
        """`stop: {}` / `stop:` (null): continuous training, every field null (not the defaults, which only a
        config without `stop` gets)."""
        if v is None or (isinstance(v, dict) and not v):
            return {"target_accuracy": None, "target_metric": None, "max_time_s": None, "max_steps": None}
        return v

    @model_validator(mode="after")
    def _task_fits(self) -> ExperimentConfig:
        """The stop target names a metric of the task; a regression run has no accuracy to stop at (the
        default target_accuracy then does not apply)."""
        from edgestream.tasks import get_task

        task = get_task(self.task)
        stop = self.stop
        if not task.labels and stop.target_accuracy is not None:
            if "target_accuracy" in stop.model_fields_set:
                raise ValueError(f"stop.target_accuracy: task {task.name!r} has no accuracy; use "
                                 f"stop.target_metric: {{name: {task.primary}, value: V}} (metrics: "
                                 f"{', '.join(task.metrics)})")
            stop.target_accuracy = None
        if stop.target_metric is not None:
            if stop.target_metric.name not in task.metrics:
                raise ValueError(f"stop.target_metric.name: {stop.target_metric.name!r} is not a metric of task "
                                 f"{task.name!r}; must be one of {', '.join(task.metrics)}")
            if "target_accuracy" in stop.model_fields_set and stop.target_accuracy is not None:
                raise ValueError("stop.target_metric: give either target_accuracy or target_metric, not both")
            stop.target_accuracy = None
        if self.data.partition != "iid" and not task.labels:
            raise ValueError(f"data.partition: {self.data.partition!r} splits by class labels; task {task.name!r} "
                             "has none (use iid)")
        inj = self.algorithm.injection
        if inj is not None and inj.mode == "labels" and not task.labels:
            raise ValueError(f"algorithm.injection.mode: 'labels' injects by class labels; task {task.name!r} "
                             "has none (use samples)")
        return self

    @model_validator(mode="after")
    def _streams_fit(self) -> ExperimentConfig:
        """External streams (streams.source: external) bring their records, not a dataset: data gives only the
        samples' shape and targets, the run is real (no simulator), evaluation needs eval.path or eval.holdout.
        An internal run has data.dataset's test split (eval.path / holdout / data.target_dim do not apply)."""
        from edgestream.tasks import get_task

        data, ev = self.data, self.eval
        if not self.streams.external:
            for key in ("path", "holdout"):
                if getattr(ev, key) is not None:
                    raise ValueError(f"eval.{key}: applies to external streams (streams.source: external); an "
                                     "internal run evaluates on data.dataset's test split")
            if data.target_dim is not None:
                raise ValueError("data.target_dim: applies to external streams (the synthetic dataset takes "
                                 "data.kwargs.target_dim)")
            return self
        if self.runtime.engine != "local":
            raise ValueError("streams.source: external streams are read by real trainers; set runtime.engine: local "
                             "(the simulator replays data.dataset)")
        allowed = ("shape", "num_classes", "target_dim")
        # a field that differs from its default (config.yaml round trips write every field)
        extra = sorted(k for k, f in DataConfig.model_fields.items()
                       if k not in allowed and getattr(data, k) != f.get_default(call_default_factory=True))
        if extra:
            raise ValueError(f"data.{extra[0]}: external streams bring their own records; data takes only "
                             f"{', '.join(allowed)} (the records' input shape and their targets)")
        if data.shape is None:
            raise ValueError("data.shape: required for external streams (each record's input shape, e.g. [8])")
        labels = get_task(self.task).labels
        if labels and data.num_classes is None:
            raise ValueError(f"data.num_classes: required for external streams of task {self.task!r} (class "
                             "indices 0..num_classes-1)")
        if not labels and data.num_classes is not None:
            raise ValueError(f"data.num_classes: task {self.task!r} has float targets; give data.target_dim for a "
                             "vector target (default: a scalar)")
        if labels and data.target_dim is not None:
            raise ValueError(f"data.target_dim: task {self.task!r} has class targets (data.num_classes)")
        if self.kafka.topics.layout == "partitioned":
            raise ValueError("kafka.topics.layout: partitioned lays out the run's own stream topics; external "
                             "streams are where streams.topic says")
        if ev.path is None and ev.holdout is None:
            stop = self.stop
            if stop.target_metric is not None or "target_accuracy" in stop.model_fields_set \
                    and stop.target_accuracy is not None:
                raise ValueError("stop: a target metric needs an evaluation set: give eval.path (a file) or "
                                 "eval.holdout (a share of the streams)")
            stop.target_accuracy = None
        return self

    @model_validator(mode="after")
    def _continuous_checkpoints(self) -> ExperimentConfig:
        """A run without a time or step limit (continuous, or a target alone: either may train for days) that
        sets neither checkpoint field checkpoints every CONTINUOUS_EVERY_S seconds (an explicit
        `checkpoint: {every_steps: null, every_s: null}` keeps none)."""
        if not self.stop.bounded and not self.checkpoint.model_fields_set & {"every_steps", "every_s"}:
            self.checkpoint.every_s = CONTINUOUS_EVERY_S
        return self

    def target(self) -> tuple[str, float] | None:
        """(metric, value) a run stops at, or None: stop.target_metric, else stop.target_accuracy."""
        if self.stop.target_metric is not None:
            return self.stop.target_metric.name, float(self.stop.target_metric.value)
        if self.stop.target_accuracy is not None:
            return "accuracy", float(self.stop.target_accuracy)
        return None

    def to_yaml(self, *, reveal_secrets: bool = False) -> str:
        """The fully resolved config as YAML (fields that do not apply to the chosen kind left out).

        Secret runtime.kafka_client values (see `is_secret_key`) show as "***" unless `reveal_secrets`:
        this is what `config show` prints and run directories store; the object keeps the real values.
        """
        raw = self.model_dump(mode="json")
        for section in (raw["devices"]["rates"], raw["devices"]["variation"], raw["algorithm"]["batch"],
                        raw["streams"]):
            for key in [k for k, v in section.items() if v is None]:
                del section[key]
        if not reveal_secrets:
            client = raw["runtime"]["kafka_client"]
            for key in client:
                if is_secret_key(key):
                    client[key] = SECRET_MASK
        return yaml.safe_dump(raw, sort_keys=False)


# ---------------------------------------------------------------- error formatting



def _allowed_fields(model: type[BaseModel], loc: tuple) -> list[str]:
    """Field names allowed at the parent of `loc` (for unknown-field messages)."""
    cur: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or not (isinstance(cur, type) and issubclass(cur, BaseModel)):
            return []
        field = cur.model_fields.get(part)
        if field is None:
            return []
        ann = field.annotation
        args = getattr(ann, "__args__", ())
        cur = next((a for a in (ann, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None)
    if isinstance(cur, type) and issubclass(cur, BaseModel):
        return list(cur.model_fields)
    return []


def _describe(err: dict, model: type[BaseModel]) -> str:
    loc = tuple(p for p in err["loc"] if p not in ("function-after",) and not str(p).startswith("function"))
    path = ".".join(str(p) for p in loc) or "(top level)"
    typ, ctx, value = err["type"], err.get("ctx", {}), err.get("input")
    shown = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip() \
        if isinstance(value, (int, float, str, bool, list)) or value is None else repr(value)
    bounds = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
    if typ in bounds:
        limit = next(iter(ctx.values()))
        limit = int(limit) if isinstance(limit, float) and limit.is_integer() else limit
        return f"{path}: {shown} is not allowed; must be {bounds[typ]} {limit}"
    if typ == "extra_forbidden":
        allowed = _allowed_fields(model, loc)
        hint = f"; allowed fields: {', '.join(allowed)}" if allowed else ""
        return f"{path}: unknown field{hint}"
    if typ == "literal_error":
        return f"{path}: {shown} is not allowed; must be one of {ctx.get('expected', '')}"
    if typ == "missing":
        return f"{path}: required field is missing"
    if typ == "int_type" and isinstance(value, bool):
        return f"{path}: {shown} is not allowed; must be an integer, not true/false"
    if typ in ("too_short", "too_long"):
        return f"{path}: {shown} is not allowed; {err['msg'].lower()}"
    if typ == "string_pattern_mismatch":
        return f"{path}: {shown} is not allowed; use letters, digits, '-' and '_' (starting with a letter or digit)"
    msg = err["msg"].removeprefix("Value error, ")
    from edgestream.plugins import PluginError

    if typ == "value_error" and isinstance(ctx.get("error"), PluginError):  # names the value itself
        return f"{path}: {msg}"
    head, colon, rest = msg.partition(": ")
    if typ == "value_error" and colon and " " not in head:  # "field: message" from a model validator
        return f"{head}: {rest}" if not loc else f"{path}.{head}: {rest}"
    if typ == "value_error":
        if value is None or isinstance(value, dict):
            return f"{path}: {msg}"
        return f"{path}: {shown} is not allowed; {msg}"
    return f"{path}: {shown} is not allowed; {msg[0].lower() + msg[1:]}"


def validate_dict(raw: Any, source: str = "config") -> ExperimentConfig:
    """Validate a parsed YAML document; raise ConfigError listing every problem."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError([f"(top level): must be a mapping of fields, got {type(raw).__name__}"], source)
    try:
        cfg = ExperimentConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError([_describe(e, ExperimentConfig) for e in exc.errors()], source) from None
    problems = algorithm_param_problems(cfg.algorithm.name, cfg.algorithm.params)
    if problems:
        raise ConfigError(problems, source)
    return cfg


def algorithm_param_problems(name: str, params: dict) -> list[str]:
    """Problems with `algorithm.params` per the algorithm's own schema (edgestream.sync registry)."""
    from edgestream.sync.registry import get_algorithm

    try:
        spec = get_algorithm(name)
    except ValueError:
        return []  # the name's own problem is reported on algorithm.name
    return spec.validate(params)


#: the config sections a resumed run may change (where it stops, when it evaluates, how it connects);
#: everything else decides what the model learns, so a checkpoint is pinned to it (trainer/checkpoint.py,
#: and the orchestrator's --resume check)
RESUME_MAY_CHANGE = ("runtime", "stop", "eval")


def load_config(path: str | Path, overrides: list[str] | None = None, *, check: bool = True) -> ExperimentConfig:
    """Read, apply `key.path=value` overrides (values parsed as YAML), and validate a config file.

    The file must give `name`. Relative paths (PATH_FIELDS) resolve against the file's folder, or the
    current directory when an override set them, and are stored absolute. With `check` (the default)
    what can be built without a broker is built too (edgestream.config_check.check_buildable). Every
    problem, including an unreadable file, raises ConfigError with one line each.
    """
    p = Path(path)
    src = str(p)
    if not p.exists():
        raise ConfigError([f"{p}: no such file"], src)
    if p.is_dir():
        raise ConfigError([f"{p}: is a folder, not a config file"], src)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError([f"{p}: not a text (UTF-8) file"], src) from None
    except OSError as exc:
        raise ConfigError([f"{p}: cannot read: {exc.strerror or exc}"], src) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{p}: not valid YAML: " + " ".join(str(exc).split())], src) from None
    empty = raw is None
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError([f"(top level): must be a mapping of fields, got {type(raw).__name__}"], src)
    return load_dict(raw, overrides, p.parent.absolute(), src, require_name=True, empty=empty, check=check)


def load_dict(raw: dict, overrides: list[str] | None = None, base: str | Path | None = None, source: str = "config",
              *, require_name: bool = False, empty: bool = False, check: bool = True) -> ExperimentConfig:
    """A parsed config (`raw`, modified in place) as `load_config` treats a file's: `key.path=value`
    overrides applied, `base` (the file's folder; None = the current directory) put on the import path (here
    and in child processes), relative paths resolved against it (against the current directory where an
    override set them), validated, and with `check` what can be built without a broker built too.
    ConfigError with one line per problem."""
    from_cli: set[tuple[str, ...]] = set()
    for item in overrides or []:
        key = apply_override(raw, item)
        from_cli |= {f for f in PATH_FIELDS if f[:len(key)] == key}
    folder = Path(base).absolute() if base is not None else Path.cwd()
    from edgestream.plugins import add_search_path

    add_search_path(folder)  # import paths resolve from the config's folder, here and in child processes
    for field in PATH_FIELDS:
        _resolve_path(raw, field, Path.cwd() if field in from_cli else folder)
    problems = []
    if require_name and "name" not in raw:
        problems.append(NAME_REQUIRED + ("; the file is empty" if empty and not overrides else ""))
    try:
        cfg = validate_dict(raw, source)
    except ConfigError as exc:
        raise ConfigError(problems + exc.problems, source) from None
    if check:
        problems += check_buildable(cfg)
    if problems:
        raise ConfigError(problems, source)
    return cfg


def _resolve_path(raw: dict, field: tuple[str, ...], base: Path) -> None:
    """Make the path at `field` of a raw config absolute (relative to `base`, ~ expanded), if it is a
    relative path string; anything else is left for validation to judge."""
    cur: Any = raw
    for part in field[:-1]:
        cur = cur.get(part) if isinstance(cur, dict) else None
    if not isinstance(cur, dict):
        return
    value = cur.get(field[-1])
    if not isinstance(value, str) or not value.strip():
        return
    if field in NAME_OR_PATH and "/" not in value and not value.endswith((".yaml", ".yml")):
        return  # a name, not a path
    path = Path(value).expanduser()
    cur[field[-1]] = os.path.normpath(path if path.is_absolute() else base / path)


def apply_override(raw: dict, item: str) -> tuple[str, ...]:
    """Set `a.b.c=value` in a raw config dict (value parsed as YAML); returns the key path set.

    Below runtime.kafka_client the rest of the key is one client setting (its name holds dots):
    `runtime.kafka_client.security.protocol=SSL`.
    """
    key, sep, value = item.partition("=")
    parts = key.strip().split(".")
    if not sep or not key.strip() or any(not part for part in parts):
        raise ConfigError([f"--set {item!r}: expected KEY.PATH=VALUE"])
    if parts[:2] == ["runtime", "kafka_client"] and len(parts) > 3:
        parts = [*parts[:2], ".".join(parts[2:])]
    try:
        parsed = yaml.safe_load(value)
    except yaml.YAMLError as exc:
        detail = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise ConfigError([f"--set {key.strip()}: value is not valid YAML ({detail})"]) from None
    cur = raw
    for part in parts[:-1]:
        nxt = cur.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            cur[part] = nxt
        cur = nxt
    cur[parts[-1]] = parsed
    return tuple(parts)


def uniform_bounds(mean: float, std: float) -> tuple[float, float]:
    """Bounds of the uniform distribution with this mean and std: mean -/+ sqrt(3) std."""
    half = math.sqrt(3.0) * std
    return mean - half, mean + half
