"""Name each saved value and the backward placeholder that receives it alike.

The passes and the planner pair what the forward returns for backward with backward's
placeholders by name (``passes/README.md``: a backward placeholder is named after the
forward value it receives). Min-cut keeps that true but for one kind of value: where a
random op under the user's ``torch.utils.checkpoint`` is recomputed in backward without
graph-safe RNG (on the CPU), it saves the generator's state, a forward ``getitem``
named in the forward's namespace, and backward receives it as ``rng_state_output_N``.
Unpaired, a graph input a recomputation added was received at backward's first
position and returned at the forward's last: every saved tensor between arrived one
place off (a Hugging Face GPT-2 under ``gradient_checkpointing_enable()``: "Expected
bias to be of same shape as normalized_shape"), and the forward's name could also be a
different node's in the joint graph.

AOTAutograd hands the saved values over by position: the forward returns its outputs,
then the saved tensors (and opaque objects), then the saved symbols; backward receives
the symbols first, then the others in the same order, then the tangents and what comes
after them. Each pair whose names differ takes a name neither graph nor the joint graph
uses: the placeholder's where it is free, else a new one.
"""

from __future__ import annotations

import torch
import torch.fx as fx

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)


def name_saved_values(joint_gm: fx.GraphModule, fw_gm: fx.GraphModule, bw_gm: fx.GraphModule,
                      num_fwd_outputs: int) -> int:
    """Rename, in place, the saved values of ``fw_gm`` and backward's placeholders that
    receive them where the two names differ; returns how many pairs were renamed. Leaves
    both graphs as they are where their saved values and placeholders do not pair up
    (counts differ, or backward has no tangent input)."""
    (out,) = fw_gm.graph.find_nodes(op="output")
    saved = list(out.args[0][num_fwd_outputs:])
    placeholders = bw_gm.graph.find_nodes(op="placeholder")
    tangent = next((i for i, p in enumerate(placeholders) if p.name.startswith("tangents")), None)
    if tangent is None or not all(isinstance(a, fx.Node) for a in saved):
        return 0
    received = placeholders[:tangent]

    def symbolic(n: fx.Node) -> bool:
        return isinstance(n.meta.get("val"), _SYMBOLIC)

    in_order = sorted(saved, key=lambda a: not symbolic(a))  # backward's order: the symbols first
    if len(in_order) != len(received) or [symbolic(a) for a in in_order] != [symbolic(p) for p in received]:
        return 0
    joint_or_fw = {n.name for g in (joint_gm, fw_gm) for n in g.graph.nodes}
    bw_names = {n.name for n in bw_gm.graph.nodes}
    renamed = 0
    for value, placeholder in zip(in_order, received):
        if value.name == placeholder.name:
            continue
        # The placeholder's name where neither the joint graph nor the forward uses it, else a new one.
        name, k = placeholder.name, 0
        while name in joint_or_fw or (name != placeholder.name and name in bw_names):
            k += 1
            name = f"{placeholder.name}_saved_{k}"
        joint_or_fw.add(name)
        bw_names.add(name)
        value._rename(name)
        placeholder._rename(name)
        placeholder.target = name
        if value.name != name or placeholder.name != name:  # the namespace gave another name
            raise AssertionError(f"renaming saved value {value.name} and placeholder {placeholder.name} to {name}")
        renamed += 1
    if renamed:
        fw_gm.recompile()
        bw_gm.recompile()
    return renamed
