"""Inductor's ``mode=`` as the ``offload`` backend takes it.

``mode=`` is taken as Inductor takes it (:data:`VALID_MODES`; the mode's Inductor
options, ``torch._inductor.list_mode_options(mode)``, are patched into the compile).
``torch.compile`` refuses ``mode`` and ``options`` together, so ``options={"mode": ...}``
and ``make_backend(..., mode=...)`` say it too.
"""

from __future__ import annotations

from typing import Any, Mapping

from .config import OffloadConfig

#: ``mode=`` values accepted, as Inductor accepts them (``None`` is ``"default"``).
VALID_MODES = (None, "default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")


def mode_options(mode: str | None) -> dict[str, Any]:
    """Inductor's config patches for ``mode`` (``torch._inductor.list_mode_options``);
    a ``ValueError`` naming the valid modes for any other."""
    if mode not in VALID_MODES:
        raise ValueError(f"mode={mode!r} is not supported by the offload backend; valid modes are "
                         f"{VALID_MODES}")
    if mode in (None, "default"):
        return {}
    from torch._inductor import list_mode_options

    return dict(list_mode_options(mode))


def uses_cudagraphs(mode: str | None) -> bool:
    """Whether ``mode`` turns on Inductor's CUDA graphs."""
    return bool(mode_options(mode).get("triton.cudagraphs"))


def check_mode(mode: str | None, config: OffloadConfig) -> None:
    """A ``ValueError`` where ``mode``'s CUDA graphs cannot run with ``config``."""
    if uses_cudagraphs(mode) and config.inner_compiler == "eager":
        raise ValueError(
            f"mode={mode!r} runs the graphs under CUDA graphs, which Inductor records; with "
            "inner_compiler='eager' nothing records them. Use inner_compiler='inductor' with this "
            f"mode, or a mode without CUDA graphs: {(None, 'default', 'max-autotune-no-cudagraphs')}")
    if uses_cudagraphs(mode) and config.per_block and config.policy != "none":
        raise ValueError(
            f"per_block=True links the blocks' graphs through state kept outside any graph "
            f"(cross-graph prefetch), which a CUDA graph recording cannot replay; with mode={mode!r} "
            "leave per_block at False, or use a mode without CUDA graphs: "
            f"{(None, 'default', 'max-autotune-no-cudagraphs')}")


def split_mode(options: Mapping[str, Any] | None, mode: str | None) -> tuple[Mapping[str, Any] | None, str | None]:
    """``options`` without a ``"mode"`` key, and the mode given there or as ``mode``."""
    if not options or "mode" not in options:
        return options, mode
    rest = {k: v for k, v in options.items() if k != "mode"}
    if mode is not None and options["mode"] != mode:
        raise ValueError(f"mode={mode!r} and options['mode']={options['mode']!r} disagree; give one")
    return rest, options["mode"]
