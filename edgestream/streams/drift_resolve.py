"""Resolving devices.drift (config entries) into the `Drift` of edgestream.streams.drift, against the run's dataset,
shards, rate model and batch policy: the plan's `drift_scenario` calls `resolve_drift`. What cannot apply is a
ValueError of one line naming the field (`devices.drift[0].permutation: ...`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from edgestream.streams.drift import _TAG_PERM, Change, Drift, Scenario, first_due_at


def _perm_of(entry: Any, where: str, num_classes: int, seed: int, index: int) -> np.ndarray:
    if entry.permutation is not None:
        perm = list(entry.permutation)
        if sorted(perm) != list(range(num_classes)):
            raise ValueError(f"{where}.permutation: {perm} is not a permutation of the {num_classes} classes "
                             f"0..{num_classes - 1}")
        return np.asarray(perm, dtype=np.int64)
    if entry.swap is not None:
        perm = np.arange(num_classes, dtype=np.int64)
        for a, b in entry.swap:
            for c in (a, b):
                if not 0 <= c < num_classes:
                    raise ValueError(f"{where}.swap: class {c} does not exist (data.num_classes is {num_classes})")
            perm[[a, b]] = perm[[b, a]]
        return perm
    rng = np.random.default_rng([seed % 2**64, index, _TAG_PERM])
    while True:  # a derangement: every class moves (num_classes >= 2)
        perm = rng.permutation(num_classes)
        if not (perm == np.arange(num_classes)).any():
            return perm.astype(np.int64)


def _user_fn(path: str, where: str) -> Callable[..., Any]:
    from edgestream.plugins import import_object

    fn = import_object(path, where)
    if not callable(fn):
        raise ValueError(f"{where}: {path} is not callable")
    return fn


def _check_out(out: Any, like: np.ndarray, where: str, path: str) -> None:
    out = np.asarray(out)
    if out.shape != like.shape or out.dtype != like.dtype:
        raise ValueError(f"{where}: {path} returned shape {out.shape} dtype {out.dtype}; must return the "
                         f"input's shape {like.shape} and dtype {like.dtype}")


def _pools(entry: Any, where: str, shard: np.ndarray, y: np.ndarray, device: int) -> tuple[np.ndarray, ...]:
    weights = np.asarray(entry.weights, dtype=np.float64)
    labels = np.asarray(y)[shard]
    order = np.argsort(labels, kind="stable")
    pool, sorted_labels = np.asarray(shard)[order].astype(np.int64), labels[order]
    classes, offsets, counts = np.unique(sorted_labels, return_index=True, return_counts=True)
    w = weights[classes]
    if not (w > 0).any():
        held = ", ".join(str(int(c)) for c in classes)
        raise ValueError(f"{where}.weights: device {device}'s shard holds none of the classes weighted > 0 "
                         f"(it holds {held})")
    keep = w > 0
    cdf = np.cumsum(w[keep]) / w[keep].sum()
    return cdf, classes[keep], offsets[keep].astype(np.int64), counts[keep].astype(np.int64), pool


def resolve_drift(entries: Sequence[Any], *, seed: int, rate_model: Any, dataset: Any, shards: Sequence[Any],
                  labels: bool, fixed_batch: int | None, batch_policy: str) -> Drift | None:
    """The `Drift` of devices.drift's entries (config DriftScenarioConfig objects, each checked on its own),
    or None when there are none. ValueError: one line naming the field (devices.drift[i].<field>)."""
    if not entries:
        return None
    num_devices = len(shards)
    num_classes = int(getattr(dataset, "num_classes", 0) or 0)
    scenarios = []
    for i, e in enumerate(entries):
        where = f"devices.drift[{i}]"
        devices = list(range(num_devices)) if e.devices == "all" else sorted(set(e.devices))
        if e.kind == "class_prior" and not labels:
            raise ValueError(f"{where}.kind: class_prior changes the mixture of classes; this task has no classes "
                             "(regression: use label_swap with target, or input_shift)")
        if e.kind == "label_swap" and labels and e.target is not None:
            raise ValueError(f"{where}.target: a new target function is for regression; a classification "
                             "label_swap takes permutation or swap")
        if e.kind == "label_swap" and not labels and (e.permutation is not None or e.swap is not None):
            field_ = "permutation" if e.permutation is not None else "swap"
            raise ValueError(f"{where}.{field_}: a regression task has no classes to swap; give target "
                             "(\"pkg.mod:fn\", fn(x, y) -> y') or nothing (y' = -y)")
        s = Scenario(i, e.kind, e.over_s, {})
        x2, y2 = np.array(dataset.x_train[:2]), np.array(dataset.y_train[:2])
        if e.kind == "label_swap":
            if labels:
                s.permutation = _perm_of(e, where, num_classes, seed, i)
            elif e.target is not None:
                s.target = _user_fn(e.target, f"{where}.target")
                _check_out(np.asarray(s.target(x2, y2)).astype(y2.dtype), y2, f"{where}.target", e.target)
        elif e.kind == "input_shift":
            if e.transform is not None:
                s.transform = _user_fn(e.transform, f"{where}.transform")
                _check_out(s.transform(x2.copy()), x2, f"{where}.transform", e.transform)
            s.scale = 1.0 if e.scale is None else float(e.scale)
            s.offset = 0.0 if e.offset is None else float(e.offset)
            s.noise = 0.0 if e.noise is None else float(e.noise)
        else:
            if len(e.weights) != num_classes:
                raise ValueError(f"{where}.weights: {len(e.weights)} weights; must be one per class "
                                 f"(data.num_classes is {num_classes})")
            s.pools = {d: _pools(e, where, shards[d], dataset.y_train, d) for d in devices}
        for d in devices:
            if e.at_s is not None:
                begin = first_due_at(rate_model, d, float(e.at_s))
            elif e.at_sample is not None:
                begin = int(e.at_sample)
            else:
                if fixed_batch is None:
                    raise ValueError(f"{where}.at_step: batch policy {batch_policy!r} sizes each batch as the "
                                     "stream goes, so a step has no fixed sample; use at_s or at_sample (or a "
                                     "fixed batch policy)")
                begin = int(e.at_step) * fixed_batch
            begin_s = float(rate_model.due_time(d, begin))
            end = begin if e.over_s is None else max(begin, first_due_at(rate_model, d, begin_s + float(e.over_s)))
            s.changes[d] = Change(i, e.kind, d, begin, end, begin_s, float(rate_model.due_time(d, end)))
        scenarios.append(s)
    return Drift(scenarios, seed, rate_model, num_devices)
