"""Reading what the backend did: annotated graph text.

``graph_text(gm)`` is the graph as readable Python (shapes, strides, devices) with a
comment above every transfer node giving its stream, event, bytes and paired node.
"""

from __future__ import annotations

import inspect as _inspect

import torch.fx as fx

from passes import META_KEY, transfer_meta


def graph_text(gm: fx.GraphModule) -> str:
    """Readable code of ``gm``; each transfer node is preceded by ``# offload: ...``."""
    kwargs = dict(print_output=False, include_stride=True, include_device=True)
    if "additional_meta" in _inspect.signature(gm.print_readable).parameters:
        return gm.print_readable(additional_meta=[META_KEY], **kwargs)
    # Older torch: add the comments ourselves, matching lines by the node's name.
    text = gm.print_readable(**kwargs)
    notes = {n.name: str(transfer_meta(n)) for n in gm.graph.nodes if transfer_meta(n)}
    out = []
    for line in text.splitlines():
        name = line.strip().split(":")[0].split("=")[0].strip()
        if name in notes:
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}# {META_KEY}: {notes[name]}")
        out.append(line)
    return "\n".join(out)
