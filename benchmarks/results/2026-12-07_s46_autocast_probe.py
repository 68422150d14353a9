"""Session 46 probe (issue 18), CPU: the session 46 architectures under CPU bf16 autocast,
step 0 of two SGD steps (the session 45 probe's runner). Prints, for one architecture, how
far Inductor with nothing moved is from eager (Inductor's own numerical distance), how far
the offload backend at budget 0.1 under Inductor is from Inductor with nothing moved, and
the eager inner compiler's 0.1 against eager with nothing moved (bitwise expected): the loss
difference and the worst gradient's relative difference (norm of the difference over the
norm of the reference).

    python benchmarks/results/2026-12-07_s46_autocast_probe.py MODEL
"""
import importlib.util, sys, torch, warnings
spec = importlib.util.spec_from_file_location("s46", "benchmarks/results/2026-12-07_s46_hf_probe.py")
s46 = importlib.util.module_from_spec(spec); spec.loader.exec_module(s46)
spec = importlib.util.spec_from_file_location("s45", "benchmarks/results/2026-11-29_s45_hf_probe.py")
s45 = importlib.util.module_from_spec(spec); spec.loader.exec_module(s45)
class Auto(torch.nn.Module):
    def __init__(self, m): super().__init__(); self.m = m
    def forward(self, **kw):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.m(**kw)
name = sys.argv[1]
torch.manual_seed(0)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    base = Auto(s46.MODELS[name]())
def run(inner, **o):
    return s45.train(base, name, s46.inputs, inner_compiler=inner, **o)[0]
def dist(a, b):
    (la, ga), (lb, gb) = a[0], b[0]   # step 0
    rel = max(((x - y).norm() / (y.norm() + 1e-12)).item() for x, y in zip(ga, gb))
    return abs(la.item() - lb.item()), rel
eager = run("eager", policy="none"); ind = run("inductor", policy="none"); off = run("inductor", memory_budget=0.1)
off_e = run("eager", memory_budget=0.1)
print(name, "inductor-none vs eager: loss %.2e, worst grad rel %.2e" % dist(ind, eager))
print(name, "inductor-0.1 vs inductor-none: loss %.2e, worst grad rel %.2e" % dist(off, ind))
print(name, "inductor-0.1 vs eager: loss %.2e, worst grad rel %.2e" % dist(off, eager))
print(name, "eager-0.1 vs eager-none: loss %.2e, worst grad rel %.2e" % dist(off_e, eager))
