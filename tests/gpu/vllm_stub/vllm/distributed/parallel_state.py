"""Stand-in: no DCP/PCP groups exist (what vLLM 0.32.0 reports when they are uninitialised)."""


def get_dcp_world_size_and_rank(enabled: bool = True) -> tuple[int, int]:
    return 1, 0


def get_pcp_group():
    raise AssertionError("prefill context parallel group is not initialized")
