"""Node and recompute-chain costs on small traced graphs (fixed CPU profile)."""

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from offload_compiler.planning.costs import NodeCosts, chain_ms, node_ms
from offload_compiler.planning.hardware import CPU_PROFILE

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


def test_causal_fraction_counts_the_scores_the_mask_keeps():
    from offload_compiler.planning.hardware import causal_fraction

    assert causal_fraction(4, 4) == 10 / 16  # 1 + 2 + 3 + 4 of 16
    assert causal_fraction(2, 4) == 3 / 8    # queries 0, 1 see keys 0 and 0..1
    assert causal_fraction(4, 2) == 7 / 8    # queries 1..3 see both keys
    assert causal_fraction(1, 1) == 1.0


def _attention_nodes(causal: bool, dtype=torch.float32, masked: bool = False):
    """The forward and backward attention nodes of a traced SDPA and its gradient;
    ``masked``: a causal mask given as ``attn_mask`` (as Hugging Face models give it)."""
    import torch.nn.functional as F

    def fn(q, k, v, *mask):
        out = F.scaled_dot_product_attention(q, k, v, *mask, is_causal=causal)
        return torch.autograd.grad(out.sum(), (q, k, v))

    inputs = [torch.randn(2, 4, 64, 16, dtype=dtype, requires_grad=True) for _ in range(3)]
    mask = [torch.ones(64, 64, dtype=torch.bool).tril()] if masked else []
    gm = make_fx(fn, tracing_mode="fake")(*inputs, *mask)
    fw, bw = [n for n in gm.graph.nodes if n.op == "call_function" and "attention" in str(n.target)]
    return fw, bw


def test_causal_attention_counts_the_kept_scores():
    from offload_compiler.planning.costs import node_flops
    from passes.nodes import attention_direction

    (full, full_bw), (causal, causal_bw) = _attention_nodes(False), _attention_nodes(True)
    assert (attention_direction(full), attention_direction(full_bw)) == ("forward", "backward")
    assert node_flops(causal) == int(node_flops(full) * (64 * 65 / 2) / 64**2)
    assert node_flops(causal_bw) == int(node_flops(full_bw) * (64 * 65 / 2) / 64**2)


def test_attention_is_costed_at_its_calibrated_rate_per_direction():
    import dataclasses

    from offload_compiler.planning.costs import node_flops

    fw, bw = _attention_nodes(True, torch.bfloat16)
    hw = dataclasses.replace(CPU_PROFILE, matmul_tflops=1e4, attention_tflops=1e-3,
                             attention_backward_tflops=2e-3)
    launch = hw.launch_us / 1e3
    assert node_ms(fw, hw) == pytest.approx(node_flops(fw) / 1e9 * 1e3 + launch)
    assert node_ms(bw, hw) == pytest.approx(node_flops(bw) / 2e9 * 1e3 + launch)
    # float32 attention runs at the float32 matmul rate.
    fw32, _ = _attention_nodes(True)
    hw32 = dataclasses.replace(hw, matmul_fp32_tflops=1e-3)
    assert node_ms(fw32, hw32) == pytest.approx(node_flops(fw32) / 1e9 * 1e3 + launch)


def test_attention_given_a_mask_is_costed_at_the_masked_rates_where_measured():
    """A mask given as a tensor makes the kernel compute every score (FLOPs count them
    all) at its own measured rates; a profile without them prices it as causal attention,
    and attention without a mask keeps the causal rates."""
    import dataclasses

    from offload_compiler.planning.costs import has_mask, node_flops

    fw, bw = _attention_nodes(False, torch.bfloat16, masked=True)
    causal_fw, causal_bw = _attention_nodes(True, torch.bfloat16)
    assert has_mask(fw) and has_mask(bw) and not has_mask(causal_fw) and not has_mask(causal_bw)
    assert node_flops(fw) == node_flops(_attention_nodes(False, torch.bfloat16)[0])  # every score
    hw = dataclasses.replace(CPU_PROFILE, matmul_tflops=1e4, attention_tflops=1e-3,
                             attention_backward_tflops=2e-3)
    masked = dataclasses.replace(hw, attention_masked_tflops=4e-3, attention_masked_backward_tflops=8e-3)
    launch = hw.launch_us / 1e3
    assert node_ms(fw, masked) == pytest.approx(node_flops(fw) / 4e9 * 1e3 + launch)
    assert node_ms(bw, masked) == pytest.approx(node_flops(bw) / 8e9 * 1e3 + launch)
    assert node_ms(fw, hw) == pytest.approx(node_flops(fw) / 1e9 * 1e3 + launch)  # not measured
    assert node_ms(bw, hw) == pytest.approx(node_flops(bw) / 2e9 * 1e3 + launch)
    assert node_ms(causal_fw, masked) == node_ms(causal_fw, hw)
    assert node_ms(causal_bw, masked) == node_ms(causal_bw, hw)


def _conv_nodes(dtype):
    """The forward and backward convolution nodes of a traced 3x3 convolution and its gradients."""
    import torch.nn.functional as F

    def fn(x, w):
        return torch.autograd.grad(F.conv2d(x, w, padding=1).sum(), (x, w))

    inputs = [torch.randn(2, 8, 16, 16, dtype=dtype, requires_grad=True),
              torch.randn(8, 8, 3, 3, dtype=dtype, requires_grad=True)]
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    (fw,) = [n for n in gm.graph.nodes if n.target == torch.ops.aten.convolution.default]
    (bw,) = [n for n in gm.graph.nodes if n.target == torch.ops.aten.convolution_backward.default]
    return fw, bw


def test_convolutions_are_costed_at_their_calibrated_rates_where_measured():
    """A low-precision convolution runs at the calibrated convolution rate of its
    direction; a profile without them (0), and a float32 convolution, price it at the
    matmul rate of its dtype."""
    import dataclasses

    from offload_compiler.planning.costs import node_flops

    from passes.nodes import convolution_direction

    fw, bw = _conv_nodes(torch.bfloat16)
    assert (convolution_direction(fw), convolution_direction(bw)) == ("forward", "backward")
    assert node_flops(bw) == 2 * node_flops(fw) > 0  # both gradients
    hw = dataclasses.replace(CPU_PROFILE, matmul_tflops=1e-3, matmul_fp32_tflops=1e-4, memory_gbps=1e9)
    launch = hw.launch_us / 1e3
    assert node_ms(fw, hw) == pytest.approx(node_flops(fw) / 1e9 * 1e3 + launch)  # not measured
    conv = dataclasses.replace(hw, conv_tflops=4e-4, conv_backward_tflops=2e-4)
    assert node_ms(fw, conv) == pytest.approx(node_flops(fw) / 4e8 * 1e3 + launch)
    assert node_ms(bw, conv) == pytest.approx(node_flops(bw) / 2e8 * 1e3 + launch)
    fw32, _ = _conv_nodes(torch.float32)
    assert node_ms(fw32, conv) == pytest.approx(node_flops(fw32) / 1e8 * 1e3 + launch)


def test_calibration_rates_convolutions_by_their_flops_over_their_time(monkeypatch):
    """``calibration._conv_tflops``: FLOPs of its shapes over the timed forward, twice
    those over the backward (the timed forward and backward less the forward), with the
    timing stood in for (the GPU suite times real kernels)."""
    from offload_compiler.planning import calibration

    monkeypatch.setattr(calibration, "CONV_SHAPES", ((2, 4, 8, 6, 3), (2, 6, 8, 4, 1)))
    timed = iter([1.0, 4.0, 0.5, 1.5])  # per shape: forward, then forward and backward
    monkeypatch.setattr(calibration, "per_call_ms", lambda fn, calls: next(timed))
    fw, bw = calibration._conv_tflops(torch.device("cpu"))
    flops = 2 * 2 * 6 * 8 * 8 * 4 * 9 + 2 * 2 * 4 * 8 * 8 * 6 * 1
    assert fw == pytest.approx(flops / 1.5 / 1e9)  # 1.0 + 0.5 ms
    assert bw == pytest.approx(2 * flops / 4.0 / 1e9)  # (4.0 - 1.0) + (1.5 - 0.5) ms


def test_the_h100_profile_prices_masked_attention_as_measured_there():
    """The offline H100 profile's masked rates are HF Llama's cuDNN attention with its
    mask (session 30): 1.568 ms forward and 5.068 ms backward for its shape."""
    from offload_compiler.offline import PROFILES
    from offload_compiler.planning.hardware import HardwareProfile

    hw = HardwareProfile(**PROFILES["h100"])
    flops = 4 * 4 * 16 * 4096 * 4096 * 128  # batch 4, 16 heads, 4096 tokens, head size 128
    assert flops / (hw.attention_masked_tflops * 1e12) * 1e3 == pytest.approx(1.568, rel=0.001)
    assert 2.5 * flops / (hw.attention_masked_backward_tflops * 1e12) * 1e3 == pytest.approx(5.068, rel=0.001)


def test_ops_the_partitioner_wraps_for_rng_replay_cost_what_they_wrap():
    """Min-cut wraps a random op it recomputes (attention included, even without
    dropout) in an RNG wrapper that carries no result metadata; it costs the wrapped op."""
    import dataclasses

    import torch.fx as fx
    from torch._prims import rng_prims

    fw, _ = _attention_nodes(True, torch.bfloat16)
    hw = dataclasses.replace(CPU_PROFILE, attention_tflops=1e-3)
    graph = fx.Graph()
    inputs = []
    for a in fw.args[:3]:
        p = graph.placeholder(a.name)
        p.meta["val"] = a.meta["val"]
        inputs.append(p)
    state = graph.placeholder("rng_state")
    graphsafe = graph.call_function(rng_prims.graphsafe_run_with_rng_state,
                                    (fw.target, *inputs, *fw.args[3:]), {**fw.kwargs, "rng_state": state})
    replay = graph.call_function(rng_prims.run_with_rng_state, (state, fw.target, *inputs, *fw.args[3:]),
                                 dict(fw.kwargs))
    expected = node_ms(fw, hw)
    assert expected > 1.0  # the attention rate, in bfloat16: not a bandwidth-only cost
    assert node_ms(graphsafe, hw) == pytest.approx(expected)
    assert node_ms(replay, hw) == pytest.approx(expected)


def _gelu_joint(x, w, tangents_1):
    """A joint graph in miniature: forward ``gelu(x @ w)``, backward through the GELU."""
    y = torch.mm(x, w)
    g = torch.nn.functional.gelu(y)
    grad_g = torch.mm(tangents_1, w.t())
    grad_y = torch.ops.aten.gelu_backward(grad_g, y)
    grad_w = torch.mm(g.t(), tangents_1)
    return g, grad_y, grad_w


def test_fused_backward_reads_finds_values_pointwise_backward_ops_read():
    from offload_compiler.planning.fusion import fused_backward_reads

    gm = make_fx(_gelu_joint, tracing_mode="fake")(*[torch.randn(N, N) for _ in range(3)])
    found = {n.name for n in fused_backward_reads(gm.graph)}
    assert "mm" in found  # y: the GELU backward reads it
    assert "gelu" not in found  # g: only the weight-gradient matmul reads it


def test_recomputation_fused_into_a_backward_reader_pays_only_its_write():
    """Recomputing the GELU output from the matmul result that the GELU backward
    reads anyway costs the write of the output, not a second read of its input."""
    from offload_compiler.planning.fusion import fused_backward_reads

    gm = make_fx(_gelu_joint, tracing_mode="fake")(*[torch.randn(N, N) for _ in range(3)])
    nodes = {n.name: n for n in gm.graph.nodes}
    chain, cost, size = [nodes["gelu"]], NodeCosts(CPU_PROFILE), N * N * 4
    assert chain_ms(chain, cost) == pytest.approx(_ms(2 * size))
    # Inside the GELU backward's kernel: its write, and no launch of its own.
    assert chain_ms(chain, cost, fused_backward_reads(gm.graph)) == pytest.approx(_ms(size, launches=0))


def _autocast_gelu_joint(x, w, tangents_1):
    """``_gelu_joint`` as autocast and Inductor's decompositions give it: a bfloat16
    matmul, the GELU computed in float32 from its cast and cast back, and a backward
    whose derivative pieces need no gradient (they read the cast, not the matmul)."""
    y = torch.mm(x, w)
    y32 = y.to(torch.float32)
    g = (0.5 * y32 * (1 + torch.erf(y32 * 0.7071067811865476))).to(torch.bfloat16)
    grad_g = torch.mm(tangents_1, w.t())
    slope = 0.5 * (1 + torch.erf(y32 * 0.7071067811865476)) + y32 * torch.exp(y32 * y32 * -0.5) * 0.3989422804014327
    grad_y = (grad_g.to(torch.float32) * slope).to(torch.bfloat16)
    grad_w = torch.mm(g.t(), tangents_1)
    return g, grad_y, grad_w


def test_a_backward_reading_a_cast_of_a_saved_value_reads_the_saved_value():
    """Under autocast the GELU backward reads the matmul result through its float32 cast,
    recomputed in the backward's fused kernel from the saved result: that result is read
    anyway, and recomputing the GELU output from it costs the write alone (before, a
    second read too: ViT-B/16's GELU outputs were priced at 82 us each on the H100
    profile where 43 us is their write)."""
    from offload_compiler.planning.fusion import fused_backward_reads
    from offload_compiler.planning.facts import _recompute_chain

    gm = make_fx(_autocast_gelu_joint, tracing_mode="fake")(
        *[torch.randn(N, N, dtype=torch.bfloat16) for _ in range(3)])
    nodes = {n.name: n for n in gm.graph.nodes}
    root = next(n for n in gm.graph.nodes if n.name.startswith("_to_copy") and n.users
                and any(u.name == "t_1" for u in n.users))  # g, what the weight gradient reads
    assert nodes["mm"] in fused_backward_reads(gm.graph, saved={nodes["mm"]})
    assert nodes["mm"] not in fused_backward_reads(gm.graph)  # every forward value saved: the cast is
    chain, why = _recompute_chain(nodes, root.name, {"mm"})
    assert not why and not any(n.name == "mm" for n in chain)
    cost, size = NodeCosts(CPU_PROFILE), N * N * 2
    assert chain_ms(chain, cost) == pytest.approx(_ms(2 * size))
    assert chain_ms(chain, cost, fused_backward_reads(gm.graph, saved={nodes["mm"]})) == \
        pytest.approx(_ms(size, launches=0))


def _autocast_gelu_backward(y, w, tangents_1, g=None):
    """The backward graph of ``_autocast_gelu_joint``: recomputing ``g`` from the saved
    matmul result ``y``, or given ``g`` saved."""
    y32 = y.to(torch.float32)
    if g is None:
        g = (0.5 * y32 * (1 + torch.erf(y32 * 0.7071067811865476))).to(torch.bfloat16)
    grad_g = torch.mm(tangents_1, w.t())
    slope = 0.5 * (1 + torch.erf(y32 * 0.7071067811865476)) + y32 * torch.exp(y32 * y32 * -0.5) * 0.3989422804014327
    return (grad_g.to(torch.float32) * slope).to(torch.bfloat16), torch.mm(g.t(), tangents_1)


def _priced(fn, n_inputs):
    """Every node of ``fn``'s backward graph priced as the planner's facts price it."""
    from offload_compiler.planning.fusion import recompute_free_reads

    bw = make_fx(fn, tracing_mode="fake")(*[torch.randn(N, N, dtype=torch.bfloat16) for _ in range(n_inputs)])
    free, cost = recompute_free_reads(bw.graph), NodeCosts(CPU_PROFILE)
    return bw, {n: cost(n, free.get(n, frozenset())) for n in bw.graph.nodes if n.op == "call_function"}


def test_a_realised_autocast_recomputation_costs_its_write_as_priced():
    """The backward graph that realises it: the matmul result is read once in either
    graph (by the cast, which the recomputation and the GELU's derivative share), and
    recomputing the GELU output adds its write, inside the GELU backward's kernel: what
    ``chain_ms`` priced it at in the joint graph."""
    bw, recomputing = _priced(lambda y, w, tangents_1: _autocast_gelu_backward(y, w, tangents_1), 3)
    _, saved = _priced(lambda y, w, tangents_1, g: _autocast_gelu_backward(y, w, tangents_1, g), 4)
    assert sum(recomputing.values()) - sum(saved.values()) == pytest.approx(_ms(N * N * 2, launches=0))
    cast = next(n for n in bw.graph.nodes if n.name.startswith("_to_copy") and n.args[0].op == "placeholder")
    assert recomputing[cast] == pytest.approx(_ms(N * N * 2, launches=0))  # its read, paid once


def _conv_joint(x, w1, w2, tangents_1):
    """A convolution's output ``y``, a pointwise value ``a`` of it (as a norm and ReLU
    give), a second convolution reading ``a``, and a backward whose pointwise kernel
    reads ``y`` but needs the gradient the second convolution's backward computes."""
    y = torch.nn.functional.conv2d(x, w1)
    a = (y * 2).relu()
    return (torch.nn.functional.conv2d(a, w2), *_conv_backward(y, a, w2, tangents_1))


def _conv_backward(y, a, w2, tangents_1):
    """``_conv_joint``'s backward: the second convolution's, then the pointwise kernel."""
    grad_a, _, grad_w2 = torch.ops.aten.convolution_backward(
        tangents_1, a, w2, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True, True, False])
    return torch.where(y > 0, grad_a * 2, 0.0), grad_w2


def test_a_read_shared_with_a_kernel_that_must_wait_for_the_recomputation_is_not_free():
    """Recomputing ``a`` for the second convolution's backward: the kernel that reads
    ``y`` anyway waits for that backward's gradient, so it cannot hold the recomputation
    (ResNet-50's ReLU outputs, session 44): ``a`` pays its read of ``y``, its write and a
    launch. Its own matmul's weight gradient (``_gelu_joint``) leaves the kernel free."""
    from offload_compiler.planning.fusion import extern_consumers, fused_backward_reads

    gm = make_fx(_conv_joint, tracing_mode="fake")(
        torch.randn(1, 16, 16, 16), torch.randn(16, 16, 1, 1), torch.randn(16, 16, 1, 1), torch.randn(1, 16, 16, 16))
    nodes = {n.name: n for n in gm.graph.nodes}
    fused = fused_backward_reads(gm.graph, saved={nodes["convolution"]})
    assert nodes["convolution"] in fused  # read anyway, by a kernel of the backward
    chain, size, cost = [nodes["relu"], nodes["mul"]], 16 * 16 * 16 * 4, NodeCosts(CPU_PROFILE)
    consumers = extern_consumers(nodes["relu"], fused.backward)
    assert [c.name for c in consumers] == ["convolution_backward"]
    assert nodes["convolution"] not in fused.before(consumers)
    assert chain_ms(chain, cost, fused.before(consumers)) == pytest.approx(_ms(2 * size))

    gm = make_fx(_gelu_joint, tracing_mode="fake")(*[torch.randn(N, N) for _ in range(3)])
    nodes = {n.name: n for n in gm.graph.nodes}
    fused = fused_backward_reads(gm.graph)
    assert nodes["mm"] in fused.before(extern_consumers(nodes["gelu"], fused.backward))


def test_a_realised_recomputation_read_by_a_convolution_backward_launches_its_own_kernel():
    """The backward graph that recomputes ``a`` (``_conv_joint``) for the convolution's
    backward: the kernel that reads ``y`` anyway waits for that backward, so the
    recomputation writes ``a`` in a kernel of its own."""
    from offload_compiler.planning.fusion import recompute_free_reads

    bw = make_fx(lambda y, w2, tangents_1: _conv_backward(y, (y * 2).relu(), w2, tangents_1), tracing_mode="fake")(
        torch.randn(1, 16, 16, 16), torch.randn(16, 16, 1, 1), torch.randn(1, 16, 16, 16))
    nodes = {n.name: n for n in bw.graph.nodes}
    free, cost = recompute_free_reads(bw.graph), NodeCosts(CPU_PROFILE)
    assert cost(nodes["relu"], free[nodes["relu"]]) == pytest.approx(_ms(16 * 16 * 16 * 4))  # write and launch


def test_one_extern_kernel_definition_for_passes_and_cost_model():
    import operator

    import torch.nn.functional as F
    from torch._prims import rng_prims
    from torch.fx.experimental.proxy_tensor import make_fx

    from offload_compiler.planning import costs
    from passes import nodes as kernels, placement

    assert costs.is_extern is kernels.is_extern is placement.is_extern

    def fn(q, k, v, w):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = (out.flatten(0, 1) @ w).relu()
        return torch.autograd.grad(y.sum(), (q, k, v))

    args = [torch.randn(2, 4, 64, 16, requires_grad=True) for _ in range(3)] + [torch.randn(16, 16)]
    nodes = [n for n in make_fx(fn)(*args).graph.nodes if n.op == "call_function"]
    extern = {str(n.target).split(".")[1] for n in nodes if kernels.is_extern(n)}
    # Matmuls and CPU flash attention (no formula in torch's counter) both ways.
    assert {"mm", "_scaled_dot_product_flash_attention_for_cpu",
            "_scaled_dot_product_flash_attention_for_cpu_backward"} <= extern
    assert not any(kernels.is_extern(n) for n in nodes
                   if n.target is operator.getitem or "relu" in str(n.target) or "view" in str(n.target))
    # An op the partitioner wraps to replay its RNG state is the op it wraps.
    g = torch.fx.Graph()
    a, b = g.placeholder("a"), g.placeholder("b")
    wrapped = g.call_function(rng_prims.run_and_save_rng_state, (torch.ops.aten.mm.default, a, b))
    plain = g.call_function(rng_prims.run_and_save_rng_state, (torch.ops.aten.relu.default, a))
    assert kernels.is_extern(wrapped) and not kernels.is_extern(plain)
    assert kernels.called_op(wrapped)[0] is torch.ops.aten.mm.default


def _gelu_backward_recomputing(y, w, tangents_1):
    """The backward graph of ``_gelu_joint`` whose partition recomputes the GELU output
    from the saved matmul result ``y``, as a plan that recomputes it realises."""
    g = torch.nn.functional.gelu(y)
    grad_g = torch.mm(tangents_1, w.t())
    grad_y = torch.ops.aten.gelu_backward(grad_g, y)
    grad_w = torch.mm(g.t(), tangents_1)
    return grad_y, grad_w


def test_a_realised_recomputation_costs_what_the_solver_priced_it_at():
    """The same recomputation priced in the joint graph (``chain_ms``, what the solver
    chooses with) and as a node of the backward graph that realises it (``node_ms``,
    what the realised plan is simulated with): its read of ``y``, which the GELU
    backward reads anyway, is free in both; the backward's own ops pay as before."""
    from offload_compiler.planning.fusion import recompute_free_reads, fused_backward_reads

    joint = make_fx(_gelu_joint, tracing_mode="fake")(*[torch.randn(N, N) for _ in range(3)])
    priced = chain_ms([{n.name: n for n in joint.graph.nodes}["gelu"]], NodeCosts(CPU_PROFILE),
                      fused_backward_reads(joint.graph))
    bw = make_fx(_gelu_backward_recomputing, tracing_mode="fake")(*[torch.randn(N, N) for _ in range(3)])
    nodes = {n.name: n for n in bw.graph.nodes}
    free = recompute_free_reads(bw.graph)
    assert set(free) == {nodes["gelu"], nodes["t"], nodes["t_1"]}  # the ops that depend on no tangent
    assert nodes["y_1"] in free[nodes["gelu"]]
    cost = NodeCosts(CPU_PROFILE)
    assert cost(nodes["gelu"], free[nodes["gelu"]]) == pytest.approx(priced)
    assert cost(nodes["gelu"]) == pytest.approx(priced + _ms(N * N * 4))  # a read, and a kernel of its own
    assert cost(nodes["gelu_backward"], free.get(nodes["gelu_backward"], frozenset())) == \
        pytest.approx(cost(nodes["gelu_backward"]))
