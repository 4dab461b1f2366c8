"""Strict fake of the C++ MLA decode ops of sgl-kernel-xpu (the ``common_ops`` extension), main 9cf16bf9.

The real ``sgl_kernel/__init__.py:14`` imports the native ``common_ops``, which registers the
``torch.ops.sgl_kernel.*`` ops. The MLA ops are defined **only in a build with USE_MLA**
(``src/torch_extension_sycl.cc:361-390``, ``#ifdef USE_MLA``; ``src/CMakeLists.txt:17`` option default
ON, ``:46-48`` the define, ``:70-72`` drops ``mla_decode.cpp`` otherwise). Both modelled builds
(``flash_attn.BUILD`` "9cf16bf9" and "pr491") are default builds, so ``USE_MLA = True``; tests set it to
False (and call ``register()``) to model a ``USE_MLA=OFF`` build (README.md:45): the Python wrappers in
``attention.py`` still exist (they are plain Python), the ops behind them do not.

Cites (all @9cf16bf9): ``cc:L`` = src/torch_extension_sycl.cc, ``cpp:L`` = src/sycl/mla_decode.cpp,
``utils:L`` = src/sycl/Utils.h, ``types:L`` = src/sycl/kernels/mla/device/mla_decode_types.hpp,
``kern:L`` = src/sycl/kernels/mla/kernel/xe_mla_kernel.hpp, ``ml:L`` = .../collective/xe_mla_mainloop.hpp,
``epi:L`` = .../collective/xe_mla_epilogue.hpp, ``red:L`` = .../kernel/xe_mla_reduce_split_kv.hpp,
``run:L`` = .../device/mla_runner.hpp.

Modelled, not proven: the arithmetic is fp32 (the kernel's DPAS products in fp16/bf16 with fp32
accumulation are not modelled bit for bit); the split-KV partial numerators are rounded to the
element type as the kernel stores them (epi:219-235). The fake's device (``DEVICE``) stands for XPU.
"""
import re

import torch

from _common import check, record

USE_MLA = True  # both modelled builds are default builds (CMakeLists.txt:17 `option(USE_MLA ... ON)`)
DEVICE = "cpu"  # the device this model runs on, standing for "xpu" (utils:10 CHECK_DEVICE: x.is_xpu())
MLA_OPS = ("flash_mla_decode", "flash_mla_get_workspace_size")

# cc:364-367 (decode) and cc:362 (`m.def(name, &fn)`: schema inferred from the C++ signature, cpp:192-193)
SCHEMAS = {
    "flash_mla_decode": "flash_mla_decode(Tensor! out, Tensor! q_nope, Tensor! q_pe, Tensor! kv_c_and_k_pe_cache, "
                        "Tensor! seq_lens, Tensor! page_table, Tensor! workspace, float sm_scale, int num_kv_splits) -> ()",
    "flash_mla_get_workspace_size": "flash_mla_get_workspace_size(int max_seq_len, int num_batches, int num_heads, "
                                    "int page_size, int num_kv_splits) -> int",
}
PAGE_SIZES = (16, 32, 64, 128)  # cpp:162-166, cpp:196-199
D_LATENT = 512  # head_size_o = 512 in the workspace size (cpp:186)


def _check_schema(name, args):
    """The dispatcher's argument check against the registered schema (positional call, as attention.py does)."""
    params = re.search(r"\((.*)\)\s*->", SCHEMAS[name]).group(1).split(", ")
    check(len(args) == len(params), f"{name}() expected {len(params)} arguments, got {len(args)}", "cc:362-367 schema")
    for a, p in zip(args, params):
        typ, pname = p.split(" ")
        ok = (isinstance(a, torch.Tensor) if typ.startswith("Tensor") else
              isinstance(a, (int, float)) and not isinstance(a, bool) if typ == "float" else
              isinstance(a, int) and not isinstance(a, bool))
        check(ok, f"{name}() expected {typ} for argument '{pname}' but got {type(a).__name__}", "cc:362-367 schema")


def set_split_kv(batch, num_heads_q, seq_len_kv, page_size):
    """cpp:60-93, line for line (C++ int division truncates; all values here are >= 0)."""
    base_parallel = int(batch * num_heads_q)
    total_pages = (int(seq_len_kv) + int(page_size) - 1) // int(page_size)
    if page_size <= 16:
        kv_per_split = 256 if base_parallel <= 64 else 128
    elif page_size <= 32:
        kv_per_split = 192 if base_parallel <= 64 else 64
    elif page_size <= 64:
        kv_per_split = 128 if base_parallel <= 64 else 64
    else:
        kv_per_split = int(page_size)
    pages_per_split = max(1, kv_per_split // int(page_size))
    num_splits = max(1, total_pages // pages_per_split)
    num_splits = min(num_splits, total_pages)
    if seq_len_kv > 8192:
        if page_size <= 16:
            min_pages = 64 if base_parallel <= 32 else 16
            num_splits = min(num_splits, max(1, total_pages // min_pages))
        if page_size <= 32 and base_parallel <= 32:
            num_splits = min(num_splits, max(1, total_pages // 32))
    return min(max(num_splits, 1), 128)  # std::clamp(num_splits, 1, 128)


def split_kv_workspace_bytes(batch, num_heads, num_splits, head_size_o=D_LATENT, elem_o_size=2):
    """kern:53-64 SplitKVWorkspaceLayout.total_bytes (o_accum + 2 x lse, each 256-byte aligned)."""
    o_accum = batch * num_heads * num_splits * head_size_o * elem_o_size
    lse = batch * num_heads * num_splits * 4
    up = lambda n: (n + 255) & ~255  # noqa: E731
    return up(o_accum) + 2 * up(lse)


def flash_mla_get_workspace_size(max_seq_len, num_batches, num_heads, page_size, num_kv_splits):
    """cpp:192-223."""
    if num_kv_splits < 1:
        check(num_heads > 0, "num_heads must be > 0 when num_kv_splits is auto-selected", "cpp:195")
        check(page_size in PAGE_SIZES, f"Unsupported page size: {page_size}", "cpp:196-199")
        num_kv_splits = set_split_kv(num_batches, num_heads, max_seq_len, page_size)  # cpp:200
    if num_kv_splits == 1:
        return 0  # cpp:202-203
    check(page_size in PAGE_SIZES, f"Unsupported page size: {page_size}", "cpp:205-220")
    # cpp:207-217 MlaXe<half_t, ..., EnabledSplitKV<true>>: run:132-141 = kern:497-505 + reduction 0 (red:144)
    return split_kv_workspace_bytes(num_batches, num_heads, num_kv_splits, D_LATENT, 2)


def _check_input(name, t):
    # utils:16-18 CHECK_INPUT = CHECK_DEVICE (utils:10, is_xpu) + CHECK_CONTIGUOUS (utils:13)
    check(t.device.type == DEVICE, f"{name} must be on XPU", "cpp:145-151 CHECK_INPUT, utils:10")
    check(t.is_contiguous(), f"{name} must be contiguous", "cpp:145-151 CHECK_INPUT, utils:13")


def flash_mla_decode(out, q_nope, q_pe, kv_c_and_k_pe_cache, seq_lens, page_table, workspace, sm_scale,
                     num_kv_splits):
    """cpp:135-175, then types:349-387 (runMla) and the kernel (kern:520-631 split, kern:225-340 not)."""
    for name, t in (("out", out), ("q_nope", q_nope), ("q_pe", q_pe), ("kv_c_and_k_pe_cache", kv_c_and_k_pe_cache),
                    ("seq_lens", seq_lens), ("page_table", page_table), ("workspace", workspace)):
        _check_input(name, t)
    kv = kv_c_and_k_pe_cache
    page_size = kv.size(1)  # cpp:153
    in_dtype = q_nope.dtype  # cpp:157
    check(in_dtype in (torch.float16, torch.bfloat16), "Unsupported input data type for MLA decode", "cpp:159-161")
    check(page_size in PAGE_SIZES, f"Unsupported page size for MLA decode: {page_size}. Supported: 16, 32, 64, 128",
          "cpp:162-166")
    batch, heads, d_latent = q_nope.shape  # types:213-215
    width = page_table.size(1)  # types:219
    if num_kv_splits < 1:  # cpp:168-172: auto from the table's capacity, not from seq_lens
        num_kv_splits = set_split_kv(batch, heads, page_size * width, page_size)
    check(num_kv_splits >= 1, f"num_kv_splits must be resolved before calling runMla, got {num_kv_splits}",
          "types:360")
    if num_kv_splits > 1:
        need = split_kv_workspace_bytes(batch, heads, num_kv_splits, d_latent, q_nope.element_size())
        check(workspace.numel() >= need,
              f"MLA workspace too small: need {need} bytes for num_kv_splits={num_kv_splits}, but got "
              f"{workspace.numel()} bytes", "types:362-378")
    record("sgl_kernel", "flash_mla_decode", page=page_size, width=width, splits=num_kv_splits, heads=heads,
           dtype=in_dtype)
    # the kernel reads these through raw pointers: types:288 (const int* seq_lens), types:318 (const int* table);
    # the Python wrapper asserted int32 (attention.py:108-113)
    lens = seq_lens.tolist()
    flat = page_table.reshape(-1)  # ml:216: ptr_page_table[batch_coord * num_pages_per_batch + logical_page_idx]
    total_page = kv.size(0)  # types:221
    rows_all = kv.reshape(total_page, page_size, -1).float()
    qn, qp = q_nope.float(), q_pe.float()
    res = torch.empty(batch, heads, d_latent, dtype=torch.float32)
    for b in range(batch):
        seq_len = int(lens[b])  # kern:265/544: p.seq_lens[batch_coord]
        check(seq_len >= 0, f"seq_lens[{b}] = {seq_len} < 0 (not modelled)", "model limit")
        total_blk = -(-seq_len // page_size)  # kern:266/545, one page per K tile (types:108, 112)
        idx = [b * width + i for i in range(total_blk)]
        # no bound check in the vendor (ml:211-219): a length beyond the row reads the next row's entries
        # (modelled); beyond the whole table, or a page id out of range, is an out-of-bounds read
        check(all(i < flat.numel() for i in idx), f"seq_lens[{b}] = {seq_len} reads past the page table "
              "(out-of-bounds device read)", "ml:216-217 (no bound check)")
        phys = flat[idx].long() if idx else flat.new_zeros(0).long()
        check(bool(((phys >= 0) & (phys < total_page)).all()), f"page id out of [0, {total_page}) in row {b} "
              "(out-of-bounds device read)", "ml:217, kern:299-302 (no bound check)")
        rows = rows_all[phys].reshape(-1, rows_all.shape[-1])[:seq_len]  # ml:428-435 masks k >= seq_len_kv
        # Score = Q_nope @ KV^T + Q_pe @ K_pe^T; K_pe = cache + 512 (types:283); V = the first 512 (kern:309)
        s = (torch.einsum("hd,kd->hk", qn[b], rows[:, :d_latent]) +
             torch.einsum("hd,kd->hk", qp[b], rows[:, d_latent:])) * float(sm_scale)
        v = rows[:, :d_latent]
        if num_kv_splits == 1:  # epi:160-163 / 226-235: normalised in place; 1/0 -> NaN for an empty row
            m = s.max(dim=1, keepdim=True).values if seq_len else torch.zeros(heads, 1)
            e = torch.exp(s - m)
            res[b] = (e @ v) / e.sum(dim=1, keepdim=True)
            continue
        per = -(-total_blk // num_kv_splits)  # kern:548-550
        num = torch.zeros(heads, d_latent)
        den = torch.zeros(heads, 1)
        parts = []
        for sp in range(num_kv_splits):
            start, end = sp * per, min(sp * per + per, total_blk)
            if start >= end:
                continue  # kern:555-561 empty split: exp_sum 0 (skipped by red:224)
            lo, hi = start * page_size, min(end * page_size, seq_len)
            ss = s[:, lo:hi]
            m_s = ss.max(dim=1, keepdim=True).values
            e = torch.exp(ss - m_s)
            # epi:219-224: O_accum stored UNNORMALISED in ElementO (q's type, types:123); sums/max fp32 (epi:67)
            parts.append(((e @ v[lo:hi]).to(in_dtype).float(), e.sum(dim=1, keepdim=True), m_s))
        if parts:
            g = torch.stack([p[2] for p in parts]).max(dim=0).values  # red:198-213 global max
            for o_s, sum_s, m_s in parts:  # red:215-235
                r = torch.exp(m_s - g)
                num += o_s * r
                den += sum_s * r
        res[b] = num / den  # red:237-238 (0/0 -> NaN when every split is empty)
    out.copy_(res.to(out.dtype))


class _Overload:
    """Stands for ``torch.ops.sgl_kernel.<name>`` (an OpOverloadPacket) with its ``.default`` overload."""

    def __init__(self, name, fn):
        self._name, self._fn = name, fn
        self.default = self

    def __call__(self, *args):
        _check_schema(self._name, args)
        return self._fn(*args)


_IMPLS = {"flash_mla_decode": flash_mla_decode, "flash_mla_get_workspace_size": flash_mla_get_workspace_size}


def register():
    """Install (USE_MLA) or remove (not USE_MLA) the MLA ops on ``torch.ops.sgl_kernel``, as loading the
    native extension of such a build would (cc:361-390)."""
    ns = torch.ops.sgl_kernel
    for name in MLA_OPS:
        if USE_MLA:
            setattr(ns, name, _Overload(name, _IMPLS[name]))
        elif name in ns.__dict__:
            delattr(ns, name)


register()
