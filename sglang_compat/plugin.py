"""``sglang.srt.plugins`` entry point: makes ``--attention-backend xpu_attn`` available.

SGLang calls general plugins in the engine, every scheduler and the detokenizer, so the
name is registered in every process. Re-entrant; harmless when SGLang is absent.
It also lets SGLang's per-model backend checks accept ``xpu_attn`` wherever they accept
``intel_xpu``, picks a page size on XPU when none was given, and serves EAGLE's draft passes
(sglang_compat/compat.py). With ``XPU_ATTN_AS_INTEL_XPU=1`` the backend also takes the name ``intel_xpu``, so the
policies SGLang keys on that name (page-size snapping, model checks) apply to it.
"""

from __future__ import annotations

import logging

from vllm_xpu_attn import env

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


def register() -> None:
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
    from vllm_xpu_attn.kernels import default_page_size

    # SGLang's model checks (GPT-OSS, Llama-4, Gemma-4) accept what intel_xpu accepts, a page
    # size the XPU providers serve is chosen when none was given, and EAGLE drafts run here too.
    install_model_hook_alias(NAME, default_page_size)
    install_draft_backends(NAME, create_multi_step_draft_backend, create_draft_extend_backend)
    install_deterministic_choice(NAME)  # --enable-deterministic-inference -> batch-invariant kernels
