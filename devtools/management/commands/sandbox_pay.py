from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from billing.currencies import CURRENCIES
from billing.models import Invoice
from billing.serializers import checkout_url
from core.errors import DomainError
from devtools.sandbox import invoice_not_found, sandbox_off_error, sandbox_off_reasons
from devtools.sandboxes import primary_sandbox, sandbox_of


class Command(BaseCommand):
    help = (
        "Sandbox only (make run): pay an invoice from the sandbox's node: LTC from the regtest node's "
        "wallet (litecoind installed), ETH, USDT or USDC from an anvil dev account (anvil installed), XMR "
        "from the regtest payer wallet (monerod installed), SOL from the sandbox wallet on the loopback "
        "Solana node, as a Solana Pay transfer. With --confirm, also mine the blocks the confirmation policy "
        "wants (SOL: wait until finalized); on an invoice paid in full but not yet confirmed, only those "
        "blocks. Run it with the DATA_DIR `make run` was started with."
    )

    def add_arguments(self, parser):
        parser.add_argument("invoice_number")
        parser.add_argument(
            "--amount",
            type=int,
            default=None,
            help=(
                "Base units (litoshi, wei, token units of 1e-6, piconero or lamports); "
                "default: what is still due on the invoice."
            ),
        )
        parser.add_argument("--confirm", action="store_true", help="Mine the blocks that settle it.")

    def handle(self, *args, **o):
        try:
            if Invoice._meta.db_table not in connection.introspection.table_names():
                # A DATA_DIR (or DATABASE_URL) that `make run` never prepared: say where the sandbox is.
                raise sandbox_off_error(
                    sandbox_off_reasons(chain_settings_ok=True, what="") or ["its database has no tables"],
                    "started by `make run`, which prepares its database",
                )
            invoice = Invoice.objects.filter(number=o["invoice_number"]).first()
            if invoice is None:
                raise invoice_not_found(o["invoice_number"])
            request = invoice.active_request or invoice.requests.order_by("-created_at", "-id").first()
            # The sandbox of the invoice's family pays it; without a request, or in a family
            # without a sandbox, the primary one (LTC) says what is missing.
            sandbox = (sandbox_of(request.currency) if request is not None else None) or primary_sandbox()
            paid = sandbox.invoice_pay(invoice_number=invoice.number, amount=o["amount"], confirm=o["confirm"])
            currency = paid.currency
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        coins = CURRENCIES[currency].coins_str(paid.amount)
        unit = CURRENCIES[currency].unit
        unit = f"{unit}s" if unit.endswith(("unit", "lamport")) else unit  # litoshi and wei stay as they are
        if paid.amount:
            self.stdout.write(f"Paid {coins} {currency} ({paid.amount} {unit}) to {paid.address}: {paid.txid}")
        else:
            self.stdout.write(f"Nothing left to pay: {paid.txid} to {paid.address} waits for confirmations.")
        if paid.blocks_mined:
            self.stdout.write(f"Mined {paid.blocks_mined} block(s).")
        self.stdout.write(paid.scan.summary())
        invoice = Invoice.objects.get(number=paid.invoice_number)
        self.stdout.write(f"Its checkout page shows it: {checkout_url(invoice)}")
        self.stdout.write(f"Invoice {paid.invoice_number} is {paid.status} ({paid.exception}).")
