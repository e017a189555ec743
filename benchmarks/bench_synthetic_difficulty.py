"""How hard the synthetic dataset is at a given data.signal: cnn-small alone (SGD lr 0.05, momentum 0.9,
batch 64, torch at 2 threads) trained for 2 epochs of N 3x32x32 images, test accuracy (2,000 images) at
eight points of the run.

    python benchmarks/bench_synthetic_difficulty.py SIGNAL [N] [CLASSES]
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from edgestream.data.synthetic import make_synthetic
from edgestream.models import build_model


def main() -> None:
    signal = float(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    k = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    torch.set_num_threads(2)
    torch.manual_seed(0)
    t = time.time()
    x_tr, y_tr, x_te, y_te = make_synthetic((3, 32, 32), k, n, 2000, 0, signal)
    gen_s = time.time() - t
    mean = torch.tensor(x_tr.reshape(n, 3, -1).mean(axis=(0, 2)), dtype=torch.float32).view(1, 3, 1, 1)
    std = torch.tensor(x_tr.reshape(n, 3, -1).std(axis=(0, 2)), dtype=torch.float32).view(1, 3, 1, 1)

    def norm(x: np.ndarray) -> torch.Tensor:
        return (torch.from_numpy(x).float() - mean) / std

    xt, yt = norm(x_te), torch.from_numpy(y_te)
    model = build_model("cnn-small", (3, 32, 32), k)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    b, steps = 64, 2 * n // 64
    perm = np.random.default_rng(0).permutation(n)
    curve = []
    t0 = time.time()
    for s in range(steps):
        start = (s * b) % n
        idx = perm[start:start + b]
        if len(idx) < b:
            continue
        opt.zero_grad()
        F.cross_entropy(model(norm(x_tr[idx])), torch.from_numpy(y_tr[idx])).backward()
        opt.step()
        if s % (steps // 8) == 0 or s == steps - 1:
            with torch.no_grad():
                acc = (model(xt).argmax(1) == yt).float().mean().item()
            curve.append((round(s * b / n, 2), round(acc, 3)))
    print(f"signal {signal} n {n} classes {k}: generated in {gen_s:.1f} s, trained in {time.time() - t0:.0f} s; "
          f"(epochs, test accuracy): {curve}")


if __name__ == "__main__":
    main()
