"""Partitioners: disjoint, exact cover, non-empty devices, k labels per device, deterministic per seed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from edgestream.data.partition import partition_indices

SETTINGS = settings(max_examples=60, deadline=None)


@st.composite
def label_arrays(draw, max_n: int = 120, max_classes: int = 8):
    k = draw(st.integers(1, max_classes))
    n = draw(st.integers(1, max_n))
    seed = draw(st.integers(0, 2**16))
    return np.random.default_rng(seed).integers(0, k, size=n).astype(np.int64)


def _check_cover(parts: list[np.ndarray], n: int, num_devices: int) -> None:
    assert len(parts) == num_devices
    assert all(len(p) > 0 for p in parts), [len(p) for p in parts]
    assert all(p.dtype == np.int64 and np.all(np.diff(p) > 0) for p in parts)  # sorted, no repeats
    joined = np.concatenate(parts)
    assert len(joined) == n  # disjoint ...
    np.testing.assert_array_equal(np.sort(joined), np.arange(n))  # ... and covering exactly


@SETTINGS
@given(label_arrays(), st.integers(1, 12), st.integers(0, 3))
def test_iid_is_a_balanced_exact_cover(labels, num_devices, seed):
    assume(num_devices <= len(labels))
    parts = partition_indices(labels, num_devices, "iid", seed=seed)
    _check_cover(parts, len(labels), num_devices)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    again = partition_indices(labels, num_devices, "iid", seed=seed)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


@SETTINGS
@given(label_arrays(), st.integers(1, 12), st.integers(1, 4), st.integers(0, 3))
def test_labels_scheme_gives_at_most_k_labels_per_device(labels, num_devices, k, seed):
    n_cls = len(np.unique(labels))
    try:
        parts = partition_indices(labels, num_devices, "labels", seed=seed, labels_per_device=k)
    except ValueError as e:
        # Only the documented infeasible cases may refuse.
        assert (k > n_cls or num_devices * k < n_cls or num_devices > len(labels)
                or "got no samples" in str(e)), str(e)
        return
    _check_cover(parts, len(labels), num_devices)
    assert all(len(np.unique(labels[p])) <= k for p in parts)
    again = partition_indices(labels, num_devices, "labels", seed=seed, labels_per_device=k)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


@SETTINGS
@given(label_arrays(), st.integers(1, 12), st.sampled_from([0.05, 0.5, 5.0]), st.integers(0, 3))
def test_dirichlet_is_an_exact_cover_with_no_empty_device(labels, num_devices, alpha, seed):
    assume(num_devices <= len(labels))
    parts = partition_indices(labels, num_devices, "dirichlet", seed=seed, alpha=alpha)
    _check_cover(parts, len(labels), num_devices)
    again = partition_indices(labels, num_devices, "dirichlet", seed=seed, alpha=alpha)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


def test_labels_one_class_per_device_like_scadles():
    labels = np.repeat(np.arange(10), 30)
    parts = partition_indices(labels, 10, "labels", labels_per_device=1)
    assert sorted(int(np.unique(labels[p])[0]) for p in parts) == list(range(10))
    assert all(len(np.unique(labels[p])) == 1 and len(p) == 30 for p in parts)


def test_labels_more_devices_than_classes_share_labels():
    labels = np.repeat(np.arange(4), 25)
    parts = partition_indices(labels, 10, "labels", labels_per_device=1, seed=3)
    _check_cover(parts, 100, 10)
    holders = {c: sum(1 for p in parts if c in set(labels[p])) for c in range(4)}
    assert sorted(holders.values()) == [2, 2, 3, 3]


def test_dirichlet_small_alpha_is_skewed_and_large_alpha_is_near_iid():
    labels = np.repeat(np.arange(10), 200)

    def mean_labels(alpha: float) -> float:
        parts = partition_indices(labels, 8, "dirichlet", alpha=alpha, seed=1)
        return float(np.mean([len(np.unique(labels[p])) for p in parts]))

    assert mean_labels(0.05) < 5 < mean_labels(100.0)


def test_seeds_change_the_partition():
    labels = np.arange(100) % 5
    a = partition_indices(labels, 4, "iid", seed=0)
    b = partition_indices(labels, 4, "iid", seed=1)
    assert not all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("kwargs,match", [
    ({"scheme": "shards"}, "scheme: must be one of iid, labels, dirichlet"),
    ({"num_devices": 0}, "num_devices"),
    ({"num_devices": 1000}, "num_devices"),
    ({"scheme": "labels", "labels_per_device": 0}, "labels_per_device"),
    ({"scheme": "labels", "labels_per_device": 11}, "labels_per_device"),
    ({"scheme": "labels", "num_devices": 3, "labels_per_device": 2}, "labels_per_device"),
    ({"scheme": "dirichlet", "alpha": 0.0}, "alpha"),
    ({"scheme": "dirichlet", "alpha": float("nan")}, "alpha"),
])
def test_bad_parameters_are_named(kwargs, match):
    args = {"labels": np.arange(100) % 10, "num_devices": 4, **kwargs}
    with pytest.raises(ValueError, match=match):
        partition_indices(**args)


def test_labels_must_be_integer_1d():
    with pytest.raises(ValueError, match="labels"):
        partition_indices(np.zeros((4, 2), np.int64), 2)
    with pytest.raises(ValueError, match="labels"):
        partition_indices(np.zeros(4, np.float32), 2)


# ---------------------------------------------------------------- sharing (more devices than samples)
@SETTINGS
@given(label_arrays(max_n=60), st.integers(0, 8), st.sampled_from(["iid", "labels", "dirichlet"]),
       st.integers(1, 3), st.sampled_from([0.05, 0.5, 5.0]), st.integers(0, 3))
def test_shared_split_uses_every_sample_and_balances_the_shards(labels, extra, scheme, k, alpha, seed):
    n = len(labels)
    num_devices = n * extra + int(np.random.default_rng(seed).integers(1, n + 1)) + n  # always more than n
    kw = {"seed": seed, "labels_per_device": k, "alpha": alpha}
    classes, counts = np.unique(labels, return_counts=True)
    if scheme == "labels" and k > len(classes):
        with pytest.raises(ValueError, match="^labels_per_device: must be <= the number of classes"):
            partition_indices(labels, num_devices, scheme, share_samples=True, **kw)
        return
    parts = partition_indices(labels, num_devices, scheme, share_samples=True, **kw)
    assert len(parts) == num_devices
    assert all(len(p) > 0 and p.dtype == np.int64 and np.all(np.diff(p) > 0) for p in parts)
    uses = np.bincount(np.concatenate(parts), minlength=n)
    assert uses.min() >= 1  # every sample used
    if scheme in ("iid", "dirichlet"):
        # n single-sample shards, device d holds shard d mod n: each sample on floor/ceil(D/n) devices
        assert all(len(p) == 1 for p in parts)
        np.testing.assert_array_equal(np.sort(np.concatenate(parts[:n])), np.arange(n))
        assert all(np.array_equal(parts[d], parts[d % n]) for d in range(num_devices))
        assert set(uses.tolist()) <= {num_devices // n, -(-num_devices // n)}
    else:
        # each device: samples of its k classes (device d's j-th class is (d k + j) mod K). A class with more
        # holders h than samples c is shared: each holder one of its samples, each sample on floor/ceil(h/c)
        # holders; a class with c >= h is split as without sharing: each sample once, floor/ceil(c/h) a holder
        assert all(len(np.unique(labels[p])) == k for p in parts)
        for ci, (c, count) in enumerate(zip(classes, counts, strict=True)):
            holders = [d for d in range(num_devices) for j in range(k) if (d * k + j) % len(classes) == ci]
            assert all(c in labels[parts[d]] for d in holders)
            got = [int(np.sum(labels[parts[d]] == c)) for d in holders]
            if len(holders) > count:
                assert set(got) == {1} and set(uses[labels == c].tolist()) <= {len(holders) // count,
                                                                                 -(-len(holders) // count)}
            else:
                assert set(uses[labels == c].tolist()) == {1} and set(got) <= {count // len(holders),
                                                                                 -(-count // len(holders))}
    again = partition_indices(labels, num_devices, scheme, share_samples=True, **kw)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


@SETTINGS
@given(label_arrays(), st.integers(1, 12), st.sampled_from(["iid", "labels", "dirichlet"]), st.integers(1, 3),
       st.integers(0, 3))
def test_sharing_changes_nothing_where_the_split_works_without_it(labels, num_devices, scheme, k, seed):
    kw = {"seed": seed, "labels_per_device": k}
    try:
        alone = partition_indices(labels, num_devices, scheme, **kw)
    except ValueError as e:
        if "share_samples" not in str(e):  # refusals sharing cannot lift stay refusals
            with pytest.raises(ValueError, match=str(e).split(":")[0]):
                partition_indices(labels, num_devices, scheme, share_samples=True, **kw)
        return
    shared = partition_indices(labels, num_devices, scheme, share_samples=True, **kw)
    assert all(np.array_equal(a, b) for a, b in zip(alone, shared, strict=True))


def test_labels_share_where_classes_have_fewer_samples_than_holders():
    labels = np.repeat(np.arange(4), 5)  # 20 samples, 5 a class; 20 devices of 2 classes: 10 holders a class
    with pytest.raises(ValueError, match="got no samples.*data.share_samples: true"):
        partition_indices(labels, 20, "labels", labels_per_device=2)
    parts = partition_indices(labels, 20, "labels", labels_per_device=2, share_samples=True)
    assert all(len(p) == 2 and len(np.unique(labels[p])) == 2 for p in parts)
    assert np.bincount(np.concatenate(parts)).tolist() == [2] * 20  # each sample on 2 of its class's 10 holders


def test_more_devices_than_samples_is_refused_naming_share_samples():
    with pytest.raises(ValueError, match=r"^num_devices: 300 devices but only 100 train samples; every device "
                                         r"needs at least one: set share_samples \(data.share_samples: true\) to "
                                         r"let devices share samples, or use at most 100 devices$"):
        partition_indices(np.arange(100) % 10, 300)
    # fewer class slots than classes: sharing cannot help, the refusal names labels_per_device
    with pytest.raises(ValueError, match="^labels_per_device: num_devices \\* labels_per_device = 6 < 10"):
        partition_indices(np.arange(100) % 10, 3, "labels", labels_per_device=2, share_samples=True)
