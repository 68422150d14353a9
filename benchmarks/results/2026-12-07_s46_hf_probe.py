"""Session 46 probe (issue 18), CPU: gradient parity on thirteen more Hugging Face
architectures (T5's relative position buckets, Mistral's and Gemma 2's sliding windows and
soft-capping, Mixtral's routed experts, DeBERTa-v2's disentangled attention, Mamba's scan,
CLIP's two towers and contrastive loss, Whisper's convolutional encoder, ...), tiny random
configurations, as the session 45 probe runs them: with the eager inner compiler at
``"auto"`` and 0.1, bitwise against the same compile with ``policy="none"``; with Inductor
at 0.1, within ``torch.testing.assert_close``'s default tolerance.

    python benchmarks/results/2026-12-07_s46_hf_probe.py MODEL eager|inductor
"""
import importlib.util, sys, torch, transformers
from pathlib import Path
V = 128

def text(g=None):
    ids = torch.randint(V, (2, 16), generator=g)
    mask = torch.ones(2, 16, dtype=torch.long); mask[1, 11:] = 0
    return ids, mask

MODELS = {
    "t5": lambda: transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=V, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
        relative_attention_num_buckets=8, dropout_rate=0.1, decoder_start_token_id=0, pad_token_id=0)),
    "mistral": lambda: transformers.MistralForCausalLM(transformers.MistralConfig(
        vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, sliding_window=8)),
    "gpt_neox": lambda: transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(
        vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        rotary_pct=0.25, hidden_dropout=0.1)),
    "opt": lambda: transformers.OPTForCausalLM(transformers.OPTConfig(
        vocab_size=V, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, word_embed_proj_dim=64, dropout=0.1)),
    "roberta": lambda: transformers.RobertaForMaskedLM(transformers.RobertaConfig(
        vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=64, pad_token_id=1)),
    "deberta_v2": lambda: transformers.DebertaV2ForMaskedLM(transformers.DebertaV2Config(
        vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=64, relative_attention=True, position_buckets=8, pos_att_type=["p2c", "c2p"])),
    "falcon": lambda: transformers.FalconForCausalLM(transformers.FalconConfig(
        vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, new_decoder_architecture=True,
        num_kv_heads=2, alibi=False)),
    "gemma2": lambda: transformers.Gemma2ForCausalLM(transformers.Gemma2Config(
        vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=8, attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0)),
    "mixtral": lambda: transformers.MixtralForCausalLM(transformers.MixtralConfig(
        vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)),
    "vit": lambda: transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, num_labels=10, hidden_dropout_prob=0.1)),
    "clip": lambda: transformers.CLIPModel(transformers.CLIPConfig(
        text_config=dict(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=64),
        vision_config=dict(image_size=32, patch_size=8, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=2, num_attention_heads=4), projection_dim=32)),
    "whisper": lambda: transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(
        vocab_size=V, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
        max_source_positions=16, max_target_positions=32, decoder_start_token_id=1, pad_token_id=0)),
    "mamba": lambda: transformers.MambaForCausalLM(transformers.MambaConfig(
        vocab_size=V, hidden_size=64, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4)),
}

def inputs(name, step):
    g = torch.Generator().manual_seed(100 + step)
    if name == "vit":
        return {"pixel_values": torch.randn(2, 3, 32, 32, generator=g), "labels": torch.randint(10, (2,), generator=g)}
    ids, mask = text(g=g)
    if name == "clip":
        return {"input_ids": ids, "attention_mask": mask, "pixel_values": torch.randn(2, 3, 32, 32, generator=g),
                "return_loss": True}
    if name == "whisper":
        return {"input_features": torch.randn(2, 16, 32, generator=g), "labels": torch.randint(2, V, (2, 8), generator=g)}
    if name == "t5":
        return {"input_ids": ids, "attention_mask": mask, "labels": torch.randint(1, V, (2, 8), generator=g)}
    if name == "mamba":
        return {"input_ids": ids, "labels": ids}
    return {"input_ids": ids, "attention_mask": mask, "labels": ids}

if __name__ == "__main__":
    spec = importlib.util.spec_from_file_location("s45", Path(__file__).with_name("2026-11-29_s45_hf_probe.py"))
    s45 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(s45)
    s45.probe(MODELS, inputs, sys.argv[1], sys.argv[2])
