from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from sizing.services import accuracy_document, accuracy_table, sizing_accuracy


class Command(BaseCommand):
    help = (
        "Compare the sizing speed model with every published benchmark in sizing/data/published_benchmarks.json; "
        "print the table, or write it into a document between its sizing-accuracy markers."
    )

    def add_arguments(self, parser):
        parser.add_argument("--write", metavar="PATH", help="Replace the table in this file (e.g. docs/sizing.md).")

    def handle(self, *args, **opts):
        rows = sizing_accuracy()
        table = accuracy_table(rows)
        if not opts["write"]:
            self.stdout.write(table)
        else:
            path = Path(opts["write"])
            try:
                path.write_text(accuracy_document(path.read_text(), table))
            except ValueError as exc:
                raise CommandError(f"{path} has no sizing-accuracy markers.") from exc
            self.stdout.write(f"Wrote the accuracy table into {path}.")
        outside = [r for r in rows if r.inside is False]
        if outside:
            raise CommandError(f"{len(outside)} rows are outside their band.")
