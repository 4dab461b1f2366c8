# Written by tests/gpu/vllm_stub/regen.py: the vLLM release the verbatim parts were copied from.
RELEASE = "0.33.0"
