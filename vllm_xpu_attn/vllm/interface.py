"""Start-up check that the running vLLM's attention interface is the one this adapter was written against.

A release can keep every name the adapter imports (compat.py) and still change the interface: a new abstract
method on a base class, a new argument vLLM passes to a method we override (0.33's ``skip_scale``), or a metadata
field we read renamed. Each would otherwise surface as a TypeError or AttributeError from deep inside a forward;
here it is one line at plugin load naming the release, the name and the supported range.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Optional

from .. import versions

# CommonAttentionMetadata fields backend.py reads, and AttentionSelectorConfig fields platform.py reads
METADATA_FIELDS = (
    "query_start_loc",
    "query_start_loc_cpu",
    "seq_lens",
    "num_reqs",
    "num_actual_tokens",
    "max_query_len",
    "max_seq_len",
    "block_table_tensor",
    "slot_mapping",
    "causal",
    "encoder_seq_lens",
    "encoder_seq_lens_cpu",
    "is_prefilling",
)
SELECTOR_FIELDS = (
    "head_size",
    "dtype",
    "kv_cache_dtype",
    "block_size",
    "use_mla",
    "has_sink",
    "use_sparse",
    "use_mm_prefix",
    "use_per_head_quant_scales",
    "attn_type",
    "has_sliding_window",
    "use_non_causal",
    "use_batch_invariant",
    "use_kv_connector",
    "use_pcp",
    "use_adaptive_verification",
    "use_dcp",
    "use_rswa",
)


def problems(ours: tuple[type, ...]) -> list[str]:
    """What differs, one phrase each ('lacks X', 'declares abstract X', ...), for our classes ``ours``."""
    out = []
    for cls in ours:
        for name in sorted(getattr(cls, "__abstractmethods__", ())):
            base = next((b for b in cls.__mro__[1:] if name in getattr(b, "__abstractmethods__", ())), cls)
            out.append(
                f"declares abstract {base.__name__}.{name}, which this backend's vllm adapter does not implement"
            )
        out += [_signature_problem(cls, name) for name, fn in vars(cls).items() if callable(fn)]
    from . import compat

    out += _missing_fields(compat.CommonAttentionMetadata, METADATA_FIELDS)
    from vllm.v1.attention.selector import AttentionSelectorConfig

    out += _missing_fields(AttentionSelectorConfig, SELECTOR_FIELDS)
    return [p for p in out if p]


def _signature_problem(cls: type, name: str) -> Optional[str]:
    """A method vLLM calls on ours: every parameter vLLM's base declares must be one ours accepts."""
    if name.startswith("_"):
        return None
    base = next((b for b in cls.__mro__[1:] if name in vars(b) and b.__module__.startswith("vllm.")), None)
    if base is None:
        return None
    try:
        theirs = inspect.signature(getattr(base, name)).parameters
        mine = inspect.signature(getattr(cls, name)).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in mine.values()):
        return None
    extra = [
        p
        for p in theirs
        if p not in mine and theirs[p].kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    if extra:
        return (
            f"passes {base.__name__}.{name}() the argument(s) {', '.join(extra)}, which this backend's vllm "
            "adapter does not accept"
        )
    return None


def _missing_fields(cls: type, names: tuple[str, ...]) -> list[str]:
    have = (
        {f.name for f in dataclasses.fields(cls)}
        if dataclasses.is_dataclass(cls)
        else set(getattr(cls, "_fields", ())) or set(dir(cls))
    )
    return [f"lacks {cls.__name__}.{n}, which this backend's vllm adapter reads" for n in names if n not in have]


def reason(version: str, ours: tuple[type, ...]) -> Optional[str]:
    """None when the interface matches, else the one line (the first difference; the rest counted)."""
    found = problems(ours)
    if not found:
        return None
    more = f" (and {len(found) - 1} more: {'; '.join(found[1:])})" if len(found) > 1 else ""
    return versions.interface_reason("vllm", version, found[0] + more)


def mha_reason(version: str) -> Optional[str]:
    from .backend import XpuAttnBackend, XpuAttnImpl, XpuAttnMetadataBuilder

    return reason(version, (XpuAttnBackend, XpuAttnImpl, XpuAttnMetadataBuilder))


def mla_reason(version: str) -> Optional[str]:
    """MLA's classes: checked when an MLA model selects this backend (their vLLM bases import model layers)."""
    from .mla import XpuAttnMLABackend, XpuAttnMLAImpl, XpuAttnMLAMetadataBuilder

    return reason(version, (XpuAttnMLABackend, XpuAttnMLAImpl, XpuAttnMLAMetadataBuilder))
