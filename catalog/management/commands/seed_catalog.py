from django.core.management.base import BaseCommand

from catalog.seed import catalog_seed


class Command(BaseCommand):
    help = "Load the published catalog. Idempotent: creates what is missing, never overwrites staff edits."

    def handle(self, *args, **opts):
        report = catalog_seed()
        if report.total:
            made = ", ".join(f"{n} {kind}" for kind, n in report.created.items() if n)
            self.stdout.write(f"Catalog loaded: {made}.")
        else:
            self.stdout.write("Catalog already loaded; nothing to add.")
