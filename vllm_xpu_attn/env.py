"""Every environment variable this package reads, in one table, and the one parser of each kind.

One prefix, ``XPU_ATTN_`` (not ``VLLM_``: vLLM warns about ``VLLM_`` variables it does not know, and the
variables serve SGLang and transformers too). The first spellings, ``VLLM_XPU_ATTN_*``, are
still read when the new name is unset, with one deprecation line in the log per old name.

docs/usage.md's variable table is this table (tests/test_docs.py checks they agree). Read the
variables through these functions only: one truth for what counts as "on", and a new variable is one
row here plus its docs line. Values are read when asked (not at import), so a test or a launcher that
sets a variable before the engine starts is honoured.
"""

import os
from typing import NamedTuple, Optional


class Var(NamedTuple):
    name: str
    default: str  # as documented; "" = unset
    meaning: str


ENABLE = "XPU_ATTN_ENABLE"  # not VLLM_*: vLLM warns about VLLM_ variables it does not know
AS_INTEL_XPU = "XPU_ATTN_AS_INTEL_XPU"
KERNEL = "XPU_ATTN_KERNEL"
BATCH_INVARIANT = "XPU_ATTN_BATCH_INVARIANT"
SYNC_CHECKS = "XPU_ATTN_SYNC_CHECKS"
FAST_LAUNCH = "XPU_ATTN_FAST_LAUNCH"
WARMUP = "XPU_ATTN_WARMUP"
LOG_LEVEL = "XPU_ATTN_LOG_LEVEL"
TRUST_VLLM_XPU_KERNELS = "XPU_ATTN_TRUST_VLLM_XPU_KERNELS"
PROBE_DEVICE = "XPU_ATTN_PROBE_DEVICE"
ALLOW_UNTESTED = "XPU_ATTN_ALLOW_UNTESTED"  # every engine's gate, like XPU_ATTN_ENABLE: not VLLM_*

VARIABLES: tuple[Var, ...] = (
    Var(ENABLE, "", "vLLM: `1` turns the plugin on (CUDA, CPU), `0` off everywhere; unset: on for Intel XPU only"),
    Var(AS_INTEL_XPU, "0", "SGLang: the backend also registers as `intel_xpu`"),
    Var(KERNEL, "", "force one kernel provider for every layer (a name `doctor` lists)"),
    Var(BATCH_INVARIANT, "0", "`1`: each sequence's output bitwise independent of the batch"),
    Var(SYNC_CHECKS, "0", "`1`: check the kernels' device-side bounds flags after every launch (a sync per layer)"),
    Var(FAST_LAUNCH, "1", "`0`: launch Triton kernels through Triton's normal launcher"),
    Var(
        WARMUP,
        "1",
        "`0`: a layer kind's first call no longer compiles every Triton variant it can launch "
        "(shorter start-up; a step shape met later compiles its own)",
    ),
    Var(LOG_LEVEL, "INFO", "the package logger's level; `DEBUG` logs one line per planned step"),
    Var(TRUST_VLLM_XPU_KERNELS, "0", "`1`: treat an unknown vllm-xpu-kernels version as the newest one declared"),
    Var(
        ALLOW_UNTESTED,
        "0",
        "`1`: serve an engine or transformers release outside the tested range, with one "
        "warning line (default: such a release is refused)",
    ),
    Var(PROBE_DEVICE, "xpu", "device the sgl-kernel wrappers probe their build on (the tests' fakes use `cpu`)"),
)
_KNOWN = {v.name: v for v in VARIABLES}
OLD_PREFIX = "VLLM_"  # VLLM_XPU_ATTN_KERNEL etc.: the first spellings, read as deprecated aliases
_warned: set[str] = set()


def _raw(name: str) -> str:
    """The variable's value as set (stripped; "" when unset), from its old ``VLLM_``-prefixed spelling when only
    that is set (logged once per name as deprecated)."""
    value = os.environ.get(name, "").strip()
    old = OLD_PREFIX + name
    if not value and old in os.environ and name not in (ENABLE, AS_INTEL_XPU, ALLOW_UNTESTED):
        value = os.environ[old].strip()
        if old not in _warned:
            _warned.add(old)
            import logging

            logging.getLogger("vllm_xpu_attn").warning("%s is deprecated: set %s instead (read for now)", old, name)
    return value


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _known(name: str) -> Var:
    if name not in _KNOWN:
        raise KeyError(f"{name} is not in vllm_xpu_attn.env.VARIABLES")
    return _KNOWN[name]


def flag(name: str) -> Optional[bool]:
    """True / False for a set variable ("1/true/yes/on" vs "0/false/no/off", any case), its documented default
    when unset or empty (None when that default is unset too). Anything else is an error naming the variable."""
    raw = _raw(name).lower() or _known(name).default
    if not raw:
        return None
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ValueError(f"{name}={raw!r}: expected one of {'/'.join(_TRUE + _FALSE)}")


def validate() -> None:
    """Every variable of the table that is set, parsed now: one error naming each bad value (called where the
    package is configured: plugin load, layer set-up), so a typo fails start-up instead of a later launch."""
    bad = []
    for v in VARIABLES:
        raw = _raw(v.name)
        if not raw:
            continue
        if v.default in ("0", "1") or v.name == ENABLE:  # on/off switches
            if raw.lower() not in _TRUE + _FALSE:
                bad.append(f"{v.name}={raw!r} (expected one of {'/'.join(_TRUE + _FALSE)})")
        elif v.name == LOG_LEVEL and raw.upper() not in ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG", "NOTSET"):
            bad.append(f"{v.name}={raw!r} (expected DEBUG/INFO/WARNING/ERROR/CRITICAL)")
    if bad:
        raise ValueError("vllm-xpu-attn: bad environment variable value: " + "; ".join(bad))


def on(name: str) -> bool:
    """``flag(name)`` with unset meaning off."""
    return bool(flag(name))


def text(name: str) -> Optional[str]:
    """The variable's value (stripped), or its documented default; None when both are unset."""
    return _raw(name) or _known(name).default or None


def triton_interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter (TRITON_INTERPRET, as Triton itself reads it)."""
    try:
        from triton import knobs  # triton 3.4+

        return bool(knobs.runtime.interpret)
    except Exception:  # older triton, or none: the variable, as triton.runtime.jit reads it
        return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in _TRUE


def host_device() -> str:
    """The accelerator an engine would pick by itself on this host: "xpu", "cuda" or "cpu"."""
    import torch

    if hasattr(torch, "xpu") and torch.xpu.is_available():
        return "xpu"
    if torch.cuda.is_available():
        return "cuda"
    return "cpu"
