"""Dynamic sizes: which sizes a graph with symbolic sizes is planned for.

Dynamo marks a dimension dynamic on the second distinct size it sees and compiles the
graph once, with that size as every symbol's hint; the graph then serves every later
size. A plan's decisions are by node name and hold at any size, but which decisions it
takes depends on the sizes it is made for: planned at a short sequence, a model may
offload nothing it needs to offload at a long one. So a graph whose sizes are symbolic
is planned at the sizes of its calls, not only at its hints:

- the first plan is made at the sizes of the first call (Dynamo's hints);
- a call with a size more than :data:`REPLAN_FACTOR` times the planned value of its
  symbol compiles the same graph again, planned at the largest value of each symbol seen
  so far (:func:`passes.nodes.sizes_at`: the planner reads those values instead of the
  hints; the graph and its guards are unchanged);
- a call runs the plan made for the smallest sizes at or above its own, else the one
  made for the largest sizes;
- at most :data:`MAX_PLANS` plans per graph; past that, the plan for the largest sizes
  serves every call and the log says so once.

:func:`choose_plan` is that rule on plain dicts; :class:`PlanPerSize` is the callable
the backend returns for such a graph. A graph with no symbolic size, or whose plan
cannot depend on sizes (no backward, ``policy="none"``), is compiled as before, with no
wrapper.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Mapping, Sequence

import sympy
import torch
import torch._guards
import torch.fx as fx
from torch._inductor.custom_graph_pass import CustomPartitionerFn

from passes.nodes import sizes_at

from ..reporting.records import sizes_text

log = logging.getLogger(__name__)

#: A call re-plans when a symbol's value is more than this many times its planned value.
REPLAN_FACTOR = 1.5

#: Plans (inner compiles) per graph at most.
MAX_PLANS = 3


@dataclass(frozen=True)
class SizeSite:
    """Where a size symbol's value is read from a call's arguments."""

    symbol: sympy.Symbol
    arg: int
    """Position among the graph's inputs."""
    kind: Literal["int", "size", "stride"]
    """An int input (Dynamo passes symbolic sizes as such), or a tensor's size or stride."""
    dim: int
    hint: int
    """The value the graph was traced with."""
    source: str
    """Where the user's code has it, e.g. ``L['idx'].size()[1]``."""
    shape_env: Any = field(default=None, compare=False, repr=False)
    """Dynamo's ``ShapeEnv`` the symbol belongs to."""

    @property
    def name(self) -> str:
        return str(self.symbol)

    def read(self, args: Sequence[Any]) -> int:
        x = args[self.arg]
        if self.kind == "int":
            return int(x)
        return int(x.shape[self.dim] if self.kind == "size" else x.stride(self.dim))


def fake_inputs(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> list[Any] | None:
    """The graph's inputs as Dynamo traced them: fake tensors with symbolic sizes and
    ``SymInt`` sizes (Dynamo hands a backend the real tensors of the call that compiled
    the graph; compiling again from those, outside Dynamo, would specialize every size).
    ``None`` if a tensor input has no fake value recorded."""
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    if len(placeholders) != len(example_inputs):
        return None
    fakes = []
    for node, x in zip(placeholders, example_inputs):
        fake = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(x, torch.Tensor) and not isinstance(fake, torch.Tensor):
            return None
        fakes.append(fake if isinstance(x, torch.Tensor) else x)
    return fakes


def size_sites(example_inputs: Sequence[Any]) -> tuple[SizeSite, ...]:
    """One site per size symbol of the graph's inputs (the first place it appears): int
    inputs and tensor sizes and strides that are a symbol. Empty for a static graph."""
    sites: dict[sympy.Symbol, SizeSite] = {}

    def add(value: object, arg: int, kind: str, dim: int) -> None:
        if not isinstance(value, torch.SymInt):
            return
        expr, hint = value.node.expr, value.node.hint
        if isinstance(expr, sympy.Symbol) and hint is not None and expr not in sites:
            sites[expr] = SizeSite(expr, arg, kind, dim, int(hint),
                                   _source(value, expr, f"input {arg} {kind} {dim}"),
                                   value.node.shape_env)

    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.SymInt):
            add(x, i, "int", 0)
        elif isinstance(x, torch.Tensor):
            for d, s in enumerate(x.shape):
                add(s, i, "size", d)
            for d, s in enumerate(x.stride()):
                add(s, i, "stride", d)
    return tuple(sites.values())


def _source(value: torch.SymInt, symbol: sympy.Symbol, fallback: str) -> str:
    sources = getattr(value.node.shape_env, "var_to_sources", {}).get(symbol) or []
    for src in sources:
        name = getattr(src, "name", None)
        name = name() if callable(name) else name  # a method before torch 2.12
        if name:
            return str(name)
    return fallback


def sites_to_plan_for(example_inputs: Sequence[Any], policy: str) -> tuple[SizeSite, ...]:
    """The size sites of a graph whose plan depends on its sizes: symbolic sizes
    (``example_inputs`` as :func:`fake_inputs` gives them), a backward (grad enabled and
    an input requiring grad, as AOTAutograd decides) and a policy that moves something.
    Empty otherwise: the graph compiles as before."""
    if policy == "none" or not torch.is_grad_enabled():
        return ()
    if not any(isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs):
        return ()
    return size_sites(example_inputs)


@dataclass(frozen=True)
class Choice:
    """Which plan serves a call."""

    index: int
    """The plan to run; ``-1``: a new one, made for ``sizes``."""
    sizes: Mapping[str, int] | None = None
    """The sizes of the new plan."""
    capped: bool = False
    """A new plan was due, but the graph has its plans already."""


def choose_plan(planned: Sequence[Mapping[str, int]], seen: Mapping[str, int],
                largest_seen: Mapping[str, int], *, factor: float = REPLAN_FACTOR,
                max_plans: int = MAX_PLANS) -> Choice:
    """The plan for a call of sizes ``seen`` (symbol name to value), given the sizes the
    graph's plans were made for (``planned``, in the order made; each was made for the
    largest sizes seen by then, so the last is the largest) and the largest value of
    each symbol seen so far, this call included (``largest_seen``):

    - the plan for the smallest sizes at or above ``seen`` in every symbol, if any;
    - else the last plan, if no symbol is more than ``factor`` times its planned value;
    - else a new plan for ``largest_seen``, if fewer than ``max_plans`` were made;
    - else the last plan, ``capped``.
    """
    covering = [i for i, p in enumerate(planned) if all(v <= p[s] for s, v in seen.items())]
    if covering:
        return Choice(min(covering, key=lambda i: sum(planned[i].values())))
    last = len(planned) - 1
    if all(v <= factor * planned[last][s] for s, v in seen.items()):
        return Choice(last)
    if len(planned) < max_plans:
        return Choice(-1, dict(largest_seen))
    return Choice(last, capped=True)


class SizedPartitioner(CustomPartitionerFn):
    """The offload partitioner, planning at given values of the size symbols
    (:func:`passes.nodes.sizes_at`). Its ``uuid`` names them, so a cached graph planned
    at other sizes is not taken for this one."""

    def __init__(self, inner: CustomPartitionerFn, values: Mapping[sympy.Symbol, int]) -> None:
        self.inner = inner
        self.values = dict(values)

    def __call__(self, gm: fx.GraphModule, joint_inputs: Sequence[object], **kwargs: Any):
        with sizes_at(self.values):
            return self.inner(gm, joint_inputs, **kwargs)

    def uuid(self) -> str:
        return f"{self.inner.uuid()}-at-{sizes_text({str(s): v for s, v in self.values.items()})}"


def at_sizes(partitioner: CustomPartitionerFn,
             values: Mapping[sympy.Symbol, int] | None) -> CustomPartitionerFn:
    """``partitioner`` planning at ``values``; itself for ``None`` (a static graph)."""
    return partitioner if values is None else SizedPartitioner(partitioner, values)


def graph_copy(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy of Dynamo's graph to compile again: the inner compiler transforms the
    graph it is given. Keeps what AOTAutograd reads of Dynamo's graphs (``meta``, the
    parameters' sources, each placeholder's source)."""
    new = fx.GraphModule(gm, copy.deepcopy(gm.graph))
    new.meta = dict(gm.meta)
    for attr in ("_param_name_to_source", "_source_to_user_stacks"):
        if hasattr(gm, attr):
            setattr(new, attr, getattr(gm, attr))
    for old, made in zip(gm.graph.find_nodes(op="placeholder"), new.graph.find_nodes(op="placeholder")):
        if hasattr(old, "_dynamo_source"):
            made._dynamo_source = old._dynamo_source
    return new


class PlanPerSize:
    """What the backend returns for a graph whose plan depends on its sizes: runs each
    call with the plan :func:`choose_plan` picks, compiling a new plan when it says so.

    ``compile_at(values)`` compiles the graph planned at ``values`` (symbol to int) and
    returns the inner compiler's callable. The first plan is compiled here, at the
    graph's hints."""

    @classmethod
    def for_graph(cls, gm: fx.GraphModule, example_inputs: Sequence[Any], policy: str,
                  compile_graph: Callable[[fx.GraphModule, list[Any], Mapping[sympy.Symbol, int]],
                                          Callable[..., Any]]) -> "PlanPerSize | None":
        """For a graph Dynamo hands the backend: ``None`` if its plan cannot depend on
        sizes (see :func:`sites_to_plan_for`), else the plans' dispatcher, its first plan
        compiled. ``compile_graph(graph, inputs, values)`` is the backend's compile.

        The first plan compiles ``gm`` and ``example_inputs`` as a static graph would
        be. A later one is compiled during a call, outside Dynamo: from a copy of the
        graph as it was before the first compile, with its fake inputs (the real tensors
        of the first call would specialize every size), in Dynamo's tracing context of
        this compile."""
        fakes = fake_inputs(gm, example_inputs)
        sites = sites_to_plan_for(fakes, policy) if fakes is not None else ()
        if not sites:
            return None
        pristine = graph_copy(gm)
        context = torch._guards.TracingContext.try_get()
        first: list[Any] | None = [gm, list(example_inputs)]

        def compile_at(values: Mapping[sympy.Symbol, int]) -> Callable[..., Any]:
            nonlocal first
            if first is not None:
                graph, inputs = first
                first = None  # hold no real tensor past the first compile
                return compile_graph(graph, inputs, values)
            scope = torch._guards.tracing(context) if context is not None else contextlib.nullcontext()
            with scope:
                return compile_graph(graph_copy(pristine), list(fakes), values)

        return cls(sites, compile_at)

    def __init__(self, sites: Sequence[SizeSite],
                 compile_at: Callable[[Mapping[sympy.Symbol, int]], Callable[..., Any]], *,
                 factor: float = REPLAN_FACTOR, max_plans: int = MAX_PLANS) -> None:
        self.sites = tuple(sites)
        self.factor = factor
        self.max_plans = max_plans
        self.planned: list[dict[str, int]] = []
        """The sizes each plan was made for, in the order made."""
        self._compile_at = compile_at
        self._compiled: list[Callable[..., Any]] = []
        self._largest = {s.name: s.hint for s in self.sites}
        self._capped_said = False
        self._add(dict(self._largest), "the sizes of the first call")

    def __call__(self, *args: Any) -> Any:
        seen = {s.name: s.read(args) for s in self.sites}
        for name, value in seen.items():
            self._largest[name] = max(self._largest[name], value)
        choice = choose_plan(self.planned, seen, self._largest,
                             factor=self.factor, max_plans=self.max_plans)
        index = choice.index
        if choice.sizes is not None:
            index = self._replan(dict(choice.sizes), seen)
        elif choice.capped:
            self._say_capped(seen)
        return self._compiled[index](*args)

    def _replan(self, sizes: dict[str, int], seen: Mapping[str, int]) -> int:
        last = self.planned[-1]
        far = {s: v for s, v in seen.items() if v > self.factor * last[s]}
        log.info("offload: %s: more than %gx the size planned for (%s); planning again",
                 self._describe(far), self.factor, sizes_text({s: last[s] for s in far}))
        shape_env = self.sites[0].shape_env
        guards = len(shape_env.guards) if shape_env is not None else 0
        index = self._add(sizes, "the largest seen")
        if shape_env is not None and len(shape_env.guards) > guards:
            # The new compile assumed something about the sizes that Dynamo's guards,
            # installed with the first compile, do not check: do not run it.
            self.planned.pop()
            self._compiled.pop()
            self.max_plans = len(self.planned)
            log.warning("offload: the plan for %s added guards on the sizes that Dynamo does "
                        "not check; it is dropped and the plan for %s serves every size",
                        sizes_text(sizes), sizes_text(self.planned[-1]))
            return len(self.planned) - 1
        return index

    def _add(self, sizes: dict[str, int], why: str) -> int:
        symbols = {s.name: s.symbol for s in self.sites}
        self._compiled.append(self._compile_at({symbols[n]: v for n, v in sizes.items()}))
        self.planned.append(sizes)
        log.info("offload: graph with dynamic sizes planned for %s (%s), plan %d of at most %d",
                 self._describe(sizes), why, len(self.planned), self.max_plans)
        return len(self.planned) - 1

    def _say_capped(self, seen: Mapping[str, int]) -> None:
        if self._capped_said:
            return
        self._capped_said = True
        last = self.planned[-1]
        far = {s: v for s, v in seen.items() if v > self.factor * last[s]}
        log.warning("offload: %s: more than %gx the size planned for, but this graph has its "
                    "%d plans already; the plan for %s serves it, and activation memory may "
                    "exceed what that plan expected (said once per graph)",
                    self._describe(far), self.factor, len(self.planned), sizes_text(last))

    def _describe(self, sizes: Mapping[str, int]) -> str:
        source = {s.name: s.source for s in self.sites}
        return ", ".join(f"{name}={value} ({source[name]})" for name, value in sizes.items())
