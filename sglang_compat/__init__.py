"""SGLang adapter for vllm-xpu-attn: an AttentionBackend subclass and its registration plugin.

Importing this package does not import SGLang; ``sglang_compat.backend`` does.
"""
