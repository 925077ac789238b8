"""Billing test helpers: invoices to open on their checkout page."""

from __future__ import annotations

from decimal import Decimal

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519


@pytest.fixture
def checkout_invoice(chains, customer):
    """A factory of invoices like an order's: what they pay for in lines and metadata."""
    from billing import services
    from billing.services import LineSpec

    def make(currency: str | None = "LTC", total: str = "1881.00", **kw):
        total_usd = Decimal(total)
        return services.invoice_create(
            account=customer,
            payable=("test", 0),
            description="2x A100 SXM in DFW-1, 1 month",
            lines=[
                LineSpec(
                    "A100 SXM GPU, per card and month",
                    Decimal(2),
                    Decimal("990.00"),
                    total_usd,
                    discount_usd=Decimal(2) * Decimal("990.00") - total_usd,
                    code="gpu",
                )
            ],
            currency=currency,
            metadata={
                "region": "DFW-1",
                "gpu": "a100-sxm",
                "gpu_name": "A100 SXM",
                "gpu_count": 2,
                "term": "monthly",
                "terms": 1,
            },
            **kw,
        )

    return make


@pytest.fixture
def order_via_api(chains, catalog, customer, customer_api):
    """A factory of orders placed through the API (with an SSH key); returns the 201 body."""
    from accounts.services import ssh_key_add

    line = (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    key = ssh_key_add(account=customer, public_key=line, name="laptop")

    def place(**overrides) -> dict:
        body = {
            "region": "DFW-1",
            "gpu": "a100-sxm",
            "gpu_count": 2,
            "term": "monthly",
            "terms": 1,
            "template": "vllm-0.9-ubuntu-24.04",
            "addons": [],
            "ssh_keys": [key.pk],
            "pay_currency": "LTC",
        } | overrides
        resp = customer_api.post("/api/v1/orders", body, format="json")
        assert resp.status_code == 201, resp.json()
        return resp.json()

    return place
