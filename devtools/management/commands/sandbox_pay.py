from django.core.management.base import BaseCommand, CommandError

from billing.currencies import CURRENCIES
from billing.models import Invoice
from billing.serializers import checkout_url
from core.errors import DomainError
from devtools.sandbox import sandbox_invoice_pay


class Command(BaseCommand):
    help = (
        "Sandbox only (make run with litecoind installed): pay an invoice's LTC address from the "
        "regtest node's wallet; with --confirm, also mine the blocks the confirmation policy wants."
    )

    def add_arguments(self, parser):
        parser.add_argument("invoice_number")
        parser.add_argument(
            "--amount", type=int, default=None, help="Litoshi (1e-8 LTC); default: what is still due on the invoice."
        )
        parser.add_argument("--confirm", action="store_true", help="Mine the blocks that settle it.")

    def handle(self, *args, **o):
        try:
            paid = sandbox_invoice_pay(invoice_number=o["invoice_number"], amount=o["amount"], confirm=o["confirm"])
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        coins = CURRENCIES["LTC"].coins_str(paid.amount)
        self.stdout.write(f"Paid {coins} LTC ({paid.amount} litoshi) to {paid.address}: {paid.txid}")
        if paid.blocks_mined:
            self.stdout.write(f"Mined {paid.blocks_mined} block(s).")
        self.stdout.write(paid.scan.summary())
        invoice = Invoice.objects.get(number=paid.invoice_number)
        self.stdout.write(f"Its checkout page shows it: {checkout_url(invoice)}")
        self.stdout.write(f"Invoice {paid.invoice_number} is {paid.status} ({paid.exception}).")
