"""QR codes of payment URIs, as SVG documents."""

from __future__ import annotations

import io
from functools import lru_cache

import segno


# A payment request's URI never changes, and drawing its code takes some 16 ms of CPU: the
# pages that poll for it, and a client asking again and again, get the one drawn before.
# 256 documents of a few KiB each per process.
@lru_cache(maxsize=256)
def qr_svg(text: str, *, scale: int = 4, sized: bool = True) -> str:
    """A standalone SVG document with `text` as a QR code.

    Always a full QR code (never a Micro QR, which wallet scanners do not read),
    error correction level M or better, a 4-module quiet zone and a white
    background, so it scans on a dark page too. `sized=False` leaves out the
    width and height (a viewBox only), so a page can draw it at any size.
    """
    if not text:
        raise ValueError("nothing to encode")
    code = segno.make_qr(text, error="m", boost_error=True)
    out = io.BytesIO()
    code.save(
        out,
        kind="svg",
        scale=scale,
        border=4,
        dark="#000",
        light="#fff",
        xmldecl=True,
        encoding="utf-8",
        omitsize=not sized,
    )
    return out.getvalue().decode("utf-8")
