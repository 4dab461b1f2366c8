"""Stand-in for the `vllm` package inside an SGLang environment without vLLM (see ../__init__.py).

SGLang 0.5.23 on a CPU-only machine imports `rotary_embedding` from `vllm._custom_ops` while
constructing rotary embeddings (it never calls it on that path). This stub provides the name
and raises if it is ever called. It is put on PYTHONPATH by the SGLang tests, the main job and CPU serving recipes.
"""
