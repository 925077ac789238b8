"""A chain family of the test's own, TOY, as a package would declare it (copied
into a temporary folder as toyfam/__init__.py): nothing in billing names it."""

from billing.chains.spec import ChainSpec, Currency

CURRENCIES = (
    Currency(
        "TOY",
        "Toycoin",
        6,
        "toychain",
        "toy unit",
        confirmations=3,
        rate_symbols={"kraken": ("TOYUSD", "XTOYZUSD"), "coingecko": ("toycoin",)},
        colour="#123456",
    ),
)
CHAINS = (ChainSpec("toychain", ("TOY",), "TOY_RPC_URL", ("TOY_SEED",)),)
# Its sandbox, named as the families name theirs in devtools (here the test's own module).
SANDBOX = "toyfam.sandbox"
