from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing.currencies import CURRENCIES
from billing.services import payment_record_manual
from core.errors import DomainError


class Command(BaseCommand):
    help = (
        "Record a payment staff verified by hand. It goes through the same state machine as a "
        "watcher's sighting; running it again with the same txid updates the confirmations."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("invoice_number")
        parser.add_argument("--txid", required=True)
        parser.add_argument("--amount", required=True, type=int, help="Base units (satoshi, wei, piconero, ...).")
        parser.add_argument("--confirmations", required=True, type=int)
        parser.add_argument("--reason", required=True)
        parser.add_argument(
            "--index", type=int, default=0, help="Output or log index; the subaddress index for XMR (default 0)."
        )
        parser.add_argument("--currency", choices=list(CURRENCIES), help="Defaults to the invoice's active currency.")
        parser.add_argument("--staff", default="", help="Username recorded as the actor.")

    def handle(self, *args: Any, **o: Any) -> None:
        from django.contrib.auth import get_user_model

        actor = None
        if o["staff"]:
            actor = get_user_model().objects.filter(username=o["staff"].lower(), is_staff=True).first()
            if actor is None:
                raise CommandError(f"No staff account {o['staff']!r}.")
        try:
            payment = payment_record_manual(
                invoice_number=o["invoice_number"],
                txid=o["txid"],
                amount=o["amount"],
                confirmations=o["confirmations"],
                reason=o["reason"],
                actor=actor or "command line",
                output_index=o["index"],
                currency=o["currency"],
            )
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        payment.invoice.refresh_from_db()
        inv = payment.invoice
        self.stdout.write(
            f"Recorded {payment.currency} {payment.txid}:{payment.position} "
            f"({payment.amount} base units, {payment.confirmations} confirmations, {payment.status}). "
            f"Invoice {inv.number} is {inv.status} ({inv.exception})."
        )
