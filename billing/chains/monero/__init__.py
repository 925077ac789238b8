"""The Monero family: XMR to subaddresses (0, i) of one view-only wallet.

    keys       the primary address and private view key, subaddresses derived offline
    uri        monero: payment URIs
    family     what the family knows about its destinations (subaddresses, URIs, settings)
    rpc        monero-wallet-rpc and monerod over JSON-RPC (the `monero` package's backends)
    watcher    the watcher: the wallet's incoming transfers into billing

Only `family` and `watcher` touch Django; this module stays importable before
Django is set up (config/settings.py reads `CHAINS` for the beat schedule).
"""

from billing.chains.spec import ChainSpec, Currency

CURRENCIES = (
    Currency(
        "XMR",
        "Monero",
        12,
        "monero",
        "piconero",
        confirmations=10,
        rate_symbols={"kraken": ("XMRUSD", "XXMRZUSD"), "coingecko": ("monero",)},
        colour="#ff6600",
    ),
)

CHAINS = (ChainSpec("monero", ("XMR",), "XMR_WALLET_RPC_URL", ("XMR_ADDRESS", "XMR_VIEW_KEY")),)

# The sandbox `make run` starts for this family: a development module, named, never imported here.
SANDBOX = "devtools.monero_sandbox"
