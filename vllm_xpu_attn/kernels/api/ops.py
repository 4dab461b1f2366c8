"""Device operations of the step plan that a provider may accelerate (core calls them by name).

Core never imports a provider module: it asks for an operation by name and device type and gets a
callable or None, in which case it runs its own torch ops (same integers). Each entry names the module
that implements it, imported on first use, so an optional library (Triton) stays optional.

    token_pages(token_table, page_size, n_pages, row_index) -> Optional[int32 [B, n_pages]]
        each page's first slot // page_size, rows picked by row_index (SGLang's req_pool_indices);
        None where the operation does not apply to these tensors.
"""

from __future__ import annotations

import importlib
from typing import Callable, Optional

# op name -> device type -> "module:function"
_OPS: dict[str, dict[str, str]] = {
    "token_pages": {
        "cuda": "vllm_xpu_attn.kernels.providers.triton.paging:token_pages",
        "xpu": "vllm_xpu_attn.kernels.providers.triton.paging:token_pages",
    },
}
_resolved: dict[tuple[str, str], Optional[Callable]] = {}


def device_op(name: str, device_type: str) -> Optional[Callable]:
    """The implementation of operation ``name`` on ``device_type``, or None (none registered for the device,
    or its module cannot be imported here, e.g. Triton not installed)."""
    key = (name, device_type)
    if key not in _resolved:
        path = _OPS[name].get(device_type)
        fn = None
        if path is not None:
            module, attr = path.split(":")
            try:
                fn = getattr(importlib.import_module(module), attr)
            except ImportError:
                fn = None
        _resolved[key] = fn
    return _resolved[key]
