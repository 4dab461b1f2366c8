"""Graph-capture policy, one for every adapter: a layer can be captured in a CUDA/XPU graph only if every
provider it may run there launches without host syncs (``KernelProvider.graph_capture_reason is None``).

vLLM asks per KV-cache group at builder time, after the layers were built (``record`` then ``blockers``);
SGLang asks once when its graph state is made, over the runners it holds (``capture_blockers``).
"""

from __future__ import annotations

from typing import Iterable

from .run import LayerRunner

# group -> why some layer of this process cannot be captured (the reasons of its providers), filled as layers
# are built: vLLM's builders ask through a classmethod, after the layers, with no handle on them.
_BLOCKERS: dict[str, set[str]] = {}


def capture_blockers(runners: Iterable[LayerRunner], *, mha_prefill: bool = True) -> list[str]:
    """Sorted, distinct reasons why some of ``runners`` cannot be captured ([]: all can). ``mha_prefill=False``
    leaves out MLA's un-absorbed MHA prefill provider, which no engine runs inside a graph."""
    return sorted({why for r in runners if (why := r.graph_capture_reason(mha_prefill=mha_prefill))})


def record(group: str, runner: LayerRunner) -> None:
    """Note a built layer of ``group`` ("vllm", "vllm_mla"): its blockers, if any, keep the group eager."""
    _BLOCKERS.setdefault(group, set()).update(capture_blockers([runner]))


def blockers(group: str) -> list[str]:
    """Why ``group`` cannot be captured in this process ([]: it can)."""
    return sorted(_BLOCKERS.get(group, ()))


def forget(group: str) -> None:
    """Drop what was recorded for ``group`` (a new model in the same process; tests)."""
    _BLOCKERS.pop(group, None)
