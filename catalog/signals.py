"""What the catalog tells apps built on it."""

from django.dispatch import Signal

# Sent after seed_catalog has loaded the published catalog, so apps that keep
# their own reference data next to it (sizing's architectures) load theirs.
# Receivers return the number of rows they created.
catalog_seeded = Signal()
