"""Test-only: lets SGLang 0.5.23's CUDA wheel run EAGLE on a CPU-only machine (tests/sglang/test_sglang_spec_decode.py).

On this machine SGLang takes its CUDA code paths (SGLANG_USE_CPU_ENGINE needs sgl-kernel's CPU build),
and speculative decoding reaches three things a CPU lacks (the test records each error without this):
  1. Triton kernels (KV-pool copy warm-up, EAGLE's slot bookkeeping): no Triton driver on a CPU ->
     run them with Triton's interpreter (TRITON_INTERPRET=1, set by the test, before triton is imported).
  2. EAGLE tree construction / greedy tree verify and the draft/verify cache-slot assignment: CUDA builds
     call sgl-kernel's CUDA ops, which do not load without libcuda, and an unknown platform falls through
     (assign_extend_cache_locs_func returns None) -> route them to SGLang's own Triton implementations (its
     XPU path) by setting ``_is_xpu`` in these two modules only: sglang.kernels.ops.speculative.spec_tree
     and sglang.kernels.ops.speculative.cache_locs (and, for NGRAM, reconstruct_tree, which picks at import).
Nothing in the attention path changes: the attention backend under test is whatever SGLang was given.
Put this directory on PYTHONPATH (it is a ``sitecustomize``, imported by every Python process).
"""

import importlib.abc
import importlib.machinery
import sys

_TARGETS = (
    "sglang.kernels.ops.speculative.spec_tree",
    "sglang.kernels.ops.speculative.cache_locs",
    "sglang.kernels.ops.speculative.reconstruct_tree",
)
# modules that pick their kernel at import time (``_is_xpu = is_xpu()``, then import sgl-kernel's op otherwise)
_AT_IMPORT = ("sglang.kernels.ops.speculative.reconstruct_tree",)


class _Patch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _TARGETS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        orig = spec.loader.exec_module

        def exec_module(module):
            if name in _AT_IMPORT:
                import sglang.srt.utils as u

                real = u.is_xpu
                u.is_xpu = lambda: True
                try:
                    orig(module)
                finally:
                    u.is_xpu = real
            else:
                orig(module)
            module._is_xpu = True  # SGLang's Triton kernels (its XPU path), run by Triton's interpreter
            sys.stderr.write(f"spec_cpu_shims: {name} -> SGLang's Triton kernels (interpreted)\n")

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Patch())
