"""The kernel layer: ``api`` (the contract, registry and oracle every caller imports) and ``providers``
(one package per kernel family, loaded by the registry by name; optional libraries load inside them)."""
