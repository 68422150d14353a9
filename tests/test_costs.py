"""Node and recompute-chain costs on small traced graphs (fixed CPU profile)."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from offload_compiler.costs import NodeCosts, chain_ms, node_ms
from offload_compiler.hardware import CPU_PROFILE

N = 256  # float32 [N, N]: 256 KiB per tensor


def _graph(fn, *shapes):
    gm = make_fx(fn, tracing_mode="fake")(*[torch.randn(s) for s in shapes])
    return {n.name: n for n in gm.graph.nodes}


def _ms(nbytes, launches=1):
    return nbytes / (CPU_PROFILE.memory_gbps * 1e9) * 1e3 + launches * CPU_PROFILE.launch_us / 1e3


def test_pointwise_chain_reads_its_saved_input_once_and_writes_its_root():
    nodes = _graph(lambda x: (x * 2 + 1).sin(), (N, N))
    chain = [nodes["sin"], nodes["add"], nodes["mul"]]  # root first
    size = N * N * 4
    assert chain_ms(chain, NodeCosts(CPU_PROFILE)) == pytest.approx(_ms(2 * size))


def test_chain_with_a_matmul_pays_the_matmul_and_materializes_its_input():
    nodes = _graph(lambda x, w: torch.mm(x.relu(), w), (N, N), (N, N))
    cost = NodeCosts(CPU_PROFILE)
    chain = [nodes["mm"], nodes["relu"]]
    size = N * N * 4
    # relu reads x and writes its result for the mm; the mm costs what node_ms says.
    expected = node_ms(nodes["mm"], CPU_PROFILE) + _ms(2 * size)
    assert chain_ms(chain, cost) == pytest.approx(expected)
    assert node_ms(nodes["mm"], CPU_PROFILE) >= 2 * N**3 / (CPU_PROFILE.matmul_fp32_tflops * 1e12) * 1e3


def test_profile_mode_estimates_cpu_nodes():
    nodes = _graph(lambda x, w: torch.mm(x, w), (N, N), (N, N))
    assert NodeCosts(CPU_PROFILE, profile=True)(nodes["mm"]) == node_ms(nodes["mm"], CPU_PROFILE)
