"""The vendor libraries' models (tests/fakes) switched on for a test module.

The fakes run each vendor kernel's semantics on CPU tensors, so while they are on, the vendor providers
(which declare only "xpu") also declare "cpu": the one-call API's capability gate then judges everything
else a build declares, as it would on an XPU. The host is modelled as an XPU host too: LayerRunner(device="xpu")
is built (on a host without one it is refused) and runs the fakes on CPU tensors.
"""

import contextlib
import os
import sys

from vllm_xpu_attn.core import run
from vllm_xpu_attn.kernels.api import get_provider, reload_provider

FAKES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fakes")
VENDORS = ("sgl_kernel", "sgl_kernel_mla", "vllm_xpu_kernels", "ipex")  # sgl_kernel_mla: the same library's MLA op
VENDOR_MODULES = ("sgl_kernel", "vllm_xpu_kernels", "intel_extension_for_pytorch", "_common")


def reset_instances() -> None:
    for n in VENDORS:
        reload_provider(n)


@contextlib.contextmanager
def vendor_fakes():
    sys.path.insert(0, FAKES)
    reset_instances()
    classes = {type(get_provider(n)) for n in VENDORS}
    saved = {c: c.devices for c in classes}
    for c in classes:
        c.devices = c.devices | {"cpu"}
    host_check = run.missing_device_reason
    run.missing_device_reason = lambda device: None if device.type == "xpu" else host_check(device)
    try:
        yield
    finally:
        run.missing_device_reason = host_check
        for c, d in saved.items():
            c.devices = d
        sys.path.remove(FAKES)
        for m in [m for m in sys.modules if m.split(".")[0] in VENDOR_MODULES]:
            del sys.modules[m]
        reset_instances()
