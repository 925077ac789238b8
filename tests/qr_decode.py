"""Reading QR codes back in the tests: an SVG from billing.qr rasterised
module by module, or a screenshot (PNG) of a page, decoded by zxing-cpp."""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET

import zxingcpp

SVG = "{http://www.w3.org/2000/svg}"


def svg_modules(svg: str) -> tuple[list[list[bool]], int]:
    """Rasterise the dark path of a QR SVG into a module grid.

    The path is a run of horizontal strokes one module high ("M x y" or
    "m dx dy" moves, "h n" draws n modules) inside a scale(n) transform. The
    size is the root's width, or its viewBox's for an unsized SVG.
    """
    root = ET.fromstring(svg)
    width = float(root.get("width") or root.get("viewBox").split()[2])
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


def decode_svg(svg: str, pixels: int = 4) -> list[tuple[str, zxingcpp.BarcodeFormat]]:
    """The codes in a QR SVG, as (text, format) pairs."""
    grid, size = svg_modules(svg)
    rows = []
    for row in grid:
        line = bytes(0 if dark else 255 for dark in row for _ in range(pixels))
        rows.extend([line] * pixels)
    image = memoryview(b"".join(rows)).cast("B", shape=[size * pixels, size * pixels])
    return [(r.text, r.format) for r in zxingcpp.read_barcodes(image)]


def decode_png(png: bytes) -> list[str]:
    """The texts of the QR codes in a PNG picture (a screenshot)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("L")
    return [r.text for r in zxingcpp.read_barcodes(image, formats=zxingcpp.BarcodeFormat.QRCode)]
