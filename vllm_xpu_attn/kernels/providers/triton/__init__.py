"""Triton kernel provider (optional dependency: triton)."""
