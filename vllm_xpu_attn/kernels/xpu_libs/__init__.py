"""Vendor kernel providers (Intel XPU libraries). Each imports its library lazily.

None of these was run on Intel hardware here: each is tested against a fake module with the
vendor's exact signature (tests/fakes/) that asserts the vendor's requirements.
"""
