"""`ExperimentConfig`: the whole config, its sections, and the checks across them (the task and the stop
target, external streams and what data / eval / runtime then take, continuous runs' checkpoints)."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import Field, field_validator, model_validator

from edgestream.config.base import SECRET_MASK, Int, _Model, is_secret_key, plugin_name
from edgestream.config.data import DataConfig
from edgestream.config.devices import DevicesConfig
from edgestream.config.drift import DriftConfig, PrequentialConfig
from edgestream.config.kafka import KafkaConfig
from edgestream.config.publish import PublishConfig
from edgestream.config.runtime import RuntimeConfig
from edgestream.config.streams import StreamsConfig
from edgestream.config.training import (
    CONTINUOUS_EVERY_S,
    AlgorithmConfig,
    CheckpointConfig,
    CompressionConfig,
    EvalConfig,
    ModelConfig,
    OptimConfig,
    StopConfig,
)


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
    #: model versions sent back to the devices (edgestream.config.publish, docs/model-format.md); null: none
    publish: PublishConfig | None = None
    #: drift detectors over the prequential errors and the responses (docs/stream-learning.md); null: none
    drift: DriftConfig | None = None

    @field_validator("task")
    @classmethod
    def _task(cls, name: str) -> str:
        from edgestream.plugins import TASKS

        return plugin_name(TASKS, name)

    @field_validator("stop", mode="before")
    @classmethod
    def _continuous(cls, v: Any) -> Any:
        """`stop: {}` / `stop:` (null): continuous training, every field null (not the defaults, which only a
        config without `stop` gets)."""
        if v is None or (isinstance(v, dict) and not v):
            return {"target_accuracy": None, "target_metric": None, "max_time_s": None, "max_steps": None}
        return v

    @model_validator(mode="after")
    def _drift_needs_prequential(self) -> ExperimentConfig:
        """Detectors read the prequential errors: a `drift:` section without eval.prequential turns it on with
        its defaults (`config show` says so)."""
        if self.drift is not None and self.eval.prequential is None:
            self.eval.prequential = PrequentialConfig()
        return self

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
                        raw["streams"], *raw["devices"]["drift"]):
            for key in [k for k, v in section.items() if v is None]:
                del section[key]
        if not reveal_secrets:
            client = raw["runtime"]["kafka_client"]
            for key in client:
                if is_secret_key(key):
                    client[key] = SECRET_MASK
        return yaml.safe_dump(raw, sort_keys=False)
