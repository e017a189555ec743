"""The `data:` section: the dataset and how it is split over the devices."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from edgestream.config.base import Float, Int, _Model, plugin_name

PARTITIONS = ("iid", "labels", "dirichlet")


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

        return plugin_name(DATASETS, name)

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
