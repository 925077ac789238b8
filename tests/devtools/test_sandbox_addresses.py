"""The sandbox's stand-in for the provisioning system hands each rental an address of its own."""

from __future__ import annotations

import ipaddress

from devtools.sandbox import sandbox_ipv4

DOCUMENTATION = [ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")]


def test_each_rental_gets_its_own_documentation_address():
    addresses = [sandbox_ipv4(rental_id) for rental_id in range(1, 763)]
    assert len(set(addresses)) == 762
    for text in addresses:
        address = ipaddress.IPv4Address(text)
        assert any(address in net for net in DOCUMENTATION), text
        assert text.rsplit(".", 1)[1] not in ("0", "255")  # no network or broadcast address
    assert (sandbox_ipv4(1), sandbox_ipv4(2), sandbox_ipv4(255)) == ("192.0.2.1", "192.0.2.2", "198.51.100.1")
    assert sandbox_ipv4(763) == sandbox_ipv4(1)  # then they repeat
