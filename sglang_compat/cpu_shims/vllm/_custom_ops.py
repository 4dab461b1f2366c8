"""See sglang_compat/cpu_shims/__init__.py: names SGLang imports on CPU, each raising if called."""


def rotary_embedding(*args, **kwargs):
    raise RuntimeError("sglang_compat.cpu_shims: vllm._custom_ops.rotary_embedding must not be called on the CPU path")
