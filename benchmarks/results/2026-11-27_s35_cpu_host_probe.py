"""Session 35 (issue 18): does the backend add host time per step outside its compiled
graph? On a CPU every kernel runs on the host, so a tiny model's step is host time: a
50-layer conv/BatchNorm/ReLU net on 4x8x8x8 inputs, Inductor against the backend
(``"auto"``, ``min_offload_bytes=0``), the median of 200 steps after 5; with a third
argument, a cProfile of 100 more steps.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-27_s35_cpu_host_probe.py inductor
    PYTHONPATH=$PWD python benchmarks/results/2026-11-27_s35_cpu_host_probe.py auto
"""
import sys, time, statistics, cProfile, pstats, torch, torch.nn as nn
import offload_compiler  # registers the backend
torch.manual_seed(0)
def net():
    layers = []
    for i in range(50):
        layers += [nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU()]
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(8 * 8 * 8, 10))
which = sys.argv[1]
m = net()
x = torch.randn(4, 8, 8, 8)
if which == "inductor":
    c = torch.compile(m, backend="inductor")
else:
    c = torch.compile(m, backend="offload", options={"memory_budget": which if which == "auto" else float(which), "min_offload_bytes": 0})
def step():
    c(x).sum().backward()
    m.zero_grad(set_to_none=True)
for _ in range(5): step()
ts = []
for _ in range(200):
    t0 = time.perf_counter(); step(); ts.append((time.perf_counter() - t0) * 1e3)
print(which, "median step ms", round(statistics.median(ts), 3), "min", round(min(ts), 3))
if len(sys.argv) > 2:
    p = cProfile.Profile(); p.enable()
    for _ in range(100): step()
    p.disable(); pstats.Stats(p).sort_stats("tottime").print_stats(25)
