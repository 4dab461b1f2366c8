"""``sglang.srt.plugins`` entry point: makes ``--attention-backend xpu_attn`` available.

SGLang calls general plugins in the engine, every scheduler and the detokenizer, so the
name is registered in every process. Re-entrant; harmless when SGLang is absent.
It also lets SGLang's per-model backend checks accept ``xpu_attn`` wherever they accept
``intel_xpu``, picks a page size on XPU when none was given, and serves EAGLE's draft passes
(sglang_compat/compat.py). With ``XPU_ATTN_AS_INTEL_XPU=1`` the backend also takes the name ``intel_xpu``, so the
policies SGLang keys on that name (page-size snapping, model checks) apply to it.

On an SGLang release outside the supported range (``vllm_xpu_attn.versions``), or one missing a name the adapter
imports, it logs one line and registers the name ``xpu_attn`` only to refuse it: choosing it stops start-up with
that line; not choosing it leaves SGLang as it was.
"""

from __future__ import annotations

import logging
from typing import Optional

from vllm_xpu_attn import env, versions

logger = logging.getLogger("vllm_xpu_attn")

NAME = "xpu_attn"


def create_backend(runner):
    from .backend import XpuAttnSGLangBackend

    return XpuAttnSGLangBackend(runner)


def create_multi_step_draft_backend(runner, topk: int, steps: int):
    from .backend import XpuAttnMultiStepDraftBackend

    return XpuAttnMultiStepDraftBackend(runner, topk, steps)


def create_draft_extend_backend(runner):
    from .backend import XpuAttnSGLangBackend

    return XpuAttnSGLangBackend(runner, skip_prefill=False)


def engine_problem() -> Optional[str]:
    """None when the running SGLang is supported and has every name the adapter imports, else why not (one line)."""
    import sglang

    version = str(getattr(sglang, "__version__", "unknown"))
    why = versions.gate("sglang", version)  # XPU_ATTN_ALLOW_UNTESTED=1 serves an untested release (one warning)
    if why:
        return why
    try:
        from . import compat  # noqa: F401  (every SGLang name the adapter uses is imported there)
    except ImportError as e:
        return versions.missing_symbol_reason("sglang", version, e)
    return None


def _register_refusal(why: str) -> None:
    """The name stays selectable, so choosing it fails at start-up with the reason instead of 'invalid choice'."""
    versions.refuse_or_log(why, forced=False, how_forced="")
    try:
        from sglang.srt.layers.attention.attention_registry import register_attention_backend
        from sglang.srt.server_args import ATTENTION_BACKEND_CHOICES, add_attention_backend_choices
    except Exception as e:  # the registry itself moved: the log line above is all we can do
        logger.debug("xpu_attn: cannot register the refusal with SGLang (%s)", e)
        return

    def refuse(runner):
        versions.refuse_or_log(why, forced=True, how_forced=f"--attention-backend {NAME}")

    if NAME not in ATTENTION_BACKEND_CHOICES:
        add_attention_backend_choices([NAME])
    register_attention_backend(NAME)(refuse)


def register() -> None:
    try:
        why = engine_problem()
    except Exception as e:  # SGLang absent: change nothing
        logger.debug("xpu_attn: not registering with SGLang (%s)", e)
        return
    if why:
        _register_refusal(why)
        return
    try:
        from .compat import install_deterministic_choice, install_draft_backends, install_model_hook_alias, registry

        register_attention_backend, backends, add_choices, choices = registry()
    except Exception as e:  # SGLang absent or too different: change nothing
        logger.debug("xpu_attn: not registering with SGLang (%s)", e)
        return
    names = [NAME]
    if env.on(env.AS_INTEL_XPU):
        names.append("intel_xpu")
    for name in names:
        if name not in choices:
            add_choices([name])
        if backends.get(name) is not create_backend:
            register_attention_backend(name)(create_backend)
    from vllm_xpu_attn.kernels.api import default_page_size

    # SGLang's model checks (GPT-OSS, Llama-4, Gemma-4) accept what intel_xpu accepts, a page
    # size the XPU providers serve is chosen when none was given, and EAGLE drafts run here too.
    install_model_hook_alias(NAME, default_page_size)
    install_draft_backends(NAME, create_multi_step_draft_backend, create_draft_extend_backend)
    install_deterministic_choice(NAME)  # --enable-deterministic-inference -> batch-invariant kernels
