"""``passes.recompute_saved``: saved values recomputed in backward on min-cut's partition,
run by AOTAutograd as it runs any partition."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx
from torch._functorch.aot_autograd import aot_function, make_boxed_compiler
from torch._functorch.partitioners import min_cut_rematerialization_partition

from passes import saved_values
from passes.recompute_saved import NotRecomputable, recompute_saved


def _chain(joint: fx.GraphModule, name: str, saved: set[str]) -> list[str]:
    """Joint ops computing ``name`` from ``saved`` values and graph inputs."""
    nodes = {n.name: n for n in joint.graph.nodes}
    chain, todo = [], [nodes[name]]
    while todo:
        node = todo.pop()
        if node.name in chain or node.op == "placeholder" or (node.name in saved and node.name != name):
            continue
        chain.append(node.name)
        todo.extend(node.all_input_nodes)
    return chain


@make_boxed_compiler
def _identity(gm, example_inputs):
    return gm


def _run(fn, args, recompute, seen):
    """``fn``'s output and gradients through AOTAutograd, min-cut's partition with the
    saved values ``recompute(saved names)`` picks recomputed; ``seen`` gets both
    partitions."""

    def partition(joint, joint_inputs, *, num_fwd_outputs, **kwargs):
        fw, bw = min_cut_rematerialization_partition(joint, joint_inputs, num_fwd_outputs=num_fwd_outputs,
                                                     **kwargs)
        saved = {n.name for n in saved_values(fw, num_fwd_outputs)}
        chains = {name: _chain(joint, name, saved) for name in recompute(saved)}
        seen.update(fw=fw, bw=bw, joint=joint, n=num_fwd_outputs)
        if chains:
            fw, bw = recompute_saved(joint, fw, bw, num_fwd_outputs, chains)
        seen.update(new_fw=fw, new_bw=bw, chains=chains)
        return fw, bw

    compiled = aot_function(fn, fw_compiler=_identity, bw_compiler=_identity,
                            partition_fn=partition)
    inputs = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    out = compiled(*inputs)
    out.sum().backward()
    return out, [a.grad for a in inputs if a.requires_grad]


def _mlp(x, w, b, v):
    h = torch.nn.functional.linear(x, w, b)
    return torch.nn.functional.linear(torch.nn.functional.gelu(h) * h.sin(), v)


def _args():
    torch.manual_seed(0)
    return [torch.randn(8, 16, requires_grad=True), torch.randn(32, 16, requires_grad=True),
            torch.randn(32, requires_grad=True), torch.randn(4, 32, requires_grad=True)]


def _saved(fw, n):
    return [a.name for a in saved_values(fw, n) if isinstance(a.meta.get("val"), torch.Tensor)]


def _received(bw):
    return [p.name for p in bw.graph.find_nodes(op="placeholder") if not p.name.startswith("tangents")]


def test_every_saved_activation_recomputed_gives_bitwise_equal_gradients():
    """Every saved activation recomputed (chains that share the linear and read a bias
    backward did not receive): output and gradients bitwise equal to the partition that
    saves them, run by AOTAutograd."""
    args = _args()
    base, plain = {}, {}
    expected = _run(_mlp, args, lambda saved: [], base)
    activations = lambda saved: [s for s in saved if not s.startswith("primals")]  # noqa: E731
    got = _run(_mlp, args, activations, plain)
    assert plain["chains"]  # something was recomputed
    assert torch.equal(expected[0], got[0])
    assert all(torch.equal(a, b) for a, b in zip(expected[1], got[1]))
    fw_saved = _saved(plain["new_fw"], plain["n"])
    assert not set(plain["chains"]) & set(fw_saved)
    assert fw_saved == [p for p in _received(plain["new_bw"]) if p in fw_saved]  # paired in order
    assert "primals_3" in fw_saved  # the bias, which backward did not receive before
    assert "primals_3" not in _saved(plain["fw"], plain["n"])
    plain["new_fw"].graph.lint()
    plain["new_bw"].graph.lint()
    # What min-cut already recomputed in backward, now reading a recomputed value, is
    # not computed twice.
    ops = [(n.target, tuple(map(str, n.args))) for n in plain["new_bw"].graph.nodes if n.op == "call_function"]
    assert len(ops) == len(set(ops))
    # The input partition is left as it was.
    assert set(plain["chains"]) <= set(_saved(plain["fw"], plain["n"]))


def test_shared_ops_run_once_before_the_first_reader():
    """The linear's output and a product of it both recomputed (the product's chain
    reads the linear's recomputation): backward runs the linear once more than it did,
    before the first op that reads it."""
    seen = {}
    _run(_mlp, _args(), lambda saved: [s for s in saved if not s.startswith("primals")], seen)
    addmm = torch.ops.aten.addmm.default
    count = lambda gm: sum(n.target is addmm for n in gm.graph.nodes)  # noqa: E731
    assert count(seen["new_bw"]) == count(seen["bw"]) + 1
    nodes = list(seen["new_bw"].graph.nodes)
    (linear,) = [n for n in nodes if n.target is addmm]
    first_reader = min(nodes.index(u) for u in linear.users)
    assert nodes.index(linear) < first_reader


def test_saved_for_backward_descriptors_follow_the_outputs():
    """The forward's output descriptors (where torch has them) stay one per output,
    saved-for-backward ones numbered from 0 in order."""
    seen = {}
    _run(_mlp, _args(), lambda saved: [s for s in saved if not s.startswith("primals")], seen)
    (out,) = seen["new_fw"].graph.find_nodes(op="output")
    descs = out.meta.get("desc")
    if descs is None:
        pytest.skip("this torch has no output descriptors")
    assert len(descs) == len(out.args[0])
    saved = descs[seen["n"]:]
    assert [d.idx for d in saved] == list(range(len(saved)))


def test_a_chain_reading_what_backward_cannot_receive_is_refused():
    """A chain cut short, reading a forward op that is neither saved nor a graph input,
    is refused with the value's name; the partition is not changed."""
    seen = {}
    _run(_mlp, _args(), lambda saved: [], seen)
    joint, fw, bw, n = seen["joint"], seen["fw"], seen["bw"], seen["n"]
    saved = set(_saved(fw, n))
    inputs = {p.name for p in joint.graph.find_nodes(op="placeholder")}
    cut_short = [x.name for x in joint.graph.nodes if x.name in saved and x.op == "call_function"
                 and any(a.name not in saved | inputs for a in x.all_input_nodes)]
    assert cut_short
    before = (fw.code, bw.code)
    with pytest.raises(NotRecomputable) as e:
        recompute_saved(joint, fw, bw, n, {cut_short[0]: [cut_short[0]]})
    assert e.value.value == cut_short[0] and "backward does not receive" in str(e.value)
    with pytest.raises(NotRecomputable, match="not a value the forward saves"):
        recompute_saved(joint, fw, bw, n, {"tangents_1": ["tangents_1"]})
    assert (fw.code, bw.code) == before


def _qkv(x, w):
    q, k, v = (x @ w).split(8, dim=-1)
    return (q.transpose(0, 1) @ k).tanh() @ v.transpose(0, 1)


def test_saved_views_of_a_recomputed_projection_are_found():
    """Query, key and value are views of one projection: recomputing the query's chain
    (the projection included), the key and value saved would hold the projection's
    memory, so ``saved_views`` names them, each with its view ops."""
    from offload_compiler.planning.search import _view_reason
    from passes.nodes import view_root
    from passes.recompute_saved import saved_views

    seen = {}
    torch.manual_seed(0)
    _run(_qkv, [torch.randn(16, 4, requires_grad=True), torch.randn(4, 24, requires_grad=True)],
         lambda saved: [], seen)
    joint, fw, n = seen["joint"], seen["fw"], seen["n"]
    saved = set(_saved(fw, n))
    nodes = {x.name: x for x in joint.graph.nodes}
    by_root = {}
    for name in saved:
        by_root.setdefault(view_root(nodes[name]).name, []).append(name)
    views = next(names for root, names in by_root.items() if len(names) >= 2 and root not in saved)
    first, others = sorted(views)[0], sorted(views)[1:]
    found = saved_views(joint, fw, n, {first: _chain(joint, first, saved)})
    assert sorted(found) == others
    for name in others:
        assert found[name][0] == name and all(nodes[c].op == "call_function" for c in found[name])
        # the planner's reason names the value viewed, the root the chain recomputes
        root = view_root(nodes[name]).name
        assert f"a view of {root}, which is recomputed" in _view_reason(nodes, found[name])
    assert saved_views(joint, fw, n, {}) == {}
