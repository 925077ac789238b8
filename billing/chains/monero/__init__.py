"""The Monero family: XMR to subaddresses (0, i) of one wallet.

    family     what the family knows about its destinations (subaddresses, URIs, settings)

No watcher yet: XMR payments are recorded by staff. Only `family` touches
Django; this module stays importable before Django is set up
(config/settings.py reads `CHAINS` for the beat schedule).
"""

CHAINS = ()
