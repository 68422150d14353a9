"""Session 45 probe (issue 18): where a ResNet-50 forward's device allocations come from.

Session 44's recompute-only re-plans of ResNet-50 issued their forward with 584 to 604
device allocations where the plan that moved nothing made 327, and took the host longer.
One configuration per process (Inductor's caches off): compile, warm up, then over three
steps count the caching allocator's allocations and the host's time in the forward and
the backward, and keep Inductor's generated code (``TORCH_LOGS=output_code``).

    python benchmarks/results/2026-11-29_s45_allocprobe.py --out $OUT/alloc
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CONFIGS = {
    "inductor": None,
    "none": {"policy": "none"},
    "keep_all": {"memory_budget": 1.0, "replan": False},
    # Transfers priced out: the plan recomputes only.
    "recompute_0.7": {"memory_budget": 0.7, "replan": False,
                      "hardware": {"d2h_gbps": 0.01, "h2d_gbps": 0.01, "duplex_gbps": 0.02}},
    "full_ac": "full",  # Inductor, every bottleneck under torch.utils.checkpoint
}


def watch_reuse(out: str, name: str) -> None:
    """Record Inductor's own peak estimate for each graph it generates code for, and each
    buffer reuse it weighs (``codegen/wrapper.py``): refused where the reuse would raise
    that estimate's peak."""
    from torch._inductor.codegen import wrapper

    graphs = []
    est_init = wrapper.EfficientPeakEstimate.__init__
    should = wrapper.AllocateLine.should_reuse_buffer

    def init(self):
        est_init(self)
        tree = self.segmented_tree
        n = tree.n if hasattr(tree, "n") else None
        values = [tree.summarize_range(i, i) for i in range(n)] if n else []
        top = max(range(len(values)), key=values.__getitem__) if values else -1
        graphs.append({"peak": self.overall_peak_memory, "nodes": n, "argmax": top,
                       "deciles": [values[int(len(values) * f / 10)] for f in range(10)] if values else [],
                       "asked": 0, "adjacent": 0, "refused": 0})

    def reuse(self, free_line, size):
        ok = should(self, free_line, size)
        g = graphs[-1]
        g["asked"] += 1
        g["adjacent"] += free_line.scheduler_node_index + 1 == self.scheduler_node_index
        g["refused"] += not ok
        return ok

    wrapper.EfficientPeakEstimate.__init__ = init
    wrapper.AllocateLine.should_reuse_buffer = reuse
    import atexit
    atexit.register(lambda: json.dump(graphs, open(os.path.join(out, f"estimate_{name}.json"), "w")))


def child(name: str, out: str) -> None:
    import torch
    sys.path.insert(0, os.getcwd())
    import offload_compiler  # noqa: F401
    from benchmarks.zoo_models import resnet50

    watch_reuse(out, name)
    model, batch = resnet50()
    model = model.cuda()
    batch = tuple(b.cuda() for b in batch)
    opts = CONFIGS[name]
    if opts == "full":
        from offload_compiler.compare.run import wrap_blocks
        wrap_blocks(model.bottlenecks, "full")
    if opts is None or opts == "full":
        compiled = torch.compile(model)
    else:
        compiled = torch.compile(model, backend="offload", options=opts)
    for _ in range(4):
        compiled(*batch).backward()
        model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    rows = []
    for _ in range(3):
        def count():
            s = torch.cuda.memory_stats()
            return s["allocation.all.allocated"], s.get("segment.all.allocated", 0)
        torch.cuda.synchronize()
        a0 = count(); t0 = time.perf_counter()
        loss = compiled(*batch)
        t1 = time.perf_counter(); a1 = count()
        loss.backward()
        t2 = time.perf_counter(); a2 = count()
        torch.cuda.synchronize()
        model.zero_grad(set_to_none=True)
        rows.append({"fw_alloc": a1[0] - a0[0], "bw_alloc": a2[0] - a1[0], "segments": a2[1] - a0[1],
                     "host_fw_ms": (t1 - t0) * 1e3, "host_bw_ms": (t2 - t1) * 1e3})
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    med["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump({"config": name, "median": med, "rows": rows}, f)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--child")
    p.add_argument("--configs", default=",".join(CONFIGS))
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.child:
        return child(a.child, a.out)
    names = a.configs.split(",")
    for name in names:
        env = dict(os.environ, TORCHINDUCTOR_FORCE_DISABLE_CACHES="1", TORCH_LOGS="output_code",
                   TORCH_LOGS_OUT=os.path.join(a.out, f"code_{name}.log"))
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, __file__, "--out", a.out, "--child", name], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
        print(f"{name}: rc {r.returncode} in {time.perf_counter() - t0:.0f} s", flush=True)
        if r.returncode:
            print(r.stdout[-3000:])
    print("config fw_alloc bw_alloc segments host_fw_ms host_bw_ms peak_gib")
    for name in names:
        path = os.path.join(a.out, f"{name}.json")
        if os.path.exists(path):
            m = json.load(open(path))["median"]
            print(name, " ".join(f"{m[k]:.1f}" for k in ("fw_alloc", "bw_alloc", "segments", "host_fw_ms",
                                                         "host_bw_ms", "peak_gib")))
        path = os.path.join(a.out, f"estimate_{name}.json")
        for g in json.load(open(path)) if os.path.exists(path) else ():
            print(f"  estimate: peak {g['peak'] / 2**30:.2f} GiB at node {g['argmax']} of {g['nodes']}, "
                  f"deciles {[round(v / 2**30, 2) for v in g['deciles']]}; reuses weighed {g['asked']}, "
                  f"adjacent {g['adjacent']}, refused {g['refused']}")


if __name__ == "__main__":
    main()
