"""Session 45 probe (issue 18), CPU: gradient parity on Hugging Face architectures the
tests did not cover (tiny random configurations, CPU loopback, two SGD steps, dropout
where the configuration has it), as ``tests/test_hf_models.py`` runs them: with the eager
inner compiler at ``"auto"`` and 0.1, bitwise against the same compile with
``policy="none"``; with Inductor at 0.1, within ``torch.testing.assert_close``'s default
tolerance.

    python benchmarks/results/2026-11-29_s45_hf_probe.py MODEL eager|inductor
"""
import copy, sys, warnings, traceback, torch, transformers
import offload_compiler
V = 128
OPTIONS = {"devices": ("cpu",), "min_offload_bytes": 0, "replan": False, "plan_cache": False}

def text(g=None):
    ids = torch.randint(V, (2, 16), generator=g)
    mask = torch.ones(2, 16, dtype=torch.long); mask[1, 11:] = 0
    return ids, mask

MODELS = {
    "bert": lambda: transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)),
    "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=V, n_embd=64, n_layer=2, n_head=4, n_positions=64)),
    "bart": lambda: transformers.BartForConditionalGeneration(transformers.BartConfig(
        vocab_size=V, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
        dropout=0.1)),
    "qwen2": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2)),
    "distilbert": lambda: transformers.DistilBertForSequenceClassification(transformers.DistilBertConfig(
        vocab_size=V, dim=64, n_layers=2, n_heads=4, hidden_dim=128, num_labels=3)),
    "convnext": lambda: transformers.ConvNextForImageClassification(transformers.ConvNextConfig(
        num_channels=3, num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], num_labels=10, image_size=32,
        drop_path_rate=0.1)),
    "swin": lambda: transformers.SwinForImageClassification(transformers.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4,
        num_labels=10)),
    "phi": lambda: transformers.PhiForCausalLM(transformers.PhiConfig(
        vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        resid_pdrop=0.1)),
}

def inputs(name, step):
    g = torch.Generator().manual_seed(100 + step)
    if name in ("convnext", "swin"):
        return {"pixel_values": torch.randn(2, 3, 32, 32, generator=g), "labels": torch.randint(10, (2,), generator=g)}
    ids, mask = text(g=g)
    if name == "bart":
        return {"input_ids": ids, "attention_mask": mask, "labels": torch.randint(V, (2, 8), generator=g)}
    if name == "distilbert":
        return {"input_ids": ids, "attention_mask": mask, "labels": torch.randint(3, (2,), generator=g)}
    if name == "bert":
        types = (torch.arange(16) > 8).long().expand(2, 16)
        return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "labels": ids}
    return {"input_ids": ids, "attention_mask": mask, "labels": ids}

def train(base, name, inputs=inputs, **options):
    torch._dynamo.reset()
    model = copy.deepcopy(base).train()
    b = offload_compiler.make_backend(**OPTIONS, **options)
    c = torch.compile(model, backend=b)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    out = []
    for s in range(2):
        torch.manual_seed(7 + s)
        loss = c(**inputs(name, s)).loss
        loss.backward()
        grads = [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
        out.append((loss.detach().clone(), grads))
        opt.step(); opt.zero_grad(set_to_none=True)
    return out, b.plans

def probe(models, inputs, name, inner):
    """Run one architecture of ``models`` (its inputs from ``inputs``) and print its verdicts."""
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        base = models[name]()
    ref, _ = train(base, name, inputs, policy="none", inner_compiler=inner)
    for budget in (["auto", 0.1] if inner == "eager" else [0.1]):
        try:
            got, plans = train(base, name, inputs, inner_compiler=inner, memory_budget=budget)
        except Exception:
            print(name, inner, budget, "CRASH"); traceback.print_exc(); continue
        off = sum(len(p.offloaded) for p in plans); rec = sum(len(p.recomputed) for p in plans)
        bad = []
        for s, ((l0, g0), (l1, g1)) in enumerate(zip(ref, got)):
            if len(g0) != len(g1): bad.append(f"step {s}: {len(g1)} grads vs {len(g0)}"); continue
            same = torch.equal(l0, l1) and all(torch.equal(a, b) for a, b in zip(g0, g1))
            if inner == "eager" and not same:
                diff = max((a - b).abs().max().item() for a, b in zip(g0, g1))
                bad.append(f"step {s}: loss {l0.item()} vs {l1.item()}, max grad diff {diff}")
            if inner != "eager":
                try:
                    torch.testing.assert_close((l1, g1), (l0, g0))
                except AssertionError as e:
                    bad.append(f"step {s}: {str(e)[:200]}")
        verdict = "OK" if not bad else "MISMATCH " + "; ".join(bad)
        print(name, inner, budget, "graphs", len(plans), "offloaded", off, "recomputed", rec, verdict)


if __name__ == "__main__":
    probe(MODELS, inputs, sys.argv[1], sys.argv[2])
