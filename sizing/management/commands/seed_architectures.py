from django.core.management.base import BaseCommand

from sizing.seed import architectures_seed


class Command(BaseCommand):
    help = "Load the published LLM architectures. Idempotent: creates what is missing, never overwrites staff edits."

    def handle(self, *args, **opts):
        created = architectures_seed()
        self.stdout.write(f"Architectures loaded: {created} new." if created else "Architectures already loaded.")
