"""The UTXO family: BTC on Bitcoin Core, LTC on Litecoin Core.

    rpc        JSON-RPC client of both nodes
    scanner    blocks and mempool matched against open scripts (no database)
    keys       account keys (xpub/ypub/zpub and their test forms), networks, receive addresses
    uri        BIP21 payment URIs
    family     what the family knows about its destinations (addresses, URIs, settings)
    watcher    the watcher of each chain on the shared block walk, plus the mempool

Only `family` and `watcher` touch Django; this module stays importable before
Django is set up (config/settings.py reads `CHAINS` for the beat schedule).
"""

from billing.chains.spec import ChainSpec, Currency

CURRENCIES = (
    Currency(
        "BTC",
        "Bitcoin",
        8,
        "bitcoin",
        "satoshi",
        confirmations=2,
        rate_symbols={"kraken": ("XBTUSD", "XXBTZUSD"), "coingecko": ("bitcoin",)},
        colour="#f7931a",
    ),
    Currency(
        "LTC",
        "Litecoin",
        8,
        "litecoin",
        "litoshi",
        confirmations=6,
        rate_symbols={"kraken": ("LTCUSD", "XLTCZUSD"), "coingecko": ("litecoin",)},
        colour="#345d9d",
    ),
)

CHAINS = (
    ChainSpec("bitcoin", ("BTC",), "BTC_RPC_URL", ("BTC_XPUB",)),
    ChainSpec("litecoin", ("LTC",), "LTC_RPC_URL", ("LTC_XPUB",)),
)

# The sandbox `make run` starts for this family: a development module, named, never imported here.
SANDBOX = "devtools.sandbox"
