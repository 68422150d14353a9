"""Session 47 probe (issue 18), CPU: the Hugging Face architectures of the session 45 and
46 probes with the user's own activation checkpointing on
(``model.gradient_checkpointing_enable()``, non-reentrant unless ``reentrant``), run as
those probes run them: with the eager inner compiler at ``"auto"`` and 0.1, bitwise
against the same compile with ``policy="none"``; with Inductor at 0.1, within
``torch.testing.assert_close``'s default tolerance.

    python benchmarks/results/2026-12-07_s47_checkpointing_probe.py MODEL eager|inductor [reentrant]
"""
import importlib.util, sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, HERE / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


s45 = _load("s45_probe", "2026-11-29_s45_hf_probe.py")
s46 = _load("s46_probe", "2026-12-07_s46_hf_probe.py")

if __name__ == "__main__":
    name, inner = sys.argv[1], sys.argv[2]
    reentrant = len(sys.argv) > 3 and sys.argv[3] == "reentrant"
    source = s45 if name in s45.MODELS else s46

    def make():
        model = source.MODELS[name]()
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
        return model

    s45.probe({name: make}, source.inputs, name, inner)
