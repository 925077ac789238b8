"""The Ethereum family: ETH, USDT and USDC on one EVM chain, read through web3.py.

    rpc        JSON-RPC over HTTP (web3.py's HTTPProvider), batches, errors
    abi        the ERC-20 and Multicall3 pieces the watcher speaks
    transfers  what a block carries for us: `Transfer`, `EvmBlockScan`
    traces     internal transfers out of `trace_block` / `debug_traceBlockByNumber`
    tokens     ERC-20 `Transfer` logs over block ranges, split when refused
    balances   the balance-check mode, for nodes without a trace API
    scanner    `EvmScanner`: the node checks and `blocks_read`

Nothing in this package touches the database; the watcher does.
"""
