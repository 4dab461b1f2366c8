"""Stand-in: the padding constants of vllm/v1/attention/backends/utils.py (0.32.0, lines 51-52)."""

PAD_SLOT_ID = -1  # slot_mapping entry of a padded token: the KV write skips it
NULL_BLOCK_ID = 0  # block-table entry of a padded request row (block 0 is reserved)
