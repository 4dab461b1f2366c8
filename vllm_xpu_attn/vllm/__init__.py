"""vLLM adapter. Importing this package does not import vLLM; its submodules do."""
