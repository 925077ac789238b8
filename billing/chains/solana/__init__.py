"""The Solana family: SOL by Solana Pay transfer requests, one reference per invoice.

Every SOL invoice asks for a transfer to one recipient address (`SOL_RECIPIENT`)
carrying a fresh `reference` public key. Watching it means, for each open
invoice, listing the transactions that carry its reference
(`getSignaturesForAddress`), fetching them (`getTransaction`) and checking each
the way Solana Pay's own `validateTransfer` does: no error, the reference among
the account keys, the amount the recipient's own balance change.

    keys          the recipient address, fresh references
    uri           Solana Pay transfer requests
    family        what the family knows about its destinations (recipient, references, URIs)
    rpc           the JSON-RPC client (batches, 429 back-off, request pacing)
    transactions  a `getTransaction` answer read into what validation needs, and the validation
    cluster       which cluster a node follows (its genesis hash), and blockhash expiry
    scan          one pass over the references and the recipient, with paging and cursors,
                  producing observations for the billing state machine (no database access)

    watcher       the watcher: a pass's findings into billing (processing at `confirmed`,
                  settled at `finalized`, dropped transactions un-counted), cursors in ChainState

Only `family` and `watcher` touch Django; this module stays importable before
Django is set up (config/settings.py reads `CHAINS` for the beat schedule).
"""

from billing.chains.spec import ChainSpec, Currency

CURRENCIES = (
    # A transaction counts once its commitment is `finalized`: the count is fixed.
    Currency(
        "SOL",
        "Solana",
        9,
        "solana",
        "lamport",
        confirmations=1,
        rate_symbols={"kraken": ("SOLUSD", "SOLUSD"), "coingecko": ("solana",)},
        colour="#9945ff",
        confirmations_setting=False,
    ),
)

CHAINS = (ChainSpec("solana", ("SOL",), "SOL_RPC_URL", ("SOL_RECIPIENT",)),)

# The sandbox `make run` starts for this family: a development module, named, never imported here.
SANDBOX = "devtools.solana_sandbox"
