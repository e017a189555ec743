"""How hard the synthetic dataset is at a given data.signal: cnn-small alone (SGD lr 0.05, momentum 0.9,
batch 64, torch at 2 threads) trained for 2 epochs of N 3x32x32 images, test accuracy at 8 points.

    python benchmarks/bench_synthetic_difficulty.py SIGNAL [N] [CLASSES]
"""
import sys, time, torch, numpy as np, torch.nn.functional as F
from edgestream.data.synthetic import make_synthetic
from edgestream.models import build_model
torch.set_num_threads(2); torch.manual_seed(0)
sig = float(sys.argv[1]); n = int(sys.argv[2]); k = int(sys.argv[3]) if len(sys.argv) > 3 else 10
t = time.time(); xtr, ytr, xte, yte = make_synthetic((3, 32, 32), k, n, 2000, 0, sig); gen = time.time() - t
m = xtr.reshape(len(xtr), 3, -1).mean(axis=(0, 2)); sd = xtr.reshape(len(xtr), 3, -1).std(axis=(0, 2))
norm = lambda x: ((torch.from_numpy(x).float() - torch.tensor(m).float().view(1, 3, 1, 1)) / torch.tensor(sd).float().view(1, 3, 1, 1))
Xte, Yte = norm(xte), torch.from_numpy(yte)
model = build_model("cnn-small", (3, 32, 32), k)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
b = 64; steps = 2 * n // b; out = []
perm = np.random.default_rng(0).permutation(n)
t0 = time.time()
for s in range(steps):
    idx = perm[(s * b) % n:(s * b) % n + b]
    if len(idx) < b: continue
    x, y = norm(xtr[idx]), torch.from_numpy(ytr[idx])
    opt.zero_grad(); F.cross_entropy(model(x), y).backward(); opt.step()
    if s % (steps // 8) == 0 or s == steps - 1:
        with torch.no_grad(): acc = (model(Xte).argmax(1) == Yte).float().mean().item()
        out.append((round(s * b / n, 2), round(acc, 3)))
print(f"signal {sig} n {n} k {k} gen {gen:.1f}s train {time.time()-t0:.0f}s epochs->acc {out}")
