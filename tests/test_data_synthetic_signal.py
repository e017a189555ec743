"""The synthetic dataset's difficulty knob (data.signal): deterministic, 1.0 is the default dataset bit for
bit, lower is measurably harder, and only the synthetic dataset takes it."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from edgestream.config import ConfigError, validate_dict
from edgestream.data import load_dataset
from edgestream.data.synthetic import make_synthetic


@pytest.mark.parametrize(("shape", "classes"), [((3, 8, 8), 10), ((1, 6, 9), 4), ((2, 5, 5), 13)])
def test_signal_is_deterministic_and_one_is_the_default(shape, classes) -> None:
    base = make_synthetic(shape, classes, 300, 100, seed=4)
    same = make_synthetic(shape, classes, 300, 100, seed=4, signal=1.0)
    assert all(np.array_equal(a, b) for a, b in zip(base, same, strict=True))
    half = make_synthetic(shape, classes, 300, 100, seed=4, signal=0.5)
    again = make_synthetic(shape, classes, 300, 100, seed=4, signal=0.5)
    assert all(np.array_equal(a, b) for a, b in zip(half, again, strict=True))
    assert np.array_equal(base[1], half[1]) and not np.array_equal(base[0], half[0])  # same labels, other images


def _linear_accuracy(signal: float, classes: int) -> float:
    x_tr, y_tr, x_te, y_te = make_synthetic((3, 8, 8), classes, 3000, 1000, seed=1, signal=signal)
    clf = LogisticRegression(max_iter=300)
    clf.fit(x_tr.reshape(len(x_tr), -1) / 255.0, y_tr)
    return float(clf.score(x_te.reshape(len(x_te), -1) / 255.0, y_te))


@pytest.mark.parametrize("classes", [4, 10])
def test_lower_signal_is_harder(classes: int) -> None:
    strong, weak = _linear_accuracy(2.0, classes), _linear_accuracy(0.3, classes)
    assert strong > weak + 0.1 and weak < 0.9 and strong > 2.0 / classes


def test_signal_is_checked() -> None:
    with pytest.raises(ValueError, match=r"signal: must be in \(0, 10\]"):
        make_synthetic((1, 4, 4), 3, 20, 10, signal=0.0)
    with pytest.raises(ConfigError, match=r"data\.signal: only the synthetic dataset takes it \(this is 'digits'\)"):
        validate_dict({"name": "x", "data": {"dataset": "digits", "signal": 0.5}})
    with pytest.raises(ValueError, match=r"signal: only the synthetic dataset takes it"):
        load_dataset("digits", signal=0.5)
    ds = load_dataset("synthetic", shape=(1, 4, 4), num_classes=3, n_train=30, n_test=10, signal=0.7)
    assert ds.x_train.shape == (30, 1, 4, 4)
