"""Vendor kernel providers (Intel XPU libraries). Each imports its library lazily.

None of these was run on Intel hardware here: each is tested against a strict model of its vendor
(tests/fakes/, every rule citing the vendor's source line; docs/xpu_vendors.md) and the naive oracle.
"""
