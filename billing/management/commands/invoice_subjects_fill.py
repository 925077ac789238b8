from typing import Any

from django.core.management.base import BaseCommand

from billing.services import invoice_subjects_fill


class Command(BaseCommand):
    help = (
        "After an upgrade from the release before the Payable port, once its processes are stopped: "
        "fill what the invoices they wrote pay for (subject_kind, subject_id) from their subject string. "
        "Touches only invoices whose kind is empty; safe to run again."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"Filled {invoice_subjects_fill()} invoice(s).")
