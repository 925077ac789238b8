"""QR codes: a valid SVG document that a barcode reader decodes back to the URI."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
import zxingcpp

from billing.qr import qr_svg

SVG = "{http://www.w3.org/2000/svg}"


def svg_modules(svg: str) -> tuple[list[list[bool]], int]:
    """Rasterise the dark path of a QR SVG into a module grid.

    The path is a run of horizontal strokes one module high ("M x y" or
    "m dx dy" moves, "h n" draws n modules) inside a scale(n) transform.
    """
    root = ET.fromstring(svg)
    width = float(root.get("width"))
    group = root.find(f"{SVG}g")
    scale = float(re.fullmatch(r"scale\((\d+(?:\.\d+)?)\)", group.get("transform")).group(1))
    size = round(width / scale)
    grid = [[False] * size for _ in range(size)]
    dark = [p for p in group.iter(f"{SVG}path") if p.get("stroke")]
    assert len(dark) == 1
    x = y = 0.0
    for cmd, a, b in re.findall(r"([MmHh])\s*(-?[\d.]+)(?:[ ,](-?[\d.]+))?", dark[0].get("d")):
        if cmd == "M":
            x, y = float(a), float(b)
        elif cmd == "m":
            x, y = x + float(a), y + float(b)
        else:
            end = float(a) if cmd == "H" else x + float(a)
            for col in range(int(x), int(end)):
                grid[int(y)][col] = True
            x = end
    return grid, size


def decode(svg: str, pixels: int = 4) -> list[str]:
    grid, size = svg_modules(svg)
    rows = []
    for row in grid:
        line = bytes(0 if dark else 255 for dark in row for _ in range(pixels))
        rows.extend([line] * pixels)
    image = memoryview(b"".join(rows)).cast("B", shape=[size * pixels, size * pixels])
    return [(r.text, r.format) for r in zxingcpp.read_barcodes(image)]


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
