"""Session 26 (issue 19): a cold first step on the CPU, for the collector's A/B where no
GPU is lent. The example GPT's ``medium`` preset at batch 1, sequence 512, in bf16,
compiled by Inductor for the CPU, either plain (``inductor``) or with the offload
backend in loopback mode at budget 0.5 with the H100 profile (``offload``); Inductor's
cache in a fresh folder, no plan cache. Prints the first step's wall seconds.

    python benchmarks/results/2026-11-25_s26_gc_probe.py [--no-scope] \
        results/2026-11-25_s26_cpu_first_step.py offload
"""

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="s26-cpu-first-step-")
os.environ["OFFLOAD_COMPILER_PLAN_CACHE"] = "0"

import torch  # noqa: E402

from offload_compiler.models.gpt import GPT, make_batch, preset  # noqa: E402
from plan_offline import H100_PROFILE  # noqa: E402

strategy = sys.argv[1] if len(sys.argv) > 1 else "offload"
if strategy not in ("inductor", "offload"):
    raise SystemExit(f"strategy {strategy!r}: give inductor or offload")
cfg = preset("medium", batch_size=1, seq_len=512)
torch.manual_seed(0)
model = GPT(cfg).to(torch.bfloat16).train()
batch = make_batch(cfg, device="cpu")
if strategy == "inductor":
    compiled = torch.compile(model)
else:
    compiled = torch.compile(model, backend="offload", options={
        "devices": ("cpu",), "hardware": H100_PROFILE, "memory_budget": 0.5,
        "policy": "cost_model", "plan_cache": False})
t0 = time.perf_counter()
compiled(*batch).backward()
print(f"cpu medium {strategy}: first step {time.perf_counter() - t0:.1f} s", flush=True)
