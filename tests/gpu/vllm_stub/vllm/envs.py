"""Stand-in for vllm.envs: the few variables the adapter and builders read, from the environment."""

import os


def _flag(name: str) -> bool:
    return os.environ.get(name, "0").strip().lower() in ("1", "true", "yes", "on")


_VARS = {
    "VLLM_BATCH_INVARIANT": lambda: _flag("VLLM_BATCH_INVARIANT"),
    "VLLM_USE_V2_MODEL_RUNNER": lambda: None if os.environ.get("VLLM_USE_V2_MODEL_RUNNER") is None
    else _flag("VLLM_USE_V2_MODEL_RUNNER"),
    "VLLM_KV_CACHE_LAYOUT": lambda: os.environ.get("VLLM_KV_CACHE_LAYOUT"),
}


def __getattr__(name: str):  # evaluated at access, as vllm.envs does
    if name in _VARS:
        return _VARS[name]()
    raise AttributeError(name)


def __dir__():
    return list(_VARS)
