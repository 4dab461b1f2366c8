"""Stand-in for vllm/config/cache.py: only the KV-cache dtype handler lookup that 0.33's verbatim
``get_kv_quant_mode`` (vllm/v1/kv_cache_interface.py) calls first. No handler is registered here (in vLLM,
plugins register them for their own dtype names), so every dtype falls through to 0.33's built-in table."""


def get_kv_cache_dtype_handler(name: str):
    return None
