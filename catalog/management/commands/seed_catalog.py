from django.core.management.base import BaseCommand

from catalog.seed import catalog_seed
from catalog.signals import catalog_seeded


class Command(BaseCommand):
    help = (
        "Load the published catalog (and the sizing architectures). Idempotent: creates what is missing, "
        "never overwrites staff edits."
    )

    def handle(self, *args, **opts):
        report = catalog_seed()
        for receiver, created in catalog_seeded.send(sender=self.__class__):
            report.add(getattr(receiver, "seed_name", receiver.__name__), created or 0)
        if report.total:
            made = ", ".join(f"{n} {kind}" for kind, n in report.created.items() if n)
            self.stdout.write(f"Catalog loaded: {made}.")
        else:
            self.stdout.write("Catalog already loaded; nothing to add.")
