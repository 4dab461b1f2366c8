"""SGLang objects the in-process tests build the way SGLang's scheduler would."""

import torch


def forward_batch(mode, req_idx, seq_lens, out_loc, extend_lens=None, prefix_lens=None):
    """A real ForwardBatch: requests ``req_idx`` with total lengths ``seq_lens`` (prefix + new),
    new tokens written at ``out_loc``; extend batches also carry ``extend_lens``/``prefix_lens``."""
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch

    kw = {}
    if extend_lens is not None:
        kw = dict(
            extend_seq_lens=torch.tensor(extend_lens, dtype=torch.int32),
            extend_seq_lens_cpu=list(extend_lens),
            extend_prefix_lens_cpu=list(prefix_lens),
            extend_num_tokens=sum(extend_lens),
            extend_prefix_lens=torch.tensor(prefix_lens, dtype=torch.int32),
        )
    return ForwardBatch(
        forward_mode=mode,
        batch_size=len(seq_lens),
        input_ids=torch.zeros(out_loc.shape[0], dtype=torch.long),
        req_pool_indices=torch.tensor(req_idx),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        out_cache_loc=out_loc,
        seq_lens_sum=sum(seq_lens),
        seq_lens_cpu=torch.tensor(seq_lens, dtype=torch.int32),
        **kw,
    )
