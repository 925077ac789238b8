"""The regtest harness itself: the node, its life cycle, the watch-only account."""

from __future__ import annotations

import socket
from decimal import Decimal

import pytest
from bip_utils import Base58Decoder, Base58Encoder, Bip39SeedGenerator, Bip84, Bip84Coins

from billing.chains.utxo.rpc import ChainUnavailable
from billing.chains.utxo.scanner import chain_tip
from devtools.litecoind import (
    VPUB_VERSION,
    address_to_script,
    base_units_to_coins,
    regtest_node_start,
    script_to_address,
    watch_only_account_from_key,
)

pytestmark = pytest.mark.chain


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_session_node_is_a_funded_regtest_node(node):
    info = node.rpc.call("getblockchaininfo")
    assert info["chain"] == "regtest"
    assert info["blocks"] >= 101
    assert node.wallet_rpc.call("getbalance") >= Decimal("50")
    assert _listening(node.rpc_port) and _listening(node.p2p_port)
    # The credentials are per run and kept out of the command line.
    conf = next(node.datadir.glob("*.conf"))
    assert node.rpc_password in conf.read_text()
    assert oct(conf.stat().st_mode & 0o777) == "0o600"
    assert node.rpc_password not in " ".join(node.process.args)


@pytest.mark.slow
def test_start_and_stop_leave_nothing_behind():
    fresh = regtest_node_start(mine=0, wallet="w")
    try:
        assert fresh.process.poll() is None
        # A fresh chain's tip is the old genesis block: the node says it is
        # still in initial block download, and the watcher must call that blind.
        with pytest.raises(ChainUnavailable) as caught:
            chain_tip(fresh.rpc)
        assert caught.value.reason == "syncing"
        fresh.mine(1)
        assert chain_tip(fresh.rpc).height == 1
    finally:
        fresh.stop()
    assert fresh.process.poll() is not None
    assert not fresh.datadir.exists()
    assert not _listening(fresh.rpc_port)


def test_helpers_mine_send_and_rewind(node):
    height, best = node.tip()
    hashes = node.mine(2)
    assert node.tip() == (height + 2, hashes[-1])
    node.invalidate(hashes[0])
    assert node.tip() == (height, best)
    node.reconsider(hashes[0])
    assert node.tip() == (height + 2, hashes[-1])
    address = node.new_address()
    txid = node.send(address, 123_456_789)
    assert txid in node.mempool()
    tx = node.rpc.call("getrawtransaction", txid, True)
    assert [o["value"] for o in tx["vout"] if o["scriptPubKey"]["addresses"] == [address]] == [Decimal("1.23456789")]


def test_base_units_to_coins_is_exact():
    assert base_units_to_coins(1) == Decimal("0.00000001")
    assert base_units_to_coins(2_100_000_000_000_000) == Decimal("21000000.00000000")
    assert str(base_units_to_coins(150_000_000)) == "1.50000000"


def test_watch_only_account_addresses_are_the_nodes_and_keys_are_public(node, watch_account):
    assert watch_account.vpub.startswith("vpub") and watch_account.tpub.startswith("tpub")
    # Same key under two names: only the version bytes differ.
    assert Base58Decoder.CheckDecode(watch_account.vpub)[4:] == Base58Decoder.CheckDecode(watch_account.tpub)[4:]
    assert Base58Decoder.CheckDecode(watch_account.vpub)[:4] == VPUB_VERSION
    assert watch_account._account.IsPublicOnly()
    seen = set()
    for index in range(3):
        address = watch_account.address(index)
        assert address.startswith("rltc1q")
        info = node.rpc.call("validateaddress", address)
        assert info["isvalid"] is True
        assert info["scriptPubKey"] == watch_account.script_hex(index)
        # Not the node's: it can see, not spend.
        assert node.wallet_rpc.call("getaddressinfo", address)["ismine"] is False
        seen.add(address)
    assert len(seen) == 3


def test_watch_only_derivation_follows_bip84():
    # BIP84's public test vector: account key of the "abandon ... about" mnemonic.
    mnemonic = "abandon " * 11 + "about"
    seed = Bip39SeedGenerator(mnemonic).Generate()
    account = Bip84.FromSeed(seed, Bip84Coins.BITCOIN).Purpose().Coin().Account(0)
    zpub = account.PublicKey().ToExtended()
    assert zpub == (
        "zpub6rFR7y4Q2AijBEqTUquhVz398htDFrtymD9xYYfG1m4wAcvPhXNfE3EfH1r1ADqtfSdVCToUG868RvUUkgDKf31mGDtKsAYz2oz2AGutZYs"
    )
    public = watch_only_account_from_key(zpub, hrp="bc")
    assert public.address(0) == "bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu"
    assert public.address(1) == "bc1qnjg0jd8228aq7egyzacy8cys3knf9xvrerkf9g"
    assert public.address(0, change=True) == "bc1q8c6fshw2dlwun7ekn9qwf37cu2rn755upcp6el"
    # The same account as a plain xpub derives the same addresses.
    as_xpub = Base58Encoder.CheckEncode(bytes.fromhex("0488b21e") + Base58Decoder.CheckDecode(zpub)[4:])
    assert watch_only_account_from_key(as_xpub, hrp="bc").address(0) == public.address(0)
    with pytest.raises(ValueError):
        watch_only_account_from_key(account.PrivateKey().ToExtended(), hrp="bc")


def test_generated_key_round_trips_through_tpub(watch_account):
    again = watch_only_account_from_key(watch_account.tpub, hrp="rltc")
    assert again.vpub == watch_account.vpub
    assert [again.address(i) for i in range(3)] == [watch_account.address(i) for i in range(3)]


def test_scripts_and_addresses_convert_both_ways(watch_account):
    script = watch_account.script_hex(0)
    rltc = script_to_address(script, hrp="rltc")
    bcrt = script_to_address(script, hrp="bcrt")
    assert rltc == watch_account.address(0)
    assert bcrt == watch_account.address(0, hrp="bcrt")
    assert address_to_script(rltc, hrp="rltc") == script == address_to_script(bcrt, hrp="bcrt")
    taproot = "5120" + "11" * 32
    assert address_to_script(script_to_address(taproot, hrp="rltc"), hrp="rltc") == taproot
    with pytest.raises(ValueError):
        script_to_address("76a914" + "00" * 20 + "88ac", hrp="rltc")  # P2PKH is not segwit
