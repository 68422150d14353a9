"""Where an FX node came from, in the user's terms: the module that ran it
(:func:`module_path`, e.g. ``blocks.0.attn.qkv``) and the line of the user's source
(:func:`source_line`, e.g. ``gpt.py:85 in forward``), from the metadata Dynamo records.
Reports, errors and logs name values this way."""

from __future__ import annotations

import os
import re

import torch.fx as fx

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_ROOT = re.compile(r"^L\[['\"]([^'\"]+)['\"]\]\.?")


def module_path(node: fx.Node) -> str:
    """The dotted path of the innermost module that ran ``node`` (``"blocks.0.attn.qkv"``),
    from Dynamo's ``nn_module_stack`` (for a backward node, AOTAutograd's copy of its
    forward op's, ``fwd_nn_module_stack``); ``""`` for the root module or without that record."""
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    if not isinstance(path, str):
        return ""
    path = re.sub(r"\._modules\[['\"]([^'\"]+)['\"]\]", r".\1", path)  # older Dynamo spelling
    path = _ROOT.sub(lambda m: "" if m.group(1) == "self" else m.group(1) + ".", path)
    return path.strip(".")


def source_line(node: fx.Node) -> str:
    """``"file.py:LINE in FUNCTION"`` of the user's source that made ``node`` (the
    innermost frame Dynamo recorded), or ``""`` when it recorded none."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    if not frames:
        return ""
    path, line, func = frames[-1]
    return f"{os.path.basename(path)}:{line} in {func}"


def value_label(node: fx.Node) -> str:
    """``node``'s value in the user's terms, for messages: its module path (its node name
    without one) and, where recorded, its source line (``"blocks.0.mlp at gpt.py:85 in forward"``)."""
    where = source_line(node)
    return f"{module_path(node) or node.name}" + (f" at {where}" if where else "")


def graph_start(gm: fx.GraphModule) -> str:
    """Where ``gm`` starts in the user's program: its first node's source line (its node
    count where none was recorded), for messages."""
    return next((w for w in map(source_line, gm.graph.nodes) if w), f"{len(gm.graph.nodes)} nodes")
