"""Liveness: kernel ends through fused chains, in-place reuse, the step's transients."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from offload_compiler.planning.liveness import Liveness, step_transients, workspace_bytes


def _graph(fn, *shapes):
    args = [torch.randn(s, dtype=torch.bfloat16) for s in shapes]
    gm = make_fx(fn)(*args)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    return gm, nodes, {n.name: n for n in gm.graph.nodes}


def _loss_like(x, w, w2):
    logits = x @ w                                   # materialized: an extern result
    y = (logits.float().exp() - 1).to(torch.bfloat16)  # fused, written out for the mm
    return y @ w2


def test_a_tensor_read_by_a_fused_chain_lives_until_the_chain_is_written():
    gm, nodes, by = _graph(_loss_like, (64, 32), (32, 128), (128, 16))
    live = Liveness(nodes)
    logits, y = by["mm"], [n for n in nodes if n.name.startswith("_to_copy")][-1]
    # The first reader is the cast; the kernel that reads the logits writes y.
    assert live.last_read(logits) == live.pos[y]
    assert live.end[by["exp"]] == live.pos[y]


def test_output_written_over_its_dead_input_in_place():
    gm, nodes, by = _graph(_loss_like, (64, 32), (32, 128), (128, 16))
    y = [n for n in nodes if n.name.startswith("_to_copy")][-1]
    live = Liveness(nodes)
    assert live.inplace == {live.pos[y]: by["mm"]}
    # y counts from the op after its own: the logits' memory holds it until then.
    mine = {t[:3] for t in step_transients(live, Liveness([], len(nodes)), 1)}
    assert (64 * 128 * 2, live.pos[y] + 1, live.pos[by["mm_1"]]) in mine
    assert (64 * 128 * 2, live.pos[by["mm"]], live.pos[y]) in mine


def test_no_in_place_over_a_value_the_graph_outputs():
    def fn(x, w, w2):
        logits = x @ w
        y = (logits.float().exp() - 1).to(torch.bfloat16)
        return y @ w2, logits

    gm, nodes, by = _graph(fn, (64, 32), (32, 128), (128, 16))
    live = Liveness(nodes)
    assert live.inplace == {}
    # A model output is held to the end of the step; backward has two ops here.
    bw = Liveness([], len(nodes))
    spans = step_transients(live, bw, 2)
    assert (64 * 128 * 2, live.pos[by["mm"]], len(nodes) - 1) in {t[:3] for t in spans}


def test_no_in_place_over_inputs_unless_donated_or_of_another_size():
    def fn(a, w):
        return ((a.float() * 2).to(torch.bfloat16)) @ w

    gm, nodes, by = _graph(fn, (64, 128), (128, 16))
    assert Liveness(nodes).inplace == {}
    donated = Liveness(nodes, donated=True)
    assert list(donated.inplace.values())[0].op == "placeholder"

    def wider(a, w):  # the cast doubles the bytes: nothing to write over
        return (a.float() * 2) @ w.float()

    gm, nodes, by = _graph(wider, (64, 128), (128, 16))
    assert Liveness(nodes, donated=True).inplace == {}


def test_a_matmul_added_to_another_value_runs_at_the_add():
    # Inductor writes add(mm(a, b), c) as addmm(c, a, b) at the add: a and b are read
    # there. Here g's matmul is deferred past the unrelated matmul h.
    def fn(a, b, c, w):
        g = a.t() @ b
        h = c @ w
        return (g + h) * 1

    gm, nodes, by = _graph(fn, (64, 32), (64, 32), (32, 16), (16, 32))
    live = Liveness(nodes)
    add = by["add"]
    assert live.deferred == {by["mm"]: live.pos[add]}
    assert live.last_read(by["t"].args[0]) == live.pos[add]
    # The deferred matmul writes nothing of its own; the sum is written at the add.
    spans = step_transients(live, Liveness([], len(nodes)), 1)
    assert all(t.first != live.pos[by["mm"]] for t in spans)


def test_keep_matmuls_early_stops_a_deferral_that_holds_large_inputs():
    from passes import keep_matmuls_early

    # g = a.t() @ b is added to h at the end: as an addmm it would hold a and b (the
    # large inputs) until then. After the pass it runs where it is, exactly.
    def fn(a, b, c, w):
        g = a.t() @ b
        h = c @ w
        return (g + h) * 1

    shapes = ((256, 32), (256, 32), (32, 16), (16, 32))
    gm, nodes, by = _graph(fn, *shapes)
    assert Liveness(nodes).deferred
    args = [torch.randn(s, dtype=torch.bfloat16) for s in shapes]
    expected = gm(*args)
    assert keep_matmuls_early(gm) == 1
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert by["mm"] not in Liveness(nodes).deferred  # h's small matmul may still be
    assert torch.equal(gm(*args), expected)
    # Small inputs (here smaller than the 32x32 result) are left to Inductor.
    gm, _, _ = _graph(fn, (4, 32), (4, 32), (32, 16), (16, 32))
    assert keep_matmuls_early(gm) == 0


def test_transients_carry_what_inductors_buffer_pool_needs():
    gm, nodes, by = _graph(_loss_like, (64, 32), (32, 128), (128, 16))
    live = Liveness(nodes)
    y = [n for n in nodes if n.name.startswith("_to_copy")][-1]
    spans = {(t.first, t.nbytes): t for t in step_transients(live, Liveness([], len(nodes)), 1)}
    logits = spans[live.pos[by["mm"]], 64 * 128 * 2]
    written_over = spans[live.pos[y] + 1, 64 * 128 * 2]
    out = spans[live.pos[by["mm_1"]], 64 * 16 * 2]
    # The logits: allocated by Inductor, but written over by y, so never pooled.
    assert (logits.key, logits.allocates, logits.pooled) == ("torch.bfloat16:16384", True, False)
    # y takes the logits' memory (allocates nothing) and is pooled when it dies.
    assert (written_over.allocates, written_over.pooled) == (False, True)
    # The model's output is never pooled.
    assert out.allocates and not out.pooled


def test_attention_backward_holds_an_fp32_accumulator_for_the_query_gradient():
    import torch.nn.functional as F

    def fn(q, k, v):
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.autograd.grad(out.sum(), (q, k, v))

    args = [torch.randn(2, 4, 64, 16, dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]
    nodes = [n for n in make_fx(fn)(*args).graph.nodes if n.op == "call_function"]
    backward = [n for n in nodes if "attention" in str(n.target) and "backward" in str(n.target)]
    assert len(backward) == 1
    assert workspace_bytes(backward[0]) == 4 * 2 * 4 * 64 * 16
    assert sum(workspace_bytes(n) for n in nodes) == workspace_bytes(backward[0])
    live = Liveness(nodes)
    at = live.pos[backward[0]]
    assert (4 * 2 * 4 * 64 * 16, at, at) in {t[:3] for t in step_transients(live, Liveness([], len(nodes)), 1)}


def _swiglu_backward(gate_in, up_in, g_out, w_down, x):
    # A SwiGLU MLP's backward with gate and up recomputed, in the order a graph lists it:
    # the recomputed product, its weight gradient, then the output's gradient and the
    # gradients of up and gate (as in HF Llama's backward, session 28).
    gate, up = x @ gate_in, x @ up_in
    act = torch.nn.functional.silu(gate) * up            # read by the down weight's matmul
    w_grad = g_out.t() @ act
    g_act = g_out @ w_down                                # the output's gradient
    g_up = g_act * torch.nn.functional.silu(gate)         # reads gate, like act
    sig = torch.sigmoid(gate.float())
    g_gate = (g_act.float() * up.float() * sig * (1 + gate.float() * (1 - sig))).to(torch.bfloat16)
    return w_grad, g_up.t() @ x, g_gate.t() @ x


def test_kernels_inductor_fuses_are_written_at_the_first_ones_place():
    shapes = ((32, 64), (32, 64), (16, 32), (32, 64), (16, 32))
    gm, nodes, by = _graph(_swiglu_backward, *shapes)
    live = Liveness(nodes)
    act = [n for n in nodes if n.target == torch.ops.aten.mul.Tensor and live.end[n] == live.pos[n]][0]
    g_act = by["mm_3"]  # g_out @ w_down, after act's weight gradient (mm_2) in the graph
    assert live.pos[g_act] > live.pos[by["mm_2"]] > live.pos[act]
    # act, g_up and g_gate read gate (or up) and run as one kernel at act's place, with
    # the matmul of the output's gradient pulled before it.
    later = [n for n in live.early if live.end[n] == live.pos[n] and n is not g_act]
    assert len(later) == 2 and all(live.written_at(n) == live.pos[act] for n in later)
    assert live.written_at(g_act) == live.pos[act] and live.written_at(act) == live.pos[act]
    # So the six 16x64 buffers (gate, up, act, g_act, g_up, g_gate) are live at once there.
    at = live.pos[act]
    spans = step_transients(live, Liveness([], len(nodes)), 3)
    live_there = [t for t in spans if t.first <= at <= t.last and t.nbytes == 16 * 64 * 2]
    assert len(live_there) == 6
    assert {t.op for t in live_there if t.op >= 0} == {live.pos[n] for n in (*later, g_act)}


def test_no_early_write_for_dependent_or_distant_kernels(monkeypatch):
    from offload_compiler.planning import liveness

    def chained(a, b, w, w2):
        y = torch.nn.functional.silu(a) * b        # read by a matmul: its own kernel
        z = (y @ w) * torch.nn.functional.silu(a)  # reads a too, but depends on y
        return z @ w2

    gm, nodes, by = _graph(chained, (16, 32), (16, 32), (32, 32), (32, 8))
    assert Liveness(nodes).early == {}  # fusing z with y would make a cycle through the matmul
    shapes = ((32, 64), (32, 64), (16, 32), (32, 64), (16, 32))
    gm, nodes, by = _graph(_swiglu_backward, *shapes)
    kernels = [n for n in nodes if Liveness(nodes).end[n] == Liveness(nodes).pos[n]]
    act, g_up, g_gate = (n for n in kernels if n.target in (torch.ops.aten.mul.Tensor,
                                                             torch.ops.aten._to_copy.default))
    # Kernels further apart in Inductor's order of kernels than it fuses stay apart: at
    # a distance of 1, g_gate (next to g_up) is fused with g_up, act (three away) is not.
    monkeypatch.setattr(liveness, "FUSION_DISTANCE", 1)
    live = Liveness(nodes)
    assert kernels.index(g_gate) - kernels.index(g_up) == 1 and kernels.index(g_up) - kernels.index(act) == 3
    assert act not in live.early and g_up not in live.early and live.written_at(g_gate) == live.pos[g_up]
    monkeypatch.setattr(liveness, "FUSION_DISTANCE", 0)
    assert Liveness(nodes).early == {}


def _residual_stream(x, w):
    # Six pre-norm blocks: each add is read by the next norm's statistics, its
    # normalisation and the next add (as ViT-B/16's and HF Llama's residual streams).
    h = x
    for _ in range(6):
        scale = torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6)
        h = h + ((h.float() * scale).to(torch.bfloat16) @ w)
    return h


def test_inductor_writes_a_reused_value_once_its_inlined_reads_pass_four():
    gm, nodes, by = _graph(_residual_stream, (16, 32), (32, 32))
    live = Liveness(nodes)
    adds = [n for n in nodes if n.target == torch.ops.aten.add.Tensor and n.args[1] in
            [m for m in nodes if m.target == torch.ops.aten.mm.default]]
    assert len(adds) == 6
    # The first add reads x and a matmul; each inlines the one before, so the fourth
    # reads five buffers (x and four matmuls) and is written; the count starts again.
    assert [a in live.realized for a in adds] == [False, False, False, True, False, False]
    # Every matmul before it is read by the kernel that writes it, not held to the end.
    mm = [n for n in nodes if n.target == torch.ops.aten.mm.default]
    assert live.last_read(mm[0]) <= live.pos[adds[3]]
    # And it is a transient of its own (here written over the last matmul's buffer).
    at = live.pos[adds[3]]
    assert any(t.first in (at, at + 1) and t.nbytes == 16 * 32 * 2 and t.last > at
               for t in step_transients(live, Liveness([], len(nodes)), 1))
