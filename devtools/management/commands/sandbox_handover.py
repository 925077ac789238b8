from django.core.management.base import BaseCommand, CommandError

from core.errors import DomainError
from devtools.sandbox import sandbox_rental_hand_over


class Command(BaseCommand):
    help = (
        "Sandbox only (make run): stand in for the provisioning system and hand a provisioning rental over "
        "(what POST /api/v1/ops/rentals/{id}/ready does), with documentation addresses. Its first paid "
        "period starts now."
    )

    def add_arguments(self, parser):
        parser.add_argument("rental_id", type=int)

    def handle(self, *args, **o):
        try:
            rental = sandbox_rental_hand_over(rental_id=o["rental_id"])
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from exc
        self.stdout.write(
            f"Rental {rental.pk} is {rental.status}: {rental.ipv4}, {rental.ipv6_prefix}, paid until "
            f"{rental.paid_until:%Y-%m-%d %H:%M} UTC."
        )
