"""Payment URIs: exact coin strings, percent-encoding, the five schemes."""

from __future__ import annotations

from decimal import Decimal
from urllib.parse import parse_qs, unquote, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing.chains import uris
from billing.chains.ethereum import uri as ethereum_uris
from billing.chains.monero import uri as monero_uris
from billing.chains.solana import uri as solana_uris
from billing.chains.utxo import uri as utxo_uris

ADDRESS = "bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu"


@pytest.mark.parametrize(
    "amount,decimals,expected",
    [
        (390000, 8, "0.0039"),
        (100000000, 8, "1"),
        (123456789, 8, "1.23456789"),
        (1, 8, "0.00000001"),
        (1, 18, "0.000000000000000001"),
        (5 * 10**18, 18, "5"),
        (12345678901234567890123, 18, "12345.678901234567890123"),
        (10**30, 18, "1000000000000"),
        (1500000, 6, "1.5"),
        (1, 12, "0.000000000001"),
        (Decimal("390000"), 8, "0.0039"),
    ],
)
def test_coins_str(amount, decimals, expected):
    assert uris.coins_str(amount, decimals) == expected


@given(amount=st.integers(min_value=1, max_value=10**40), decimals=st.sampled_from([6, 8, 9, 12, 18]))
def test_coins_str_is_exact_and_plain(amount, decimals):
    text = uris.coins_str(amount, decimals)
    assert set(text) <= set("0123456789.")
    whole, _, frac = text.partition(".")
    assert int(whole) * 10**decimals + int(frac.ljust(decimals, "0") or "0") == amount  # exact, no context
    assert whole and (whole == "0" or not whole.startswith("0"))
    assert not frac.endswith("0") and len(frac) <= decimals


@pytest.mark.parametrize(
    "bad,error",
    [
        (0, ValueError),
        (-5, ValueError),
        (Decimal("1.5"), ValueError),
        (Decimal("NaN"), ValueError),
        (1.0, TypeError),
        ("100", TypeError),
        (True, TypeError),
    ],
)
def test_amounts_must_be_positive_whole_base_units(bad, error):
    with pytest.raises(error):
        uris.coins_str(bad, 8)
    with pytest.raises(error):
        ethereum_uris.eip681_ether_uri(address="0x" + "11" * 20, chain_id=1, wei=bad)


def test_bip21():
    assert utxo_uris.bip21_uri(scheme="bitcoin", address=ADDRESS, amount=390000, decimals=8) == (
        f"bitcoin:{ADDRESS}?amount=0.0039"
    )
    uri = utxo_uris.bip21_uri(
        scheme="litecoin",
        address="ltc1qexample",
        amount=150000000,
        decimals=8,
        label="GPU Rent Hub",
        message="Invoice GRH-000042 & co=1",
    )
    assert uri == "litecoin:ltc1qexample?amount=1.5&label=GPU%20Rent%20Hub&message=Invoice%20GRH-000042%20%26%20co%3D1"


@given(label=st.text(), message=st.text())
def test_free_text_survives_percent_encoding(label, message):
    uri = utxo_uris.bip21_uri(scheme="bitcoin", address=ADDRESS, amount=1, decimals=8, label=label, message=message)
    parts = urlsplit(uri)
    assert parts.scheme == "bitcoin" and parts.path == ADDRESS
    assert "+" not in parts.query and " " not in uri and "#" not in uri
    query = dict(pair.split("=", 1) for pair in parts.query.split("&"))
    assert query["amount"] == "0.00000001"
    assert unquote(query.get("label", "")) == label
    assert unquote(query.get("message", "")) == message


def test_eip681():
    to = "0x9858EfFD232B4033E47d90003D41EC34EcaEda94"
    assert ethereum_uris.eip681_ether_uri(address=to, chain_id=1, wei=2014 * 10**15) == (
        f"ethereum:{to}@1?value=2014000000000000000"
    )
    usdt = "0xdAC17F958D2ee523a2206206994597C13D831ec7"
    assert ethereum_uris.eip681_token_transfer_uri(token=usdt, chain_id=11155111, recipient=to, units=12168000000) == (
        f"ethereum:{usdt}@11155111/transfer?address={to}&uint256=12168000000"
    )


def test_monero_uri():
    address = "4" + "A" * 94
    uri = monero_uris.monero_uri(address=address, amount=1234500000000, label="GPU Rent Hub", message="Invoice 7")
    assert uri == f"monero:{address}?tx_amount=1.2345&recipient_name=GPU%20Rent%20Hub&tx_description=Invoice%207"
    assert monero_uris.monero_uri(address=address, amount=1) == f"monero:{address}?tx_amount=0.000000000001"


def test_solana_pay_uri():
    recipient = "mvines9iiHiQTysrwkJjGf2gb9Ex9jXJX8ns3qwf2kN"
    reference = "82ZJ7nbGpixjeDCmEhUcmwXYfvurzAgGdtSMuHnUgyny"
    uri = solana_uris.solana_pay_uri(
        recipient=recipient, amount=1500000000, reference=reference, label="GPU Rent Hub", message="Thanks!"
    )
    assert uri == (f"solana:{recipient}?amount=1.5&reference={reference}&label=GPU%20Rent%20Hub&message=Thanks%21")
    query = parse_qs(urlsplit(uri).query)
    assert query["reference"] == [reference] and query["message"] == ["Thanks!"]
    assert solana_uris.solana_pay_uri(recipient=recipient, amount=1, reference=reference) == (
        f"solana:{recipient}?amount=0.000000001&reference={reference}"
    )
    with pytest.raises(ValueError, match="reference"):
        solana_uris.solana_pay_uri(recipient=recipient, amount=1, reference="")
