"""Session 38 (issue 18), on a CPU: how many buffers the planner's step-peak model has
Inductor allocate and take from its pool, against Inductor's generated code, for the
example GPT's ``tiny`` preset (nothing moved). Counts ``empty_strided`` calls and
``# reuse`` lines in each generated ``call``, then the planner's transients that allocate
and those ``step_peak.held_for_reuse`` has take a pooled buffer (replayed with no other
bytes counted, ``base`` zero: an approximation of the replay the step peak runs).

    PYTHONPATH=$PWD python benchmarks/results/2026-11-28_s38_alloc_probe_cpu.py
"""
import re
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import offload_compiler
from offload_compiler.models.gpt import GPT, make_batch, preset
from offload_compiler.planning import step_peak
cfg = preset("tiny")
torch.manual_seed(0)
model = GPT(cfg)
idx, tgt = make_batch(cfg, "cpu")
b = offload_compiler.make_backend(policy="none", devices=("cpu",))
f = torch.compile(model, backend=b)
codes = []
import torch._inductor.codecache as cc
orig = cc.PyCodeCache.load_by_key_path
def spy(key, path, *a, **k):
    codes.append(path)
    return orig(key, path, *a, **k)
cc.PyCodeCache.load_by_key_path = spy
loss = f(idx, tgt); loss.backward()
plan = b.plans[0]
print("plans", len(b.plans), [p.graph_id for p in b.plans])
sim = plan.simulation
print(type(sim))
for p in codes:
    src = open(p).read()
    if "def call(" not in src: continue
    call = src[src.index("def call("):]
    print(p[-20:], "empty_strided", len(re.findall(r"empty_strided", call)), "reuse", len(re.findall(r"# reuse", call)), "lines", call.count("\n"))

# --- the planner's view, captured from a second compile
import offload_compiler.planning.search as S
got = []
orig_fs = S.final_simulation
def cap(facts, decisions, lanes):
    got.append(facts)
    return orig_fs(facts, decisions, lanes)
S.final_simulation = cap
torch._dynamo.reset()
b2 = offload_compiler.make_backend(policy="cost_model", memory_budget=1.0, devices=("cpu",), replan=False,
                                      plan_cache=False)
f2 = torch.compile(model, backend=b2)
f2(idx, tgt).backward()
facts = got[-1]
n_fw = len(facts.fw_ms)
ts = facts.transients
def count(pred):
    return sum(1 for t in ts if pred(t))
fw_alloc = count(lambda t: t.allocates and not t.workspace and t.first < n_fw)
bw_alloc = count(lambda t: t.allocates and not t.workspace and t.first >= n_fw)
n = len(facts.fw_ms) + len(facts.bw_ms)
until = step_peak.held_for_reuse(ts, [0] * n, n_fw)
reused_fw = sum(1 for i, t in enumerate(ts) if until[i] != t.last and t.last < n_fw)
reused_bw = sum(1 for i, t in enumerate(ts) if until[i] != t.last and t.last >= n_fw)
print("kernels", facts.kernels(), "activations", len(facts.tensors))
print("planner: allocating transients fw", fw_alloc, "bw", bw_alloc, "; reused (pool) fw", reused_fw, "bw", reused_bw)
