"""`RunPlan.resolve(cfg)`: the ONE place an experiment config is interpreted.

Every host of a run -- producer, consumer, simulator, lockstep engine, trainer process, orchestrator --
takes its pieces from a plan instead of reading `cfg.*` itself, so that one concept (the dataset and its
sample spec, the shards, the rate model, the policies, the algorithm and its defaults, the contexts a
worker or a coordinator gets) is built from the config in exactly one way. Before the plan existed the
dataset was built in four places and one drifted (the consumer ignored `data.num_classes`, so a
synthetic dataset with more than 10 classes sent half its samples to the DLQ).

Cheap pieces are resolved at once (the algorithm spec and its params, policies' specs: a bad value
fails `resolve` with a `PlanError` naming the field); the expensive ones (the dataset, the rate model)
are built on first use and cached, so a process loads the dataset once.

Pieces: `dataset`, `sample_spec`, `shards`, `serde`, `rate_model`, `batch` / `batch_policy()`, `buffer` /
`buffer_policy()`, `injection`, `compression`, `algorithm` (the registry's `AlgorithmSpec`), `params`
(its resolved params), `stop_rule()`, `worker_context(rank, ...)`, `server_context()`, `build_model()`,
`build_optimizer(model)`, `compute` / `slowdown(rank)`, `network`, `due_time(device)`, `drift_scenario`, and the Kafka
pieces `stream_identity()`, `layout(run)` and `topic_settings(bootstrap)`. The plan knows no consumer or
producer: they are built from it beside them (edgestream.consumers.from_plan: `kafka_dataset`, `eval_data`;
edgestream.producers.from_plan: `stream_producer`). The warnings about optimizer settings a config's algorithm
will not use: runner/optim_notes.py.

Over 450 lines on purpose: RunPlan is a config's one reading, properties over one cfg and cache; split, it scatters.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edgestream.runner.engines import EngineError
from edgestream.runner.optim_notes import optimizer_notes  # noqa: F401 - handed on (its users import it here)
from edgestream.runner.stop import StopRule
from edgestream.sync.context import StopTest, WorkerContext, never_stop
from edgestream.sync.coordinator import ServerContext
from edgestream.sync.registry import AlgorithmSpec, get_algorithm


class PlanError(EngineError):
    """A config that cannot be turned into a run (bad algorithm params, dataset sizes, rates...);
    `problems` holds one line per problem, each naming the field."""


@dataclass(frozen=True)
class ComputeSpec:
    """devices.compute: step time (base_s + per_sample_s b) static_i (1 + U(0, dynamic)); None = time
    the real model on this machine."""

    static: tuple[float, ...]
    dynamic: float
    base_s: float | None
    per_sample_s: float | None
    curve: Any = None  # a compute profile's Curve (edgestream.profiles): t(b) seconds, instead of base/per

    def step_seconds(self, b: int) -> float | None:
        """t(b) before the device factors: the profile's curve, base_s + per_sample_s b, or None (time the
        real model)."""
        if self.curve is not None:
            return float(self.curve(b))
        if self.base_s is not None and self.per_sample_s is not None:
            return float(self.base_s) + float(self.per_sample_s) * b
        return None

    def factor(self, device: int) -> float:
        """static_i: device i's fixed slowdown (the factors cycle over devices)."""
        return float(self.static[device % len(self.static)])


@dataclass(frozen=True)
class NetworkSpec:
    """devices.network: one latency and bandwidth for every device."""

    latency_s: float
    bandwidth_Bps: float


# partition_indices' argument names as the config's fields (its errors begin with the argument's name)
PARTITION_FIELDS = {"num_devices": "devices.count", "scheme": "data.partition", "labels": "data.partition",
                    "labels_per_device": "data.labels_per_device", "alpha": "data.alpha",
                    "share_samples": "data.share_samples"}


@dataclass
class RunPlan:
    """A resolved run (see the module doc); build it with `RunPlan.resolve(cfg)`."""

    cfg: Any
    base_dir: str | None
    algorithm: AlgorithmSpec
    params: dict[str, Any]
    batch: dict[str, Any]
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------ construction
    @classmethod
    def resolve(cls, cfg: Any, *, base_dir: str | Path | None = None) -> RunPlan:
        """The plan of `cfg` (a validated ExperimentConfig). base_dir: the folder relative paths in the
        config (rate traces) are relative to. PlanError lists what cannot run."""
        try:
            spec = get_algorithm(cfg.algorithm.name)
            params = spec.resolve(cfg.algorithm.params)
        except ValueError as exc:
            raise PlanError(str(exc).splitlines()) from None
        given = cfg.algorithm.batch.spec() if cfg.algorithm.batch is not None else None
        plan = cls(cfg, str(base_dir) if base_dir else None, spec, params, spec.batch_for(given))
        plan._check(lambda: (plan.batch_policy(), plan.buffer_policy()))
        if getattr(cfg.devices, "drift", None):
            plan.drift_scenario  # noqa: B018 - a scenario that cannot apply: PlanError naming the field
        if getattr(cfg, "drift", None) is not None:
            plan.drift_detector()  # an unknown detector or a bad param: PlanError naming the field
            from edgestream.runner.responses import check as responses_problems

            problems = responses_problems(plan)
            if problems:
                raise PlanError(problems)
        return plan

    def _check(self, build: Callable[[], Any]) -> Any:
        try:
            return build()
        except ValueError as exc:
            raise PlanError(str(exc).splitlines()) from None

    # ------------------------------------------------------------------ the run
    @property
    def name(self) -> str:
        return str(self.cfg.name)

    @property
    def algorithm_name(self) -> str:
        """algorithm.name as configured (a registered name, or a user's import path)."""
        return str(self.cfg.algorithm.name)

    @property
    def run_prefix(self) -> str:
        """`<name>-<algorithm>-`: how this config's run names begin (edgestream.runid)."""
        from edgestream.runid import run_prefix

        return run_prefix(self.name, self.algorithm_name)

    def run_name(self, run_id: str) -> str:
        """The run's name `<name>-<algorithm>-<run id>`: its directory under runtime.out and its Kafka topic
        prefix (ValueError for a run id that is not allowed)."""
        from edgestream.runid import run_name

        return run_name(self.name, self.algorithm_name, run_id)

    @property
    def seed(self) -> int:
        return int(self.cfg.seed)

    @property
    def world(self) -> int:
        """M: devices = workers = trainer processes."""
        return int(self.cfg.devices.count)

    @property
    def security(self) -> dict[str, Any]:
        """runtime.kafka_client: client settings for every Kafka client of the run."""
        return dict(self.cfg.runtime.kafka_client or {})

    @property
    def checkpoint_every(self) -> int | None:
        return self.cfg.checkpoint.every_steps

    @property
    def checkpoint_every_s(self) -> float | None:
        return getattr(self.cfg.checkpoint, "every_s", None)

    @property
    def checkpoints(self) -> bool:
        """Whether real runs write checkpoints (checkpoint.every_steps or checkpoint.every_s)."""
        return self.checkpoint_every is not None or self.checkpoint_every_s is not None

    @property
    def eval_every_s(self) -> float:
        return float(self.cfg.eval.every_s)

    @property
    def target_accuracy(self) -> float | None:
        return self.cfg.stop.target_accuracy

    @property
    def task(self) -> Any:
        """The run's `Task` (edgestream.tasks): the loss and the metrics."""
        from edgestream.tasks import get_task

        return get_task(getattr(self.cfg, "task", "classification"))

    @property
    def target(self) -> tuple[str, float] | None:
        """(metric, value) the run stops at (stop.target_metric or stop.target_accuracy), or None."""
        return self.cfg.target()

    @property
    def max_time_s(self) -> float | None:
        return self.cfg.stop.max_time_s

    @property
    def prequential(self) -> tuple[int, float | None] | None:
        """(window, fading) of prequential evaluation (eval.prequential; a `drift:` section turns it on with the
        defaults: edgestream.config.experiment), or None: off."""
        pq = getattr(self.cfg.eval, "prequential", None)
        return None if pq is None else (int(pq.window), pq.fading)

    def prequential_counter(self) -> Any:
        """A fresh device's `PrequentialCounter` (edgestream.metrics.prequential), or None when off."""
        spec = self.prequential
        if spec is None:
            return None
        from edgestream.metrics.prequential import PrequentialCounter

        return PrequentialCounter(self.task, *spec)

    @property
    def drift_responses(self) -> dict[str, dict[str, Any]]:
        """drift.on_detect as {response: params} ({} without a `drift:` section)."""
        d = getattr(self.cfg, "drift", None)
        return d.responses() if d is not None else {}

    def drift_detector(self) -> Any:
        """A fresh drift detector of `drift:` (edgestream.drift.detectors.make_detector), or None without one;
        PlanError naming the field for an unknown detector or a bad param."""
        d = getattr(self.cfg, "drift", None)
        if d is None:
            return None
        from edgestream.drift.detectors import make_detector

        return self._check(lambda: make_detector(d.detector, dict(d.params), self.task.labels))

    def stop_rule(self) -> StopRule:
        """A fresh stop rule (one per host: the in-process engines share one, a trainer has its own)."""
        s = self.cfg.stop
        return StopRule(s.max_steps, s.max_time_s, target=self.target)

    # ------------------------------------------------------------------ data
    @staticmethod
    def dataset_of(cfg: Any) -> Any:
        """`load_dataset` of a config's data.* fields, task and seed: what `dataset` loads and what `config
        validate` (edgestream.config.check) loads, so the two agree (loaded once per config object).
        ValueError: one line per problem."""
        from edgestream.data.datasets import load_once

        d = cfg.data
        return load_once(cfg, d.dataset, d.root, seed=int(cfg.seed), task=str(getattr(cfg, "task", "classification")),
                         shape=tuple(d.shape) if d.shape else None, num_classes=d.num_classes, n_train=d.n_train,
                         n_test=d.n_test, signal=d.signal, path=d.path, target=d.target, features=d.features,
                         window=d.window, stride=d.stride, horizon=d.horizon, test_fraction=d.test_fraction,
                         kwargs=d.kwargs)

    @property
    def external(self) -> bool:
        """Whether the run reads external streams (streams.source: external): no producer, no dataset to replay."""
        return bool(self.cfg.streams.external)

    @property
    def dataset(self) -> Any:
        """The run's `Dataset` (loaded once per plan); external streams: the samples' spec and the eval.path
        split only (edgestream.data.external)."""
        if "dataset" not in self._cache:
            try:
                if self.external:
                    from edgestream.data.external import external_dataset

                    d = self.cfg.data
                    target = None if self.task.labels else ((int(d.target_dim),) if d.target_dim else ())
                    self._cache["dataset"] = external_dataset(
                        f"stream:{self.cfg.streams.topic}", tuple(d.shape), int(d.num_classes or 0), target,
                        self.cfg.eval.path)
                    return self._cache["dataset"]
                self._cache["dataset"] = self.dataset_of(self.cfg)
            except ValueError as exc:
                raise PlanError([p if p.startswith(("data.", "task:")) else f"data.{p}"
                                 for p in str(exc).splitlines()]) from None
        return self._cache["dataset"]

    @property
    def serde(self) -> Any:
        """The run's `SampleSerde`: how producer, consumer, DLQ and injection turn samples into message
        values and back, validated against the dataset's spec and normalised as the dataset says. External
        streams: the record decoder of streams.format (edgestream.data.records), the same `decode` contract."""
        if "serde" not in self._cache:
            if self.external:
                self._cache["serde"] = self._check(self.record_decoder)
            else:
                from edgestream.data import SampleSerde

                self._cache["serde"] = SampleSerde.of(self.dataset)
        return self._cache["serde"]

    def record_decoder(self) -> Any:
        """The decoder of an external run's records: streams.format with its fields, checked against data.*."""
        import numpy as np

        from edgestream.data.records import RecordFormat, build_decoder
        from edgestream.data.validate import SampleSpec

        s, ds = self.cfg.streams, self.dataset
        dtype = np.dtype(s.dtype) if s.dtype else np.dtype(np.float32)
        spec = (SampleSpec(dtype, ds.shape, ds.num_classes) if ds.target_shape is None
                else SampleSpec(dtype, ds.shape, 0, tuple(ds.target_shape), np.float32))
        fields = s.format_fields()
        fmt = RecordFormat(name=s.format, spec=spec, keyed=not s.per_device,
                           **{k: v for k, v in fields.items()})
        return build_decoder(fmt)

    @property
    def sample_spec(self) -> Any:
        """What every consumed sample is validated against (dtype, shape, label range)."""
        return self.serde.spec

    @property
    def shards(self) -> list[Any]:
        """Dataset indices of each device's shard (data.partition; a regression task's are iid), as the
        producers stream them; with data.share_samples, devices may hold the same shard (the same array)."""
        if "shards" not in self._cache:
            import numpy as np

            from edgestream.data import partition_indices

            d = self.cfg.data
            y = self.dataset.y_train  # regression (iid only): the split depends on the sample count alone
            labels = y if self.task.labels else np.zeros(len(y), dtype=np.int64)
            def split() -> list[Any]:
                try:
                    return partition_indices(labels, self.world, d.partition, seed=self.seed,
                                             labels_per_device=d.labels_per_device, alpha=d.alpha,
                                             share_samples=d.share_samples)
                except ValueError as exc:  # the partitioner's argument names -> the config's fields
                    head, sep, rest = str(exc).partition(": ")
                    raise ValueError(f"{PARTITION_FIELDS.get(head, head)}{sep}{rest}") from None

            shards = self._check(split)
            self._cache["shards"] = [np.asarray(s) for s in shards]
        return self._cache["shards"]

    # ------------------------------------------------------------------ streams
    @property
    def rate_model(self) -> Any:
        """S_i(t) of every device (devices.rates, devices.variation)."""
        if "rates" not in self._cache:
            from edgestream.streams import build_rate_model

            dev = self.cfg.devices
            self._cache["rates"] = self._check(lambda: build_rate_model(
                dev.rates.spec(), dev.variation.spec(), self.world, self.seed, min_rate=dev.rates.min_rate,
                base_dir=self.base_dir))
        return self._cache["rates"]

    @property
    def drift_scenario(self) -> Any:
        """devices.drift resolved (edgestream.streams.drift.Drift: what device i's k-th sample becomes, when each
        change begins and ends), or None without scenarios (the streams then do no drift work at all)."""
        if "drift_scenario" not in self._cache:
            entries = list(getattr(self.cfg.devices, "drift", None) or [])
            if entries and self.external:
                raise PlanError(["devices.drift: external streams drift by themselves (their records are what the "
                                 "devices send): nothing to configure; remove devices.drift"])
            drift = None
            if entries:
                from edgestream.streams.drift_resolve import resolve_drift
                from edgestream.streams.policies import FixedBatch

                policy = self.batch_policy()
                fixed = (int(self.params.get("batch") or policy.size)) if isinstance(policy, FixedBatch) else None
                drift = self._check(lambda: resolve_drift(
                    entries, seed=self.seed, rate_model=self.rate_model, dataset=self.dataset, shards=self.shards,
                    labels=self.task.labels, fixed_batch=fixed, batch_policy=policy.name))
            self._cache["drift_scenario"] = drift
        return self._cache["drift_scenario"]

    def due_time(self, device: int) -> Callable[[int], float] | None:
        """seq -> when the rate model had sample seq of `device` due (seconds since the streams began); None for
        external streams (no rate model paces them)."""
        if self.external:
            return None
        rates = self.rate_model
        return lambda seq: float(rates.due_time(device, seq))

    @property
    def buffer(self) -> str:
        """algorithm.buffer: persist | truncate."""
        return str(self.cfg.algorithm.buffer)

    @property
    def max_lag_s(self) -> float | None:
        """algorithm.max_lag_s: the bound on a device's backlog in seconds of data (None: unbounded)."""
        value = self.cfg.algorithm.max_lag_s
        return None if value is None else float(value)

    def batch_policy(self) -> Any:
        from edgestream.streams import build_batch_policy

        return build_batch_policy(self.batch)

    def buffer_policy(self) -> Any:
        from edgestream.streams import build_buffer_policy

        return build_buffer_policy(self.buffer)

    @property
    def injection(self) -> dict[str, Any] | None:
        inj = self.cfg.algorithm.injection
        return inj.model_dump() if inj is not None else None

    # ------------------------------------------------------------------ algorithm
    @property
    def compression(self) -> dict[str, Any]:
        return self.cfg.compression.spec()

    def worker_context(self, rank: int, should_stop: StopTest = never_stop,
                       param_names: list[str] | None = None) -> WorkerContext:
        """Worker `rank`'s context (validated params, lr schedule, compression, injection, step budget)."""
        o = self.cfg.optim
        return WorkerContext(rank=rank, world_size=self.world, seed=self.seed, params=dict(self.params), lr=o.lr,
                             milestones=tuple(o.milestones), gamma=o.gamma, compression=self.compression,
                             injection=self.injection, param_names=param_names, should_stop=should_stop,
                             max_steps=self.cfg.stop.max_steps)

    def server_context(self, step_s: float | None = None) -> ServerContext:
        """The coordinator's context (parameter-server algorithms). step_s: the engine's expected step time
        of the slowest device (`slowest_step_s`)."""
        o = self.cfg.optim
        return ServerContext(world_size=self.world, params=dict(self.params), lr=o.lr, milestones=tuple(o.milestones),
                             gamma=o.gamma, momentum=o.server.momentum, weight_decay=o.server.weight_decay,
                             seed=self.seed, step_s=step_s)

    def nominal_batch(self) -> int:
        """The batch size a step is expected to take: the algorithm's own `batch` param, the fixed size, else
        the middle of [min, max]."""
        if self.params.get("batch"):
            return int(self.params["batch"])
        b = self.batch
        if b.get("size"):
            return int(b["size"])
        lo, hi = int(b.get("min") or 8), int(b.get("max") or 1024)
        return int(round((lo * hi) ** 0.5))

    def slowest_step_s(self, step_seconds: Callable[[int], float]) -> float:
        """Expected step time of the slowest device: step_seconds(nominal batch) x the largest static
        factor x (1 + dynamic / 2), the mean of its jitter."""
        c = self.compute
        factor = max(c.factor(i) for i in range(self.world))
        return float(step_seconds(self.nominal_batch())) * factor * (1.0 + c.dynamic / 2.0)

    # ------------------------------------------------------------------ model
    @property
    def model_name(self) -> str:
        return str(self.cfg.model.name)

    @property
    def model_kwargs(self) -> dict[str, Any]:
        """model.kwargs: the model factory's keyword arguments."""
        return dict(self.cfg.model.kwargs or {})

    @property
    def num_outputs(self) -> int:
        """The model's outputs: the classes, or the regression target's length (1 for a scalar)."""
        ds = self.dataset
        return self.task.num_outputs(getattr(ds, "num_classes", 0), tuple(getattr(ds, "target_shape", None) or ()))

    def build_model(self) -> Any:
        """The run's initial model, factory(input shape of any rank, num_outputs, **model.kwargs): seeded by
        the run seed, so every host starts from the same one (torch's global RNG is left as it was)."""
        import torch

        from edgestream.models import build_model

        shape = tuple(int(s) for s in self.dataset.shape)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            return self._check(lambda: build_model(self.model_name, shape, self.num_outputs, **self.model_kwargs))

    def check_model(self) -> None:
        """PlanError / PluginError where `build_model` would fail: a built-in model without model.kwargs is
        checked without torch (edgestream.models.inputs: every built-in builds for the inputs it passes), any
        other model is built (`config validate` imports torch only for those)."""
        from edgestream.models.inputs import check_input
        from edgestream.plugins import MODELS

        if self.model_kwargs or self.model_name not in MODELS.builtins:
            self.build_model()
        else:
            self._check(lambda: check_input(self.model_name, self.dataset.shape, self.num_outputs))

    @property
    def publish(self) -> dict[str, Any] | None:
        """publish: resolved (None: no model versions): every_s, every_steps, formats, topic (None: <run>.models),
        chunk_bytes, keep (edgestream.publish.publisher)."""
        p = getattr(self.cfg, "publish", None)
        if p is None:
            return None
        return {"every_s": p.every_s, "every_steps": p.every_steps, "formats": tuple(p.formats), "topic": p.topic,
                "chunk_bytes": int(p.chunk_bytes), "keep": int(p.keep)}

    def model_facts(self) -> dict[str, Any]:
        """What a model version says of its model (docs/model-format.md, metadata): its name, the task, the
        input the records have (shape, dtype, the trainer's normalisation), the outputs (classes or target
        size)."""
        ds, serde = self.dataset, self.serde
        affine = getattr(serde, "normalize", None)
        norm = None
        if affine is not None and hasattr(affine, "scale"):
            norm = {"kind": "affine", "scale": [float(s) for s in affine.scale],
                    "bias": [float(b) for b in affine.bias]}
        names = getattr(ds, "class_names", None)
        return {"model": {"name": self.model_name, "kwargs": self.model_kwargs},
                "task": self.task.name,
                "input": {"shape": [int(s) for s in ds.shape], "dtype": str(serde.spec.dtype), "normalization": norm},
                "output": {"size": int(self.num_outputs),
                           "classes": [str(n) for n in names] if names and self.task.labels else None,
                           "target_shape": None if self.task.labels else list(getattr(ds, "target_shape", ()) or ())}}

    @property
    def optim(self) -> dict[str, float]:
        """lr, momentum, weight_decay of the workers' SGD."""
        o = self.cfg.optim
        return {"lr": float(o.lr), "momentum": float(o.momentum), "weight_decay": float(o.weight_decay)}

    def build_optimizer(self, model: Any) -> Any:
        from edgestream.models import build_optimizer

        return build_optimizer(model, **self.optim)

    # ------------------------------------------------------------------ devices
    @property
    def compute(self) -> ComputeSpec:
        c = self.cfg.devices.compute
        curve = None
        if c.profile is not None:
            if "profile" not in self._cache:
                from edgestream.profiles import ProfileError, load_profile

                try:
                    self._cache["profile"] = load_profile(c.profile, self.base_dir).curve(c.profile_model,
                                                                                        self.model_name)
                except ProfileError as exc:
                    raise PlanError([f"devices.compute.profile: {exc}"]) from None
            curve = self._cache["profile"]
        return ComputeSpec(tuple(float(s) for s in c.static), float(c.dynamic), c.base_s, c.per_sample_s, curve)

    @property
    def network(self) -> NetworkSpec:
        n = self.cfg.devices.network
        return NetworkSpec(n.latency_ms / 1000.0, n.bandwidth_mbps * 1e6 / 8.0)

    # ------------------------------------------------------------------ Kafka pieces
    def stream_identity(self) -> dict[str, Any]:
        """The part of the config that decides what the device streams contain and when (pinned in the
        run's meta topic: a producer restarted with a different one is refused). Left out: where things
        are (data.root, runtime.*) and what only trainers or the simulator use. A rate trace counts by
        its content (sha256), not by its path."""
        raw = self.cfg.model_dump(mode="json")
        # data.share_samples changes no split that works without it (it only lifts refusals), so a run's
        # streams are the same with it or without: left out, as where the files are (data.root)
        data = {k: v for k, v in raw["data"].items() if k not in ("root", "share_samples") and v is not None}
        rates = {k: v for k, v in raw["devices"]["rates"].items() if v is not None}
        if rates.get("distribution") == "trace" and rates.get("path"):
            path = Path(rates["path"])
            if not path.is_absolute() and self.base_dir:
                path = Path(self.base_dir) / path
            if path.is_file():
                rates.pop("path")
                rates["trace_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        variation = {k: v for k, v in raw["devices"]["variation"].items() if v is not None}
        drift = [{k: v for k, v in d.items() if v is not None} for d in raw["devices"].get("drift") or []]
        # a partitioned layout is part of it (which partition a device's samples are in); per-device adds nothing
        return {"name": raw["name"], "seed": raw["seed"], "data": data,
                "devices": {"count": raw["devices"]["count"], "rates": rates, "variation": variation,
                            **({"drift": drift} if drift else {})},  # (without drift: as before it existed)
                **self.layout("").identity()}

    def layout(self, run: str, bootstrap: str | None = None) -> Any:
        """Run `run`'s `StreamLayout` (kafka.topics.layout / partitions, or streams.topic): where each device's
        samples travel. One keyed external topic: its partition count is asked of the cluster at `bootstrap`
        (`external_topics`, once per process)."""
        from edgestream.kafka.layout import StreamLayout

        streams = self.cfg.streams
        partitions = None
        if streams.external and not streams.per_device:
            if "external_partitions" not in self._cache:
                if bootstrap is None:
                    raise PlanError(["streams.topic: one keyed topic: its partition count needs the cluster"])
                self.external_topics(bootstrap)
            partitions = self._cache["external_partitions"]
        return StreamLayout.of(run, self.world, self.cfg.kafka.topics, streams, partitions)

    def external_topics(self, bootstrap: str) -> int | None:
        """Check the external topics on the cluster (kafka.external: each exists, a topic per device has one
        partition); the keyed topic's partition count (None for a topic per device). ExternalTopicError."""
        from edgestream.kafka.external import external_partitions

        got = external_partitions(bootstrap, self.cfg.streams, self.world, self.security)
        self._cache["external_partitions"] = got
        return got

    @property
    def start(self) -> str | int:
        """Where a new run's consumers begin: earliest (internal streams: always), latest or unix ms."""
        return self.cfg.streams.start_at if self.external else "earliest"

    @property
    def holdout(self) -> float | None:
        """eval.holdout: the share of each external stream held out for evaluation (None: none)."""
        return self.cfg.eval.holdout

    @property
    def holdout_max(self) -> int:
        """eval.holdout_max: how many held-out records (the newest) the evaluator keeps."""
        return int(self.cfg.eval.holdout_max)

    @property
    def lag_warning_s(self) -> float:
        """runtime.lag_warning_s: how long a device's lag keeps growing before its consumer warns (once)."""
        return float(self.cfg.runtime.lag_warning_s)

    def topic_settings(self, bootstrap: str) -> Any:
        """The run's kafka.topics resolved (a `TopicSettings`): as the orchestrator handed them to this process,
        else resolved against the cluster at `bootstrap` (its broker count); once per process."""
        from edgestream.kafka.topic_settings import TopicSettings

        key = f"topic_settings:{bootstrap}"
        if key not in self._cache:
            self._cache[key] = TopicSettings.for_process(self.cfg.kafka.topics, bootstrap, self.security)
        return self._cache[key]
