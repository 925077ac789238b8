"""Development tools: local chain nodes, the sandbox of `make run`. Never imported by production code."""
