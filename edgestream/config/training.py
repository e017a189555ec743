"""What a run trains and when it ends: the `model:`, `optim:`, `algorithm:`, `compression:`, `stop:`, `eval:` and
`checkpoint:` sections."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from edgestream.config.base import Float, Int, _Model, plugin_name
from edgestream.config.drift import PrequentialConfig

MEMORIES = ("none", "residual", "dgc")


class ModelConfig(_Model):
    """A built-in model, or a user's factory by import path / entry point, called as
    factory(input_shape, num_outputs, **kwargs) -> torch.nn.Module (edgestream.plugins.MODELS)."""

    name: str = "cnn-small"
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        from edgestream.plugins import MODELS

        return plugin_name(MODELS, name)


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

        return plugin_name(COMPRESSORS, name)

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
    #: test-then-train figures of every training batch (edgestream.config.drift, docs/stream-learning.md)
    prequential: PrequentialConfig | None = None
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
