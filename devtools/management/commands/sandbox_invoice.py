from decimal import Decimal, InvalidOperation

from django.core.management.base import BaseCommand, CommandError

from billing.currencies import CURRENCIES
from billing.serializers import checkout_url
from core.errors import DomainError
from devtools.sandbox import SANDBOX_DEMO_USERNAME, sandbox_invoice_issue


class Command(BaseCommand):
    help = (
        "Sandbox only (make run with litecoind installed): an LTC invoice of a demo account to try the "
        "checkout page with (its open one, or a new one); prints its number and checkout page."
    )

    def add_arguments(self, parser):
        parser.add_argument("--usd", default="25.00", help="Amount of a new invoice, in USD (default 25.00).")
        parser.add_argument("--username", default=SANDBOX_DEMO_USERNAME, help="The demo account (made when missing).")

    def handle(self, *args, **o):
        try:
            usd = Decimal(o["usd"])
        except InvalidOperation:
            raise CommandError(f"--usd {o['usd']!r} is not an amount") from None
        try:
            invoice = sandbox_invoice_issue(usd=usd, username=o["username"])
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        request = invoice.active_request
        self.stdout.write(
            f"Invoice {invoice.number}: {CURRENCIES['LTC'].coins_str(int(request.amount_due))} LTC "
            f"({invoice.total_usd} USD) to {request.address}"
        )
        self.stdout.write(f"Checkout page: {checkout_url(invoice)}")
