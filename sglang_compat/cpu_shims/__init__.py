"""Import shims for running SGLang's CUDA wheel on a CPU-only machine (tests, the main job, CPU serving).

SGLang 0.5.23 imports ``rotary_embedding`` from ``vllm._custom_ops`` while constructing rotary
embeddings when its device checks do not recognise the machine (it never calls it on the CPU
path). ``PATH`` is a directory with a ``vllm`` package that provides the name and raises if it
is ever called; put it on PYTHONPATH (``python -m sglang_compat.cpu_shims`` prints it) only
when vLLM itself is not installed in that environment.
"""

from __future__ import annotations

import os

PATH = os.path.dirname(os.path.abspath(__file__))

if __name__ == "__main__":  # pragma: no cover
    print(PATH)
