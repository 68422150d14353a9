"""Run the transfer ops' bodies under PyTorch's CUDA sanitizer (CSAN).

Run as a script with TORCH_CUDA_SANITIZER=1 (tests/test_gpu.py does). Dynamo does not
compile under an active dispatch mode and a custom op is opaque to CSAN, so this calls
the op bodies directly, in the order a rewritten step runs them, with pool reuse and
allocator reuse of released memory. ``--broken`` runs a copy with no stream wait and
must be flagged, which shows the checker is live.
"""

import sys

import torch

from offload_compiler.runtime import ops

N = 1 << 22


def step(i: int) -> None:
    x = torch.randn(N, device="cuda") * (i + 1)            # producer, compute stream
    expected = x.sum()
    host = ops.copy_to_host(x, True)                        # D2H stream reads x
    y = x + 1                                               # another forward reader of x
    ops.release_source(x, host)                             # compute waits for the copy
    del x
    scratch = torch.empty(N, device="cuda").fill_(7.0)     # may reuse x's memory
    dev = ops.copy_to_device(host, scratch, "cuda", None)  # H2D stream writes dev
    ops.wait_for_copy(dev)                                  # compute waits for it
    got = (dev * 1).sum()
    del host, dev
    assert torch.allclose(got, expected), (got, expected)
    assert y.numel() == N and scratch.numel() == N


def broken() -> None:
    x = torch.randn(N, device="cuda")
    side = torch.cuda.Stream()
    host = torch.empty(N, pin_memory=True)
    with torch.cuda.stream(side):  # no wait on the compute stream: a race
        host.copy_(x, non_blocking=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    if "--broken" in sys.argv:
        broken()
    else:
        for i in range(20):
            step(i)
        torch.cuda.synchronize()
    print("csan-clean")
