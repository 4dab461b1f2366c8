"""Engine-neutral types of the core: what a layer is (LayerSpec), what an engine knows of a step (StepInputs,
SpecDecodeShape) and what a step runs (StepPlan). The kernel-facing types are kernels/api/types.py's."""

from __future__ import annotations

import dataclasses
import enum
from typing import Callable, Optional, Union

import torch

from ..kernels.api import (  # PagedStep: the step tensors of one call, one type from core to kernel
    FLOAT_DTYPES,
    KV_DTYPES,
    KVLayout,
    PagedStep,
    check_dims,
    check_heads,
    check_scale,
    check_softcap,
)


class AttentionKind(str, enum.Enum):
    DECODER = "decoder"  # causal self-attention over the paged cache
    ENCODER = "encoder"  # bidirectional self-attention of an encoder-decoder's encoder
    ENCODER_ONLY = "encoder_only"  # bidirectional (BERT-style), still through the paged cache
    CROSS = "cross"  # decoder queries over the encoder's keys, non-causal

    @property
    def causal(self) -> bool:
        return self is AttentionKind.DECODER


class Mode(str, enum.Enum):
    DECODE = "decode"  # one query per sequence
    PREFILL = "prefill"  # only new sequences (no cached prefix)
    EXTEND = "extend"  # new tokens on cached prefixes (prefix caching / chunked prefill)
    MIXED = "mixed"  # decode and extend rows in one batch
    TARGET_VERIFY = "target_verify"  # speculative decoding: draft tokens checked by the target
    DRAFT_DECODE = "draft_decode"  # speculative decoding: the draft model's decode steps

    @property
    def is_decode(self) -> bool:
        return self in (Mode.DECODE, Mode.DRAFT_DECODE)


@dataclasses.dataclass(frozen=True)
class MLADims:
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2) dimensions of one layer.

    The cache holds one latent row per token: ``[pages, page, 1, kv_lora_rank + qk_rope_head_dim]``
    (the compressed KV ``c_KV`` then the decoupled RoPE key ``k_R``). Attention over it runs in the
    absorbed form (DeepSeek-V2 paper, appendix C): queries ``[q_nope W_UK | q_rope]`` of width
    ``latent_dim`` against every cached row, values = the row's first ``kv_lora_rank`` columns; the
    engine applies ``W_UV`` to the ``[T, H, kv_lora_rank]`` output. Scale: the engine's, from
    ``qk_head_dim`` = qk_nope_head_dim + qk_rope_head_dim.
    """

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int

    def __post_init__(self) -> None:
        for name in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            if getattr(self, name) <= 0:
                raise ValueError(f"MLA {name} must be positive, got {getattr(self, name)}")

    @property
    def latent_dim(self) -> int:
        """Width of a cache row and of an absorbed query: kv_lora_rank + qk_rope_head_dim."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclasses.dataclass(frozen=True)
class LayerSpec:
    """Static description of one attention layer, as the engine configured it.

    ``window_left`` uses FlashAttention's convention: a query sees itself and the
    ``window_left`` keys before it (-1 = unbounded). Engines translate their own convention.
    """

    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    scale: float
    v_head_dim: Optional[int] = None
    kind: AttentionKind = AttentionKind.DECODER
    window_left: int = -1
    softcap: float = 0.0
    has_sinks: bool = False
    alibi_slopes: Optional[tuple[float, ...]] = None
    local_attention: bool = False  # Llama-4 iRoPE chunked attention layer
    uses_swa_pool: bool = False  # hybrid SWA models: this layer's KV lives in the SWA pool
    dtype: torch.dtype = torch.bfloat16
    kv_dtype: torch.dtype = torch.bfloat16
    batch_invariant: bool = False  # outputs bitwise independent of the batch and of prefill chunking
    mla: Optional[MLADims] = None  # an MLA layer: heads/dims below describe its absorbed latent attention
    kv_layout: KVLayout = KVLayout.NHD  # how the engine allocates this layer's cache pages

    @staticmethod
    def for_mla(num_q_heads: int, dims: MLADims, scale: float, **kw) -> "LayerSpec":
        """An MLA layer: absorbed attention is MQA over the latent rows (Hkv 1, D latent_dim, Dv kv_lora_rank)."""
        return LayerSpec(
            num_q_heads=num_q_heads,
            num_kv_heads=1,
            head_dim=dims.latent_dim,
            scale=scale,
            v_head_dim=dims.kv_lora_rank,
            mla=dims,
            **kw,
        )

    def __post_init__(self) -> None:
        check_heads(self.num_q_heads, self.num_kv_heads)  # the kernels' check (LayerConsts.make), the same words
        check_dims(self.head_dim, self.v_head_dim)
        check_scale(self.scale)
        check_softcap(self.softcap)
        if not isinstance(self.kind, AttentionKind):
            raise TypeError(f"kind must be an AttentionKind, got {self.kind!r}")
        if self.dtype not in FLOAT_DTYPES:
            raise TypeError(f"dtype {self.dtype} unsupported: use one of float32, float16, bfloat16")
        if self.kv_dtype not in KV_DTYPES:
            raise TypeError(f"kv_dtype {self.kv_dtype} unsupported: use the model dtype or float8_e4m3fn/float8_e5m2")
        if not isinstance(self.kv_layout, KVLayout):
            raise TypeError(f"kv_layout must be a KVLayout (NHD or HND), got {self.kv_layout!r}")
        if self.window_left < -1:
            raise ValueError(f"window_left must be >= -1 (-1 = no sliding window), got {self.window_left}")
        if self.softcap < 0:
            raise ValueError(f"logit softcap must be >= 0, got {self.softcap}")
        if self.alibi_slopes is not None and len(self.alibi_slopes) != self.num_q_heads:
            raise ValueError(f"alibi_slopes has {len(self.alibi_slopes)} entries for {self.num_q_heads} query heads")
        if self.kind is AttentionKind.CROSS and self.window_left >= 0:
            raise ValueError("sliding window is undefined for cross-attention layers")
        if self.mla is not None:
            m = self.mla
            if (self.num_kv_heads, self.head_dim, self.v_head_dim) != (1, m.latent_dim, m.kv_lora_rank):
                raise ValueError(
                    f"an MLA layer attends over one latent row per token: num_kv_heads 1, head_dim "
                    f"{m.latent_dim} (kv_lora_rank + qk_rope_head_dim), v_head_dim {m.kv_lora_rank}; got "
                    f"{self.num_kv_heads}, {self.head_dim}, {self.v_head_dim} (use LayerSpec.for_mla)"
                )
            if self.kind is not AttentionKind.DECODER or self.alibi_slopes is not None or self.has_sinks:
                raise ValueError("MLA layers are causal decoder layers without ALiBi or sinks")

    @property
    def causal(self) -> bool:
        return self.kind.causal

    @property
    def window(self) -> tuple[int, int]:
        if self.window_left < 0:
            return (-1, -1)
        return (self.window_left, 0 if self.causal else self.window_left)


@dataclasses.dataclass
class StepPlan:
    """Everything the layers of one forward step share (built once, FlashInfer's plan()).

    ``main``: the self-attention call. Optional sub-plans:
      ``local``: iRoPE virtual batches for local-attention layers;
      ``encoder``: keys = encoder tokens, for cross-attention layers;
      ``swa_page_table``: ``main.page_table`` translated into the SWA pool's pages;
      ``local_swa_page_table``: ``local.page_table`` translated likewise (local layers in the SWA pool);
      ``spec_expand``: the per-draft-token part of a top-k > 1 verify/draft step (page size 1),
        merged with ``main`` by cascade (merge_state).
    """

    mode: Mode
    main: PagedStep
    num_tokens: int
    local: Optional[PagedStep] = None
    encoder: Optional[PagedStep] = None
    swa_page_table: Optional[torch.Tensor] = None
    local_swa_page_table: Optional[torch.Tensor] = None
    spec_expand: Optional[PagedStep] = None
    # per-step kernel launches, built by the first layer that needs one and shared by the rest
    # (FlashInfer's plan(): every later layer of the step only runs)
    launches: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)


SwaMapping = Union[torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]


@dataclasses.dataclass(frozen=True)
class SpecDecodeShape:
    """The speculative-decoding shape of a step (EAGLE / n-gram), fixed by the engine's config.

    ``topk``: branches per draft step (1 = a chain); ``num_draft``: draft tokens verified per
    request in a target-verify step; ``num_steps``: draft decode steps; ``step_id``: which draft
    decode step this is (0-based).
    """

    topk: int = 1
    num_draft: int = 0
    num_steps: int = 0
    step_id: int = 0


@dataclasses.dataclass
class StepInputs:
    """What an engine knows about one step, in core terms. Device tensors unless noted.

    ``seq_lens`` int [B]: keys per sequence, committed prefix plus this step's new tokens; for
      ``TARGET_VERIFY`` and ``DRAFT_DECODE`` the committed tokens *without* the drafts (the plan
      adds them as the spec shape says).
    ``max_seqlen_k`` (host int): an upper bound of ``seq_lens`` (graph capture: a static bound).
    Queries: ``query_lens`` int [B] or ``cu_seqlens_q`` int32 [B+1] for PREFILL/EXTEND/MIXED
      (decode and speculative modes derive them); ``max_seqlen_q`` host int.
    Keys' location: ``page_table`` int32 [B, >= cdiv(max_k, page)] page ids (vLLM), or
      ``token_table`` int [B, >= max_k] slot per token (SGLang's req_to_token rows); with
      ``token_rows`` int [B] the table is the whole pool [rows, >= max_k] and ``token_rows`` says which
      row each request uses (SGLang's req_pool_indices): only each page's first slot is gathered.
    ``swa_mapping``: full-pool slot -> SWA-pool slot (tensor or function) for hybrid SWA pools
      (needs ``token_table``); ``attention_chunk_size``: Llama-4 local-attention chunk.
    ``encoder_lens`` int [B] + ``max_encoder_len``: encoder-decoder models. With a token table
      each row holds the encoder's tokens first, then the decoder's; with a page table,
      ``encoder_page_table`` holds the encoder's pages.
    ``custom_mask`` bool: the tree mask of a top-k > 1 verify (SGLang's flattened layout);
    ``draft_slots`` int [B * topk * num_steps]: the draft tokens' slots of a top-k > 1 draft decode.
    """

    mode: Mode
    seq_lens: torch.Tensor
    max_seqlen_k: int
    num_tokens: int
    page_size: int
    query_lens: Optional[torch.Tensor] = None
    cu_seqlens_q: Optional[torch.Tensor] = None
    max_seqlen_q: int = 1
    page_table: Optional[torch.Tensor] = None
    token_table: Optional[torch.Tensor] = None
    token_rows: Optional[torch.Tensor] = None
    swa_mapping: Optional[SwaMapping] = None
    attention_chunk_size: Optional[int] = None
    encoder_lens: Optional[torch.Tensor] = None
    max_encoder_len: int = 0
    encoder_page_table: Optional[torch.Tensor] = None
    spec: SpecDecodeShape = SpecDecodeShape()
    custom_mask: Optional[torch.Tensor] = None
    draft_slots: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        # O(1) shape/type checks naming the argument (no values read: no host sync)
        if not isinstance(self.mode, Mode):
            try:
                self.mode = Mode(self.mode)  # Mode is a str enum: its value strings name the same modes
            except ValueError:
                raise ValueError(
                    f"mode must be a Mode ({', '.join(m.value for m in Mode)}), got {self.mode!r}"
                ) from None
        if isinstance(self.page_size, bool) or not isinstance(self.page_size, int) or self.page_size < 1:
            raise ValueError(f"page_size must be an int >= 1, got {self.page_size!r}")
        if not isinstance(self.seq_lens, torch.Tensor) or self.seq_lens.dim() != 1:
            raise ValueError(
                "seq_lens must be an int tensor [batch], got "
                f"{list(self.seq_lens.shape) if isinstance(self.seq_lens, torch.Tensor) else type(self.seq_lens).__name__}"  # noqa: E501
            )
        if self.seq_lens.device.type == "cpu" and self.seq_lens.numel() and int(self.seq_lens.min()) < 0:
            # host memory: reading it costs no device sync (a device tensor's values are the kernels' to check)
            b = int(torch.nonzero(self.seq_lens < 0)[0, 0])
            raise ValueError(f"seq_lens must be >= 0 (keys per sequence), got seq_lens[{b}]={int(self.seq_lens[b])}")
        bs = self.seq_lens.shape[0]
        if self.query_lens is not None and self.query_lens.shape != (bs,):
            raise ValueError(f"seq_lens [{bs}] and query_lens {list(self.query_lens.shape)} disagree on the batch size")
        if self.cu_seqlens_q is not None and self.cu_seqlens_q.shape != (bs + 1,):
            raise ValueError(
                f"seq_lens [{bs}] and cu_seqlens_q {list(self.cu_seqlens_q.shape)} disagree on the batch "
                f"size (cu_seqlens_q must be [batch + 1]=[{bs + 1}])"
            )
        if int(self.max_seqlen_k) < 0 or int(self.max_seqlen_q) < 0 or int(self.num_tokens) < 0:
            raise ValueError(
                f"max_seqlen_k ({self.max_seqlen_k}), max_seqlen_q ({self.max_seqlen_q}) and num_tokens "
                f"({self.num_tokens}) must be >= 0"
            )
