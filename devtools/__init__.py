"""Development and test tooling: regtest and anvil nodes, the sandbox of `make run`,
`serve_local` and `sandbox_pay`.

A Django app so its management commands work; installed only when DEBUG is on
(config.settings) and in the test settings. Production code never imports it,
and production settings refuse to start with it installed (core.apps).
"""
