"""The Solana family: SOL by Solana Pay transfer requests, one reference per invoice.

    family     what the family knows about its destinations (recipient, references, URIs)

No watcher yet: SOL payments are recorded by staff. Only `family` touches
Django; this module stays importable before Django is set up
(config/settings.py reads `CHAINS` for the beat schedule).
"""

CHAINS = ()
