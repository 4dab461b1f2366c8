"""A tiny seeded Whisper (encoder-decoder, cross-attention) made with transformers, its audio and its oracle.

Test-only (needs transformers, tokenizers, safetensors, numpy: both engine venvs have them). No download:
the tokenizer is a byte-level BPE trained here plus Whisper's special tokens (``<|endoftext|>``,
``<|startoftranscript|>``, the language tokens, ``<|transcribe|>`` ... ``<|notimestamps|>``), in Whisper's order.
The weights are seeded and scaled so that self- and cross-attention are sharp (default-initialised weights
give near-uniform attention, which would hide attention bugs): different audio gives different tokens.

- ``audio(i)``: input i of ``N_INPUTS`` as 16 kHz float32 samples (tones and noise made here; lengths 0.6-7.9 s,
  all different). Whisper's feature extractor pads every input to 30 s: the encoder always has 1,500 positions,
  which is not a multiple of 16, 64 or 128 (pages).
- ``greedy(path, n)``: transformers' **eager** attention in fp32, ``n`` greedy tokens per input after the decoder
  prompt ``DECODER_PROMPT`` (no EOS stop, as the engines' ``ignore_eos``), one input at a time.

    python whisper_model.py make DIR SEED        -> writes the model into DIR
    python whisper_model.py greedy DIR OUT_JSON N -> transformers' greedy token ids per input
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SAMPLE_RATE = 16000
N_INPUTS = 8
DECODER_PROMPT = "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"
D_MODEL, HEADS, LAYERS = 128, 4, 2  # head dim 32
CORPUS = (
    "the quick brown fox jumps over the lazy dog. speech turns into text one token at a time while the "
    "decoder attends to the encoder's view of the sound. "
) * 20


def _specials() -> list[str]:
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    langs = [f"<|{code}|>" for code in LANGUAGES]
    return (
        ["<|endoftext|>", "<|startoftranscript|>"]
        + langs
        + ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"]
    )


def make_tokenizer(out: Path) -> int:
    """Byte-level BPE (300 merges' worth) + Whisper's special tokens; returns the vocabulary size."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=560, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator([CORPUS], trainer=trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in _specials()])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "WhisperTokenizer",
                "bos_token": "<|endoftext|>",
                "eos_token": "<|endoftext|>",
                "unk_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
                "model_max_length": 448,
                "clean_up_tokenization_spaces": False,
                "errors": "replace",
            }
        )
    )
    (out / "special_tokens_map.json").write_text(
        json.dumps(
            {
                "bos_token": "<|endoftext|>",
                "eos_token": "<|endoftext|>",
                "unk_token": "<|endoftext|>",
                "pad_token": "<|endoftext|>",
            }
        )
    )
    return tok.get_vocab_size()


def make(path: str, seed: int = 0) -> str:
    """Write config, tokenizer, feature extractor and seeded weights (safetensors) into ``path``."""
    import torch
    import transformers as tf

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    vocab = make_tokenizer(out)
    tok = tf.AutoTokenizer.from_pretrained(out)
    eot, sot = tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|startoftranscript|>")
    vocab = (vocab + 63) // 64 * 64
    cfg = tf.WhisperConfig(
        vocab_size=vocab,
        num_mel_bins=80,
        d_model=D_MODEL,
        encoder_layers=LAYERS,
        decoder_layers=LAYERS,
        encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS,
        encoder_ffn_dim=2 * D_MODEL,
        decoder_ffn_dim=2 * D_MODEL,
        max_source_positions=1500,
        max_target_positions=448,
        decoder_start_token_id=sot,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
        begin_suppress_tokens=None,
        suppress_tokens=None,
        forced_decoder_ids=None,
        scale_embedding=False,
        tie_word_embeddings=True,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = tf.WhisperForConditionalGeneration(cfg).float().eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() < 2 or "encoder.embed_positions" in name:  # (sinusoidal, fixed)
                continue
            std = p[0].numel() ** -0.5  # fan-in (convolutions: in_channels x kernel)
            if "embed" in name:
                std = 0.25  # tokens and decoder positions, below the layers' outputs: no echo of the last token (tied)
            elif name.endswith(("q_proj.weight", "k_proj.weight")):
                std *= 2.0  # sharp attention: which key a query picks matters
            elif name.endswith(("out_proj.weight", "fc2.weight")):
                std *= 3.0  # the layers' outputs dominate the residual (tied embeddings would echo their input)
            elif "conv" in name:
                std *= 3.0  # the sound, not the encoder's position embeddings, dominates its output
            p.copy_(torch.randn(p.shape, generator=g) * std)
    model.save_pretrained(out, safe_serialization=True)
    tf.WhisperFeatureExtractor(feature_size=80, sampling_rate=SAMPLE_RATE).save_pretrained(out)
    (out / "generation_config.json").write_text(
        json.dumps({"decoder_start_token_id": sot, "bos_token_id": eot, "eos_token_id": eot, "pad_token_id": eot})
    )
    return str(out)


def audio(i: int):
    """Input ``i``: float32 [samples] at 16 kHz; a chord of tones gliding at an input-specific rate, plus noise."""
    import numpy as np

    rng = np.random.default_rng(1000 + i)
    seconds = 0.6 + 1.04 * i + 0.1 * (i % 3)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    sig = np.zeros_like(t)
    for k in range(3):
        f0 = 150.0 * (k + 1) * (1 + 0.37 * i)
        sig += np.sin(2 * np.pi * (f0 * t + 40.0 * (i + 1) * t**2)) / (k + 1)
    sig += 0.05 * rng.standard_normal(t.shape)
    return (0.3 * sig / np.abs(sig).max()).astype(np.float32)


def features(path: str, i: int):
    """Whisper's log-mel features of input i: float32 [1, 80, 3000] (padded to 30 s, as both engines do)."""
    import transformers as tf

    fe = tf.WhisperFeatureExtractor.from_pretrained(path)
    return fe(audio(i), sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features


def greedy(path: str, n_tokens: int) -> list[list[int]]:
    """transformers' eager attention, fp32: ``n_tokens`` greedy ids per input after DECODER_PROMPT."""
    import torch
    import transformers as tf

    tok = tf.AutoTokenizer.from_pretrained(path)
    prompt = tok.convert_tokens_to_ids(tok.tokenize(DECODER_PROMPT))
    model = tf.WhisperForConditionalGeneration.from_pretrained(
        path, torch_dtype=torch.float32, attn_implementation="eager"
    ).eval()
    res = []
    with torch.no_grad():
        for i in range(N_INPUTS):
            enc = model.model.encoder(features(path, i)).last_hidden_state
            ids = list(prompt)
            for _ in range(n_tokens):  # full recompute each step: no cache, nothing to get wrong
                logits = model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([ids])).logits
                ids.append(int(logits[0, -1].argmax()))
            res.append(ids[len(prompt) :])
    return res


def build(root: Path, python: str, n_tokens: int = 32) -> dict:
    """The model (seed 0) in ``root/whisper`` and transformers' greedy ids, made in a subprocess of ``python``
    (the engine venv's, whose transformers the engine uses too): {"path": DIR, "hf": [[ids] * N_INPUTS]}."""
    import subprocess

    path, ref = root / "whisper", root / "whisper.hf.json"
    for cmd in (["make", str(path), "0"], ["greedy", str(path), str(ref), str(n_tokens)]):
        subprocess.run([python, __file__, *cmd], check=True, capture_output=True, timeout=600)
    return {"path": str(path), "hf": json.loads(ref.read_text())}


if __name__ == "__main__":
    if sys.argv[1] == "make":
        print(make(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0))
    elif sys.argv[1] == "greedy":
        json.dump(greedy(sys.argv[2], int(sys.argv[4])), open(sys.argv[3], "w"))
