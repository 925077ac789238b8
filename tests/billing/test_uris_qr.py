"""QR codes: a valid SVG document that a barcode reader decodes back to the URI."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
import zxingcpp

from billing.qr import qr_svg
from tests.qr_decode import SVG, svg_modules
from tests.qr_decode import decode_svg as decode


@pytest.mark.parametrize(
    "text",
    [
        "bitcoin:bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu?amount=0.0039&label=GPU%20Rent%20Hub",
        "ethereum:0xdAC17F958D2ee523a2206206994597C13D831ec7@1/transfer"
        "?address=0x9858EfFD232B4033E47d90003D41EC34EcaEda94&uint256=12168000000",
        "monero:" + "4" + "A" * 94 + "?tx_amount=1.2345&tx_description=Invoice%20GRH-000001",
        "x",
    ],
)
def test_qr_svg_is_an_svg_document_that_decodes_to_the_text(text):
    svg = qr_svg(text)
    assert svg.startswith("<?xml")
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    assert root.get("width") == root.get("height")
    assert decode(svg) == [(text, zxingcpp.BarcodeFormat.QRCode)]


def test_short_text_still_gets_a_full_qr_code():
    # A Micro QR would be smaller, but wallets do not read it: 21 modules + 2 x 4 quiet zone.
    grid, size = svg_modules(qr_svg("x"))
    assert size == 21 + 8
    finder = [row[4:11] for row in grid[4:11]]
    assert finder[0] == [True] * 7 and finder[3] == [True, False, True, True, True, False, True]
    assert not any(grid[0]) and not any(row[0] for row in grid)  # quiet zone


def test_nothing_to_encode():
    with pytest.raises(ValueError):
        qr_svg("")


def test_a_code_drawn_once_is_kept():
    """Drawing takes some 16 ms of CPU; a payment request's URI never changes."""
    text = "litecoin:ltc1qkept?amount=0.5"
    first = qr_svg(text, sized=False)
    hits = qr_svg.cache_info().hits
    assert qr_svg(text, sized=False) is first and qr_svg.cache_info().hits == hits + 1
    assert qr_svg(text) != first  # sized: another document, drawn for itself
