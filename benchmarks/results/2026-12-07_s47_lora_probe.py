"""Session 47 probe (issue 18), CPU: Hugging Face models under LoRA (``peft``: the base
weights frozen, rank-4 adapters with dropout on the attention projections), optionally
with ``gradient_checkpointing_enable()``, run as the session 45 probe runs them: with the
eager inner compiler at ``"auto"`` and 0.1, bitwise against the same compile with
``policy="none"``; with Inductor at 0.1, within ``torch.testing.assert_close``'s default
tolerance (the gradients of the adapters, the only ones there are).

    python benchmarks/results/2026-12-07_s47_lora_probe.py qwen2|gpt2|mistral|bert|t5 eager|inductor [checkpointing]
"""
import importlib.util, sys
from pathlib import Path

import peft

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("s47_ckpt", HERE / "2026-12-07_s47_checkpointing_probe.py")
ck = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ck)

TARGETS = {"qwen2": ["q_proj", "v_proj"], "gpt2": ["c_attn"], "mistral": ["q_proj", "v_proj"],
           "bert": ["query", "value"], "t5": ["q", "v"]}

if __name__ == "__main__":
    name, inner = sys.argv[1], sys.argv[2]
    checkpointing = len(sys.argv) > 3 and sys.argv[3] == "checkpointing"
    source = ck.s45 if name in ck.s45.MODELS else ck.s46

    def make():
        model = source.MODELS[name]()
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS[name],
                                                          lora_dropout=0.1))

    ck.s45.probe({name: make}, source.inputs, name, inner)
