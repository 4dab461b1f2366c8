"""Shared pieces of the strict vendor fakes (test-only).

Each fake enforces what its vendor's source enforces (every rule cites the vendor file and line,
see README.md for the commits read) and models what the vendor silently does wrong (rows read at
``index * width``, sinks read in q's dtype, LSE left unwritten): the wrapper tests compare the
wrapper's output with the naive oracle, so a silent vendor misbehaviour the wrapper does not avoid
shows up as a wrong answer there. The attention arithmetic itself is done by the reference provider
on the inputs *as the vendor would read them*.
"""
import torch

CALLS = []  # (library, function, info) of every fake call, for tests to inspect
GARBAGE = 1.0e4  # what an unwritten (torch::empty) LSE buffer is modelled to hold


class VendorError(RuntimeError):
    """A TORCH_CHECK / assert of the vendor library (RuntimeError, as TORCH_CHECK raises)."""


def check(cond, msg: str, cite: str) -> None:
    if not cond:
        raise VendorError(f"{msg}  [{cite}]")


def record(lib, fn, **info):
    CALLS.append((lib, fn, info))


def rows_as_read(table: torch.Tensor) -> torch.Tensor:
    """The table as a kernel reads it when it addresses row b at ``b * table.size(1)``:
    the same storage, row stride forced to the logical width (a column slice is misread)."""
    if table.dim() != 2 or table.numel() == 0:
        return table
    return torch.as_strided(table, table.shape, (table.shape[1], 1), table.storage_offset())


def sinks_as_read(sinks, dtype: torch.dtype):
    """A sinks buffer read through a pointer of ``dtype`` (the kernels' ElementSink is q's type)."""
    if sinks is None or sinks.dtype == dtype:
        return sinks
    raw = sinks.contiguous().view(torch.uint8)
    n = sinks.numel()
    return raw[: n * torch.tensor([], dtype=dtype).element_size()].view(dtype).float()


def reference():
    from vllm_xpu_attn.kernels.api import get_provider

    return get_provider("reference")
