"""Session 45 probe (issue 18): how this torch's Inductor estimates a graph's peak for
buffer reuse (``EfficientPeakEstimate``), printed from its source, and the estimate of a
small training forward on the GPU with what each output buffer is sized at.

    python benchmarks/results/2026-11-29_s45_estimate_source.py > $OUT/estimate_source.txt
"""
import inspect

import torch
from torch._inductor import memory
from torch._inductor.codegen import wrapper

print(torch.__version__)
for fn in ("peak_memory_from_buf_info_list", "estimate_peak_memory", "compute_memory_timeline",
           "compute_size_for_scheduler_buffer", "get_freeable_input_buf"):
    f = getattr(memory, fn, None)
    print(f"==== memory.{fn}\n" + (inspect.getsource(f) if f else "absent"))
print("==== wrapper.EfficientPeakEstimate\n" + inspect.getsource(wrapper.EfficientPeakEstimate))
print("==== wrapper.AllocateLine.should_reuse_buffer\n" + inspect.getsource(wrapper.AllocateLine.should_reuse_buffer))

seen = []
init = wrapper.EfficientPeakEstimate.__init__


def watched(self):
    init(self)
    from torch._inductor.virtualized import V
    outs = set(V.graph.get_output_names())
    sizes = []
    for node in V.graph.scheduler.nodes:
        for buf in node.get_outputs():
            mpi = getattr(buf, "mpi_buffer", None)
            sizes.append((buf.get_name(), buf.get_name() in outs, mpi and (mpi.size_alloc, mpi.size_free)))
    tree = self.segmented_tree
    seen.append((self.overall_peak_memory, [tree.summarize_range(i, i) for i in range(tree.n)], sizes))


wrapper.EfficientPeakEstimate.__init__ = watched
m = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU()) for _ in range(3)]).cuda()
torch.compile(m)(torch.randn(4096, 1024, device="cuda", requires_grad=True)).sum().backward()
for peak, curve, sizes in seen:
    print("==== estimate: peak", peak, "curve", curve)
    print("buffers (name, graph output, (size_alloc, size_free)):", sizes)
