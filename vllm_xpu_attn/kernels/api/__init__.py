"""The kernel layer's floor: what every provider implements and every caller may import.

Rooms (each module one job; none imports a provider, none imports an optional library):

* ``dtypes``: the float/FP8 dtypes of the contract;
* ``types``: the vocabulary (``PagedStep``, ``LayerConsts``, ``LayerTensors``, ``KernelRequest``, ``Phase``,
  ``Feature``, ``KVLayout``);
* ``checks``: the input checks, each naming the argument;
* ``base``: ``KernelProvider`` (declarations + the one-call contract) and ``PagedLaunch``;
* ``registry``: priority per device, the env override, one explanatory error;
* ``guard``: device-side bounds flags and the one capture check;
* ``ops`` / ``torch_ops``: device operations by name, the torch forms of the small ops;
* ``oracle``: the pure-torch attention every provider (and every vendor probe) is judged by.

Core and the adapters import ``vllm_xpu_attn.kernels.api`` only; providers live in
``vllm_xpu_attn.kernels.providers`` and are loaded by the registry, by name.
"""

from .base import ENV_BATCH_INVARIANT, KernelProvider, PagedLaunch, batch_invariant_requested
from .checks import (
    MAX_SOFTMAX_SCALE,
    check_count,
    check_descale,
    check_dims,
    check_heads,
    check_paged_layer,
    check_paged_step,
    check_paged_values,
    check_per_head,
    check_scale,
    check_softcap,
    check_varlen,
    check_window,
    check_write_kv,
    check_write_kv_all,
    check_write_kv_slots,
    same_device,
)
from .dtypes import FLOAT_DTYPES, FP8_DTYPES, INDEX_DTYPES, KV_DTYPES, dtype_name, fp8_descale, is_fp8
from .guard import FLAGS, DeviceErrorFlags, capturing, flag_torch, sync_checks
from .ops import device_op
from .oracle import paged_attention
from .registry import (
    DEFAULT_PAGE_SIZE,
    ENV_OVERRIDE,
    PRIORITY,
    NoProviderError,
    chosen_providers,
    default_page_size,
    explain,
    get_provider,
    provider_names,
    register_provider,
    reload_provider,
    select_provider,
    unregister_provider,
)
from .torch_ops import merge_state_torch, quantize_fp8, write_kv_torch
from .types import (
    NO_LAYER_TENSORS,
    Feature,
    KernelRequest,
    KVLayout,
    LayerConsts,
    LayerTensors,
    PagedStep,
    Phase,
    call_id,
)

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "DeviceErrorFlags",
    "ENV_BATCH_INVARIANT",
    "ENV_OVERRIDE",
    "FLAGS",
    "FLOAT_DTYPES",
    "FP8_DTYPES",
    "Feature",
    "INDEX_DTYPES",
    "KV_DTYPES",
    "KVLayout",
    "KernelProvider",
    "KernelRequest",
    "LayerConsts",
    "LayerTensors",
    "MAX_SOFTMAX_SCALE",
    "NO_LAYER_TENSORS",
    "NoProviderError",
    "PRIORITY",
    "PagedLaunch",
    "PagedStep",
    "Phase",
    "batch_invariant_requested",
    "call_id",
    "capturing",
    "check_count",
    "check_descale",
    "check_dims",
    "check_heads",
    "check_paged_layer",
    "check_paged_step",
    "check_paged_values",
    "check_per_head",
    "check_scale",
    "check_softcap",
    "check_varlen",
    "check_window",
    "check_write_kv",
    "check_write_kv_all",
    "check_write_kv_slots",
    "chosen_providers",
    "default_page_size",
    "device_op",
    "dtype_name",
    "explain",
    "flag_torch",
    "fp8_descale",
    "get_provider",
    "is_fp8",
    "merge_state_torch",
    "paged_attention",
    "provider_names",
    "quantize_fp8",
    "register_provider",
    "reload_provider",
    "same_device",
    "select_provider",
    "sync_checks",
    "unregister_provider",
    "write_kv_torch",
]
