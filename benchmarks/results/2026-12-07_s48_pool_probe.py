"""Session 48 (issue 18): does a forward with transfer ops keep Inductor's buffer pool on a GPU?

    python benchmarks/results/2026-12-07_s48_pool_probe.py

A small convolutional net (batch norms and ReLUs, as ResNet's) compiled by the backend with
``policy="all"`` (every saved activation offloaded, Inductor inner compiler): counts the pool's
reuses (``bufN = bufM; del bufM  # reuse``) in the forward's and the backward's generated code,
against Inductor's own compile of the same model, with the package's debug log on (it says where
the reuse estimate was left as Inductor's).
"""

import logging
import re
import sys

import torch
from torch import nn
from torch._inductor.utils import run_and_get_code

import offload_compiler

logging.basicConfig(level=logging.WARNING, stream=sys.stdout)
logging.getLogger("offload_compiler").setLevel(logging.DEBUG)


def net() -> nn.Module:
    layers = []
    for i in range(4):
        layers += [nn.Conv2d(3 if i == 0 else 64, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU()]
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(64 * 32 * 32, 10)).cuda()


def reuses(code: str) -> int:
    return len(re.findall(r"^\s*\w+ = \w+; del \w+  # reuse$", code, flags=re.M))


def main() -> None:
    torch._inductor.config.force_disable_caches = True
    x = torch.randn(64, 3, 32, 32, device="cuda")
    for name, compiled in (("inductor", lambda m: torch.compile(m)),
                           ("offload all", lambda m: torch.compile(m, backend=offload_compiler.make_backend(
                               policy="all", replan=False, plan_cache=False)))):
        torch.manual_seed(0)
        model = compiled(net())
        _, codes = run_and_get_code(lambda: model(x).sum().backward())
        d2h = [c.count("offload.d2h") for c in codes]
        print(f"{name}: {len(codes)} graphs; reuses per graph {[reuses(c) for c in codes]}; d2h calls {d2h}")
        torch._dynamo.reset()


if __name__ == "__main__":
    main()
