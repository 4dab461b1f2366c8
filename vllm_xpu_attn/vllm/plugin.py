"""vLLM entry points. Both import nothing heavy and are harmless when vLLM or a device is absent.

* ``platform_plugin`` (group ``vllm.platform_plugins``): returns the class path of a platform
  that subclasses the host's built-in one and routes attention to this backend. Active by
  itself on Intel XPU; on CUDA or CPU only when ``XPU_ATTN_ENABLE=1`` (``=0`` turns it off on XPU too). Otherwise
  None, and vLLM
  behaves as without this package.
* ``general_plugin`` (group ``vllm.general_plugins``): registers the backend as
  ``AttentionBackendEnum.CUSTOM`` so ``--attention-backend CUSTOM`` selects it wherever the
  platform honours the user's choice. Runs in every vLLM process; re-entrant.

Both first check the vLLM release (``vllm_xpu_attn.versions``): on one outside the supported range, or one
missing a name the adapter imports, they log one line and change nothing - or, with ``XPU_ATTN_ENABLE=1``
(this backend forced), ``general_plugin`` stops start-up with that line (vLLM ignores a platform plugin's
exceptions, not a general plugin's).
"""

from __future__ import annotations

import logging
from typing import Optional

from .. import env, versions

logger = logging.getLogger("vllm_xpu_attn")

BACKEND_PATH = "vllm_xpu_attn.vllm.backend.XpuAttnBackend"
# what the CPU platform routes to: the same backend writing K/V inside forward (its docstring says why)
CPU_BACKEND_PATH = "vllm_xpu_attn.vllm.backend.XpuAttnCpuBackend"
# Said in the one start-up line on XPU until a run on Intel hardware is recorded (README says the same).
XPU_CAVEAT = (
    "; not yet run on an Intel GPU (its kernels are compiled ahead of time and tested on CPUs and NVIDIA "
    "GPUs only): report problems, or set XPU_ATTN_ENABLE=0 for vLLM's own XPU backends"
)
_PLATFORMS = {
    "xpu": "vllm_xpu_attn.vllm.platform.XpuAttnXPUPlatform",
    "cuda": "vllm_xpu_attn.vllm.platform.XpuAttnCudaPlatform",
    "cpu": "vllm_xpu_attn.vllm.platform.XpuAttnCpuPlatform",
}


def platform_plugin() -> Optional[str]:
    from ..log import setup_logging

    try:
        setup_logging()
    except ValueError as e:  # vLLM drops a platform plugin's exception without a word: say it first
        logger.error("%s", e)
        raise
    enabled = env.flag(env.ENABLE)
    dev = env.host_device()
    if enabled is False:
        return None  # explicitly off
    if dev == "xpu" or enabled:
        why = engine_problem(symbols=False)  # vLLM is half-imported here: importing compat could be circular
        if why:  # vLLM swallows a platform plugin's exception: log here, general_plugin refuses a forced start-up
            versions.refuse_or_log(why, forced=False, how_forced="")
            return None
        logger.info(
            "vllm-xpu-attn: platform plugin active on %s (%s)%s",
            dev,
            "Intel XPU" if dev == "xpu" and not enabled else f"{env.ENABLE}=1",
            XPU_CAVEAT if dev == "xpu" else "",
        )
        return _PLATFORMS[dev]
    return None


_registered = False


def general_plugin() -> None:
    global _registered
    from ..log import setup_logging

    setup_logging()
    if _registered:
        return
    try:
        why = engine_problem()
    except Exception as e:  # noqa: BLE001  (vLLM does not catch a general plugin's exception: never break
        # start-up for users who do not use this backend; a forced start-up still stops, with the reason)
        why = f"vllm-xpu-attn: checking vLLM {_version()} failed ({type(e).__name__}: {' '.join(str(e).split())})"
    if why:
        # forced, or our platform already on (Intel XPU, by itself) with a name missing: starting would fail later
        on_xpu = env.host_device() == "xpu" and env.flag(env.ENABLE) is not False
        forced = env.flag(env.ENABLE) is True or (on_xpu and versions.gate("vllm", _version()) is None)
        versions.refuse_or_log(
            why,
            forced=forced,
            how_forced=f"{env.ENABLE}=1" if env.flag(env.ENABLE) else "its platform is active on XPU",
        )
        return
    try:
        from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend
    except Exception as e:  # vLLM absent or too different: say so, change nothing
        logger.debug("vllm-xpu-attn: not registering with vLLM (%s)", e)
        return
    register_backend(AttentionBackendEnum.CUSTOM, BACKEND_PATH)
    _registered = True


def _version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "unknown"))


def engine_problem(symbols: bool = True) -> Optional[str]:
    """None when the running vLLM is supported and (``symbols``) has every name the adapter imports, else why not
    (one line)."""
    version = _version()
    why = versions.gate("vllm", version)  # XPU_ATTN_ALLOW_UNTESTED=1 serves an untested release (one warning)
    if why or not symbols:
        return why
    try:
        from . import compat  # noqa: F401  (every vLLM name the adapter uses is imported there)
    except ImportError as e:
        return versions.missing_symbol_reason("vllm", version, e)
    from . import interface

    return interface.mha_reason(version)  # a new abstract method, argument or renamed field: named now
