"""Session 35 (issue 18): where a transfer op's host time goes. Command 2's probe timed
``offload::d2h`` at 52.8 us a call on an H100's host while its parts (the pool, the
events, the stream switch, the copy) summed to about 22 us. Here, with the GPU held so
nothing waits: each op called as a compiled graph calls it (``torch.ops.offload.*``)
against its body called directly, the dispatcher's cost for an op with a Python kernel
(``torch.ops.offload.wait`` on a CPU tensor, whose body returns at once), and a
``cProfile`` of 300 d2h calls, by function.

    PYTHONPATH=$PWD python benchmarks/results/2026-11-27_s35_op_probe.py
"""
import cProfile
import pstats
import time

import torch

from offload_compiler.runtime import measure, ops

dev = torch.device("cuda")
cycles_ms = measure._cycles_per_ms(dev)
src = torch.randn(96 * 197 * 768, device=dev, dtype=torch.bfloat16)
anchor = torch.zeros(4, device=dev)
cpu = torch.zeros(4)


def timed(label, fn, n=400):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(int(150 * cycles_ms))
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    dt = 1e6 * (time.perf_counter() - t0) / n
    torch.cuda.synchronize()
    print(f"  {label:48} {dt:7.2f} us")


def d2h_release_op():
    host = ops.D2H(src, True)
    ops.RELEASE(src, host, anchor)


def d2h_release_body():
    host = ops.copy_to_host(src, True)
    ops.release_source(src, host)


host = ops.D2H(src, True)
torch.cuda.synchronize()


def h2d_wait_op():
    out = ops.H2D(host, anchor, "cuda", None)
    ops.WAIT(out)


def h2d_wait_body():
    out = ops.copy_to_device(host, anchor, "cuda", None)
    ops.wait_for_copy(out)


print("us per call, GPU held (the host never waits):")
timed("d2h + release, torch.ops", d2h_release_op)
timed("d2h + release, bodies", d2h_release_body)
timed("d2h, torch.ops", lambda: ops.D2H(src, True))
timed("d2h, body", lambda: ops.copy_to_host(src, True))
timed("d2h, _d2h_cuda", lambda: ops._d2h_cuda(src, src))
timed("h2d + wait, torch.ops", h2d_wait_op)
timed("h2d + wait, bodies", h2d_wait_body)
timed("wait on a CPU tensor, torch.ops (dispatch only)", lambda: ops.WAIT(cpu))
timed("wait on a CPU tensor, body", lambda: ops.wait_for_copy(cpu))
timed("wait on a CUDA tensor, torch.ops (no event)", lambda: ops.WAIT(anchor))
timed("release, torch.ops", lambda: ops.RELEASE(src, host, anchor))
timed("aten.add on CUDA (reference)", lambda: torch.ops.aten.add.Tensor(anchor, anchor))

torch.cuda.synchronize()
torch.cuda._sleep(int(200 * cycles_ms))
prof = cProfile.Profile()
prof.enable()
for _ in range(300):
    d2h_release_op()
prof.disable()
torch.cuda.synchronize()
pstats.Stats(prof).sort_stats("tottime").print_stats(18)
