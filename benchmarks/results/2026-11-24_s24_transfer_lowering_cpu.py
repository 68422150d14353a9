"""Session 24 (issue 19): what Inductor's lowering of each transfer op costs, on a CPU.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-24_s24_transfer_lowering_cpu.py [inductor|BUDGET]

Compiles the example GPT's ``medium`` preset (batch 1, sequence 512, float32) on the CPU,
with Inductor or the offload backend in loopback mode (the H100 profile of
``plan_offline.py``, the budget given; default 0.3), Inductor's caches in a fresh
folder, and times ``GraphLowering.run_node`` per kind of node (transfer ops by op, other
calls, placeholders, outputs), the total and the slowest single node of each kind, and
the compile phases of ``dynamo_timed``.
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="transfer-lowering-")


def main() -> None:
    import torch
    from plan_offline import H100_PROFILE
    from torch._inductor.graph import GraphLowering

    from offload_compiler.compare.run import compile_phases
    from offload_compiler.models.gpt import GPT, make_batch, preset
    from passes.nodes import is_transfer

    strategy = sys.argv[1] if len(sys.argv) > 1 else "0.3"
    rows: dict[str, list] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    run_node = GraphLowering.run_node

    def timed(self, n):
        t = time.perf_counter()
        try:
            return run_node(self, n)
        finally:
            took = time.perf_counter() - t
            row = rows[str(n.target) if is_transfer(n) else n.op]
            row[0] += 1
            row[1] += took
            row[2] = max(row[2], took)

    GraphLowering.run_node = timed
    cfg = preset("medium", batch_size=1, seq_len=512)
    torch.manual_seed(0)
    model = GPT(cfg)
    ids, targets = make_batch(cfg)
    if strategy == "inductor":
        compiled = torch.compile(model)
    else:
        compiled = torch.compile(model, backend="offload", options={
            "devices": ("cpu",), "hardware": H100_PROFILE, "memory_budget": float(strategy),
            "plan_cache": False})
    t0 = time.perf_counter()
    compiled(ids, targets).backward()
    print(f"medium (batch 1, sequence 512) {strategy}: first step {time.perf_counter() - t0:.1f} s")
    phases = compile_phases()
    for name in ("OffloadPartitioner", "min_cut_rematerialization_partition", "GraphLowering.run",
                 "Scheduler.__init__", "compile_fx.<locals>.fw_compiler_base",
                 "compile_fx.<locals>.bw_compiler"):
        print(f"  {name}: {phases.get(name, 0.0):.2f} s")
    print("  nodes lowered (GraphLowering.run_node): calls, total s, slowest s, kind")
    for kind, (calls, total, slowest) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        print(f"  {calls:6d} {total:7.3f} {slowest:7.3f}  {kind}")


if __name__ == "__main__":
    main()
