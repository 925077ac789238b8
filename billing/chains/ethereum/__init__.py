"""The Ethereum family: ETH, USDT and USDC on one EVM chain, read through web3.py.

    rpc        JSON-RPC over HTTP (web3.py's HTTPProvider), batches, errors
    abi        the ERC-20 and Multicall3 pieces the watcher speaks
    transfers  what a block carries for us: `Transfer`, `EvmBlockScan`
    traces     internal transfers out of `trace_block` / `debug_traceBlockByNumber`
    tokens     ERC-20 `Transfer` logs over block ranges, split when refused
    balances   the balance-check mode, for nodes without a trace API
    scanner    `EvmScanner`: the node checks and `blocks_read`
    keys       the account key at m/44'/60'/0' and its addresses, EIP-55 addresses
    uri        EIP-681 payment URIs (ether, ERC-20 transfers)
    family     what the family knows about its destinations (addresses, URIs, settings)
    watcher    the watcher: the scanner's findings into billing, block by block

Only `family` and `watcher` touch Django; this module stays importable before
Django is set up (config/settings.py reads `CHAINS` for the beat schedule).
"""

from billing.chains.spec import ChainSpec, Currency

CURRENCIES = (
    Currency(
        "ETH",
        "Ether",
        18,
        "ethereum",
        "wei",
        confirmations=12,
        rate_symbols={"kraken": ("ETHUSD", "XETHZUSD"), "coingecko": ("ethereum",)},
        colour="#627eea",
    ),
    Currency(
        "USDT",
        "Tether USD (ERC-20)",
        6,
        "ethereum",
        "token unit",
        confirmations=12,
        rate_symbols={"kraken": ("USDTUSD", "USDTZUSD"), "coingecko": ("tether",)},
        colour="#26a17b",
        stable=True,
    ),
    Currency(
        "USDC",
        "USD Coin (ERC-20)",
        6,
        "ethereum",
        "token unit",
        confirmations=12,
        rate_symbols={"kraken": ("USDCUSD", "USDCUSD"), "coingecko": ("usd-coin",)},
        colour="#2775ca",
        stable=True,
    ),
)

CHAINS = (ChainSpec("ethereum", ("ETH", "USDT", "USDC"), "ETH_RPC_URL", ("ETH_XPUB",)),)

# The sandbox `make run` starts for this family: a development module, named, never imported here.
SANDBOX = "devtools.ethereum_sandbox"
