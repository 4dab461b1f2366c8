"""Bad index values found on the device, reported without a host sync.

Some inputs cannot be checked on the host without synchronising every step (page ids, lengths,
cu_seqlens_q and slot values live on the device). The Triton kernels therefore guard themselves:
they never read or write outside a tensor (out-of-range page ids are replaced by page 0, rows past
q/out and keys past the table are not touched), write the affected rows as NaN (never plausible
numbers), and record what they found in a small per-device int32 buffer.

The buffer is read at step boundaries: every ``poll`` (called by ``plan_step`` and the providers'
per-step planning) raises for what an earlier step recorded and enqueues an asynchronous copy of
the buffer to pinned host memory for a later poll, so a bad step is reported one or two steps later
with no extra synchronisation. ``XPU_ATTN_SYNC_CHECKS=1`` checks synchronously after every
launch instead (debugging: it costs a device sync per layer).
"""

from __future__ import annotations

from typing import Optional

import torch

from ... import env

# code -> (argument, what the kernel found: index = the sequence / token, value = the bad value)
CODES = {
    0: ("cu_seqlens_q", "sequence {index}'s query rows (ending at {value}) fall outside q/out"),
    1: (
        "cache_seqlens",
        "sequence {index} has {value} keys: negative, or more than its page_table row holds "
        "(page_table too narrow, e.g. max_seqlen_k below a real length)",
    ),
    2: ("page_table", "sequence {index} references page {value}, outside the KV cache's pages"),
    3: ("slot_mapping", "token {index} has slot {value}, outside the KV cache's slots"),
    4: ("token_rows", "request {index} names pool row {value}, outside the token table"),
}
SLOTS = 2 * len(CODES)  # per code: (max index + 1, one bad value)


def sync_checks() -> bool:
    """``XPU_ATTN_SYNC_CHECKS=1``: check after every launch, synchronously."""
    return env.on(env.SYNC_CHECKS)


class DeviceErrorFlags:
    """One int32 [SLOTS] buffer per device that the kernels write, and its pinned host snapshot."""

    def __init__(self) -> None:
        self._dev: dict[torch.device, torch.Tensor] = {}
        self._host: dict[torch.device, torch.Tensor] = {}
        self._sync: Optional[bool] = None

    @property
    def sync(self) -> bool:
        """``XPU_ATTN_SYNC_CHECKS``, read once at first use (not at import: a bad value is reported where
        the package is configured, env.validate)."""
        if self._sync is None:
            self._sync = sync_checks()
        return self._sync

    def buffer(self, device: torch.device) -> torch.Tensor:
        """The device's flag buffer (made once, outside any graph capture)."""
        buf = self._dev.get(device)
        if buf is None:
            if capturing(device):
                raise RuntimeError(
                    "vllm-xpu-attn: the first guarded launch on this device is inside a graph "
                    "capture; run one step eagerly first (the engines' warm-up does)"
                )
            buf = self._dev[device] = torch.zeros(SLOTS, dtype=torch.int32, device=device)
            if device.type != "cpu":
                self._host[device] = torch.zeros(SLOTS, dtype=torch.int32, pin_memory=_can_pin(device))
        return buf

    def poll(self, device: torch.device) -> None:
        """At a step boundary: raise for what an earlier step recorded; then snapshot asynchronously."""
        buf = self._dev.get(device)
        if buf is None:
            return
        if device.type == "cpu":  # the interpreter ran the kernels synchronously
            self._raise_if_set(buf, device)
            return
        host = self._host[device]
        self._raise_if_set(host, device)
        if not capturing(device):
            host.copy_(buf, non_blocking=True)

    def check_now(self, device: torch.device) -> None:
        """Synchronous check (``XPU_ATTN_SYNC_CHECKS=1``, tests)."""
        buf = self._dev.get(device)
        if buf is not None:
            self._raise_if_set(buf.cpu(), device)

    def clear(self, device: Optional[torch.device] = None) -> None:
        for d in [device] if device is not None else list(self._dev):
            if d in self._dev:
                self._dev[d].zero_()
            if d in self._host:
                self._host[d].zero_()

    def _raise_if_set(self, t: torch.Tensor, device: torch.device) -> None:
        vals = t.tolist()
        if not any(vals[0::2]):
            return
        found = []
        for code, (arg, what) in CODES.items():
            if vals[2 * code]:
                found.append(f"{arg}: " + what.format(index=vals[2 * code] - 1, value=vals[2 * code + 1]))
        self.clear(device)  # reported once; the next steps start clean
        raise ValueError(
            "vllm-xpu-attn: bad input found on the device in an earlier step (its affected output "
            "rows were written as NaN): " + "; ".join(found)
        )


def flag_torch(code: int, bad: torch.Tensor, values: torch.Tensor) -> None:
    """What the Triton kernels' ``_flag`` does, in torch ops (no host sync): for torch paths that run on a
    device (bad bool [N], values int [N]; the index recorded is the last bad one)."""
    err = FLAGS.buffer(bad.device)
    idx = torch.arange(1, bad.shape[0] + 1, device=bad.device, dtype=torch.int32)
    last = torch.where(bad, idx, 0).max() if bad.numel() else torch.zeros((), dtype=torch.int32, device=bad.device)
    err[2 * code] = torch.maximum(err[2 * code], last)
    pick = values[(last - 1).clamp(min=0).long()].to(torch.int32) if bad.numel() else err[2 * code + 1]
    err[2 * code + 1] = torch.where(last > 0, pick, err[2 * code + 1])


def capturing(device: torch.device) -> bool:
    """Whether a graph is being captured on the device's current stream (CUDA, XPU)."""
    if device.type == "cuda":
        return torch.cuda.is_current_stream_capturing()
    if device.type == "xpu":
        xpu = getattr(torch, "xpu", None)
        return bool(
            xpu is not None and hasattr(xpu, "is_current_stream_capturing") and xpu.is_current_stream_capturing()
        )
    return False


def _can_pin(device: torch.device) -> bool:
    try:
        return torch.empty(1).pin_memory() is not None
    except RuntimeError:
        return False


FLAGS = DeviceErrorFlags()
