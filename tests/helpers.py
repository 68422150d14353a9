"""Shared test helpers: train a few steps and collect gradients."""

import copy

import torch

import offload_compiler
from offload_compiler.replanning import TIMED_CALLS
from offload_compiler.runtime import measure
from passes import transfer_nodes

LOOPBACK = {"devices": ("cpu",), "min_offload_bytes": 0, "policy": "all"}
#: The calls a graph called once per step is measured on, in order, with what each
#: measures: memory at its second call, time at its third and every other call after
#: (each timing is read a step later), ``replanning.TIMED_CALLS`` times.
MEASURED = [(2, "memory")] + [(3 + 2 * i, "time") for i in range(TIMED_CALLS)]
#: The call (and step) that reads such a graph's measurement: the one after its last timed call.
READ_AT = MEASURED[-1][0] + 1
#: Steps that measure a plan and the plan made from its measurement (the re-plan's first call is ``READ_AT``).
BOTH_READ = 2 * READ_AT - 1
#: Where the median timed call was paced by the host: the call timed with the host ahead
#: (``"kernels"``), a step after ``READ_AT``, and the call that reads it (and may re-plan).
KERNELS_AT = READ_AT + 1
KERNELS_READ_AT = KERNELS_AT + 1


def train(model, inputs, backend, *, steps=3, seed=0, lr=1e-2, trained=None, after_step=None):
    """Run ``steps`` SGD steps of a deep copy of ``model`` compiled with ``backend``.

    Returns (losses, grads) where grads[i] is the list of gradients at step i (of the
    parameters that train). ``trained``: a list the trained copy is appended to;
    ``after_step``: called with each step's index once its backward has run.
    """
    torch._dynamo.reset()
    model = copy.deepcopy(model)
    compiled = torch.compile(model, backend=backend)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=lr)
    losses, grads = [], []
    for step in range(steps):
        torch.manual_seed(seed + step)
        args = inputs(step) if callable(inputs) else inputs
        loss = compiled(*args)
        loss.backward()
        if after_step is not None:
            after_step(step)
        losses.append(loss.detach().clone())
        grads.append([p.grad.detach().clone() for p in params])
        opt.step()
        opt.zero_grad(set_to_none=True)
    if trained is not None:
        trained.append(model)
    return losses, grads


def backend(**options):
    return offload_compiler.make_backend(**options)


def loopback(**options):
    """Loopback options (CPU tensors offloaded), overridden by ``options``."""
    return {**LOOPBACK, **options}


def as_dispatched(code):
    """Inductor's generated ``code`` with each direct call of a transfer op
    (``torch.ops.offload.d2h.default._offload_direct(``, ``lowering.call_directly``)
    written as the op's own call (``torch.ops.offload.d2h.default(``)."""
    from offload_compiler.runtime import ops

    return code.replace(f".{ops.DIRECT}(", "(")


def assert_bitwise(a, b):
    la, ga = a
    lb, gb = b
    for x, y in zip(la, lb):
        assert torch.equal(x, y), (x, y)
    for step, (xs, ys) in enumerate(zip(ga, gb)):
        for i, (x, y) in enumerate(zip(xs, ys)):
            assert torch.equal(x, y), f"step {step} grad {i} differs: {(x - y).abs().max()}"


def assert_close(a, b, **tol):
    la, ga = a
    lb, gb = b
    for x, y in zip(la, lb):
        torch.testing.assert_close(x, y, **tol)
    for xs, ys in zip(ga, gb):
        for x, y in zip(xs, ys):
            torch.testing.assert_close(x, y, **tol)


def counts(gm):
    return {k: len(transfer_nodes(gm.graph, k)) for k in ("d2h", "release", "h2d", "wait")}


class FakeRecorder:
    def __init__(self, call, what, make):
        self.call, self.what, self.make, self.phases = call, what, make, []

    def probe(self, phase):
        self.phases.append(phase)

    def complete(self):
        return self.phases == list(measure.PHASES)

    def abort(self):
        self.phases.append("aborted")

    def result(self):
        return self.make(self.call) if self.complete() else None


class FakeSource:
    """Reports ``make(call)`` for every measured call; records what it was asked. A call of
    nothing moved timed beside a re-plan (``"beside"``) reports ``beside(call)``; without
    ``beside`` it cannot be measured (the earlier measurement of nothing moved stands)."""

    def __init__(self, make, beside=None):
        self.make, self.beside, self.asked, self.holds = make, beside, [], {}

    def recorder(self, device, call, what, intervals=0, *, hold_ms=(0.0, 0.0)):
        if what == "beside":
            if self.beside is None:
                return None
            self.asked.append((call, what))
            return FakeRecorder(call, what, self.beside)
        self.asked.append((call, what))
        if what == "kernels":
            self.holds[call] = hold_ms
        return FakeRecorder(call, what, self.make)

    def measures(self, device):
        return True


def as_predicted(plans, *, peak_extra=0, time_scale=1.0, held=0):
    """A measurement of the latest plan: its predictions, the peak ``peak_extra`` above
    the modelled one (the prediction less the bytes a correction already added) and
    compute ``time_scale`` times slower."""
    def make(call):
        p = plans[-1].predicted
        modelled = p.step_peak_bytes - (plans[-1].corrections or {}).get("unmodelled_bytes", 0)
        return measure.Measured(call=call, fw_ms=p.fw_compute_ms * time_scale,
                                bw_ms=p.bw_compute_ms * time_scale + p.stall_ms, stall_ms=p.stall_ms,
                                held_before_bytes=held,
                                step_peak_bytes=modelled + peak_extra, peak_phase="backward")
    return make
