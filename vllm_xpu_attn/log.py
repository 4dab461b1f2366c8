"""The package logger ("vllm_xpu_attn"). Engines configure only their own loggers, so the
adapters attach a stderr handler once; XPU_ATTN_LOG_LEVEL sets the level (default INFO)."""

import logging

from . import env

logger = logging.getLogger("vllm_xpu_attn")


def setup_logging() -> None:
    """Attach the handler once. Every adapter's entry calls this first, so it also checks the package's
    environment variables there (env.validate): a bad value fails configuration, naming the variable."""
    env.validate()
    if logger.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [vllm-xpu-attn] %(message)s", "%m-%d %H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(env.text(env.LOG_LEVEL).upper())
    logger.propagate = False
