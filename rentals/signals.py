"""Receivers of billing's signals (billing never imports rentals)."""
