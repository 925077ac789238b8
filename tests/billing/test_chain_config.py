"""The chain configuration interface: enabled currencies, destinations, keysets,
payment URIs, network names, and the start-up refusal of spending keys."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from bip_utils import Bip44, Bip44Changes, Bip44Coins, Bip84, Bip84Coins
from django.apps import apps
from django.core.exceptions import ImproperlyConfigured
from monero.backends.offline import OfflineWallet
from monero.seed import Seed
from monero.wallet import Wallet
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from billing.chains import config
from billing.chains.config import (
    Destination,
    chain_config_validate,
    derivation_first_index,
    derivation_keyset,
    destination_derive,
    enabled_currencies,
    network_name,
    payment_uri,
)
from billing.chains.utxo import family as utxo_family
from billing.chains.utxo import keys as utxo_keys
from core.errors import DomainError
from tests.billing.key_vectors import (
    BIP84_FIRST,
    ETH_FIRST,
    MNEMONIC,
    account,
    account_private,
    account_public,
    full_address,
    script_via_bitcoinlib,
)
from tests.warm_python import python_run

BTC_ACCOUNT = account(Bip84, Bip84Coins.BITCOIN)
LTC_REGTEST_ACCOUNT = account(Bip84, Bip84Coins.LITECOIN_TESTNET)
ETH_ACCOUNT = account(Bip44, Bip44Coins.ETHEREUM)
ALL = ["BTC", "ETH", "USDT", "USDC", "XMR", "SOL", "LTC"]
USDT_MAINNET = "0xdAC17F958D2ee523a2206206994597C13D831ec7"
USDC_MAINNET = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def xmr_wallet():
    return Seed()


@pytest.fixture
def sol_recipient():
    return str(Keypair().pubkey())


@pytest.fixture
def chains(settings, xmr_wallet, sol_recipient):
    """Every currency enabled with watch-only material from public test keys."""
    settings.BTC_XPUB = BTC_ACCOUNT.PublicKey().ToExtended()
    settings.BTC_NETWORK = "mainnet"
    settings.BTC_SCRIPT_TYPE = "p2wpkh"
    settings.LTC_XPUB = LTC_REGTEST_ACCOUNT.PublicKey().ToExtended()  # ttub
    settings.LTC_NETWORK = "regtest"
    settings.LTC_SCRIPT_TYPE = "p2wpkh"
    settings.ETH_XPUB = ETH_ACCOUNT.PublicKey().ToExtended()
    settings.ETH_CHAIN_ID = 1
    settings.USDT_CONTRACT = USDT_MAINNET
    settings.USDC_CONTRACT = USDC_MAINNET
    settings.XMR_ADDRESS = str(xmr_wallet.public_address())
    settings.XMR_VIEW_KEY = xmr_wallet.secret_view_key()
    settings.SOL_RECIPIENT = sol_recipient
    return settings


@pytest.fixture
def no_chains(settings):
    for name in config.MATERIAL_SETTINGS:
        setattr(settings, name, "")
    return settings


# --- Enabled currencies ---------------------------------------------------------


def test_nothing_is_enabled_without_material(no_chains):
    assert enabled_currencies() == []
    chain_config_validate()
    with pytest.raises(DomainError) as err:
        destination_derive(currency="BTC", index=0)
    assert err.value.code == "currency_unavailable" and err.value.status == 400
    with pytest.raises(DomainError) as err:
        derivation_keyset(currency="SOL")
    assert err.value.code == "currency_unavailable"


def test_each_currency_is_enabled_exactly_by_its_material(chains):
    assert enabled_currencies() == ALL
    chain_config_validate()
    chains.USDT_CONTRACT = ""
    assert enabled_currencies() == ["BTC", "ETH", "USDC", "XMR", "SOL", "LTC"]
    chains.ETH_XPUB = ""
    assert enabled_currencies() == ["BTC", "XMR", "SOL", "LTC"]
    chains.XMR_VIEW_KEY = ""  # half the Monero material: not enabled, and refused at start-up
    assert enabled_currencies() == ["BTC", "SOL", "LTC"]
    with pytest.raises(ImproperlyConfigured, match="XMR_VIEW_KEY is not set"):
        chain_config_validate()


def test_unknown_currency(chains):
    with pytest.raises(DomainError) as err:
        destination_derive(currency="DOGE", index=0)
    assert err.value.code == "unknown_currency"
    assert destination_derive(currency="btc", index=0).currency == "BTC"


# --- Destinations -----------------------------------------------------------------


def test_bitcoin_destination(chains):
    dest = destination_derive(currency="BTC", index=0)
    assert dest == Destination(
        currency="BTC", address=BIP84_FIRST, index=0, match_key=script_via_bitcoinlib(BIP84_FIRST, "mainnet")
    )
    assert destination_derive(currency="BTC", index=5).address == full_address(BTC_ACCOUNT, 5)


def test_litecoin_regtest_destination(chains):
    for i in (0, 1, 9):
        dest = destination_derive(currency="LTC", index=i)
        assert dest.address.startswith("rltc1q")
        # Same key and program as the full-key derivation; only the prefix says regtest.
        assert dest.address[4:-6] == full_address(LTC_REGTEST_ACCOUNT, i)[4:-6]
        assert dest.match_key.startswith("0014") and len(dest.match_key) == 44


def test_ethereum_family_shares_addresses(chains):
    for i in (0, 3):
        eth, usdt, usdc = (destination_derive(currency=c, index=i) for c in ("ETH", "USDT", "USDC"))
        assert eth.address == usdt.address == usdc.address == full_address(ETH_ACCOUNT, i)
        assert eth.match_key == eth.address.lower()
        assert (usdt.currency, usdc.currency) == ("USDT", "USDC")
    assert destination_derive(currency="ETH", index=0).address == ETH_FIRST


def test_monero_destination_is_subaddress_0_i(chains, xmr_wallet):
    full = Wallet(
        OfflineWallet(
            str(xmr_wallet.public_address()),
            view_key=xmr_wallet.secret_view_key(),
            spend_key=xmr_wallet.secret_spend_key(),
        )
    )
    for i in (1, 2, 77):
        dest = destination_derive(currency="XMR", index=i)
        assert dest.address == str(full.get_address(0, i))
        assert dest.match_key == f"0/{i}" and dest.index == i and dest.reference == ""
    with pytest.raises(ValueError, match="1\\.\\."):
        destination_derive(currency="XMR", index=0)  # (0, 0) is the primary address
    assert derivation_first_index(currency="XMR") == 1
    destination_derive(currency="XMR", index=derivation_first_index(currency="XMR"))
    for code in ("BTC", "ETH", "USDT", "USDC", "SOL", "LTC"):
        assert derivation_first_index(currency=code) == 0
        destination_derive(currency=code, index=derivation_first_index(currency=code))


def test_solana_destination_has_a_fresh_reference(chains, sol_recipient):
    first = destination_derive(currency="SOL", index=4)
    second = destination_derive(currency="SOL", index=4)
    assert first.address == second.address == sol_recipient
    assert first.reference != second.reference
    for dest in (first, second):
        assert dest.match_key == dest.reference
        assert str(Pubkey.from_string(dest.reference)) == dest.reference and dest.index == 4


@pytest.mark.parametrize("index,error", [(-1, ValueError), (2**31, ValueError), (True, TypeError), ("1", TypeError)])
def test_bad_indexes(chains, index, error):
    with pytest.raises(error):
        destination_derive(currency="BTC", index=index)


def test_settings_are_read_at_call_time(chains):
    before = destination_derive(currency="BTC", index=0)
    chains.BTC_XPUB = account(Bip84, Bip84Coins.BITCOIN, 1).PublicKey().ToExtended()
    after = destination_derive(currency="BTC", index=0)
    assert after.address != before.address
    assert after.address == full_address(account(Bip84, Bip84Coins.BITCOIN, 1), 0)


def test_keys_are_parsed_once_not_per_index(chains, monkeypatch):
    calls = []
    real = utxo_keys.utxo_account_parse

    def counting(**kwargs):
        calls.append(kwargs["value"])
        return real(**kwargs)

    monkeypatch.setattr(utxo_keys, "utxo_account_parse", counting)
    utxo_family._account_cached.cache_clear()
    addresses = {destination_derive(currency="BTC", index=i).address for i in range(300)}
    assert len(addresses) == 300
    assert len(calls) == 1
    utxo_family._account_cached.cache_clear()


# --- Keysets ----------------------------------------------------------------------


def test_keysets(chains):
    eth = derivation_keyset(currency="ETH")
    assert eth.startswith("ethereum:")
    assert derivation_keyset(currency="USDT") == derivation_keyset(currency="USDC") == eth
    btc = derivation_keyset(currency="BTC")
    assert btc.startswith("bitcoin:") and btc == derivation_keyset(currency="BTC")
    assert derivation_keyset(currency="LTC").startswith("litecoin:")
    assert derivation_keyset(currency="XMR").startswith("monero:")
    assert derivation_keyset(currency="SOL").startswith("solana:")
    assert len({derivation_keyset(currency=c) for c in ALL}) == 5
    assert all(len(derivation_keyset(currency=c)) <= 64 for c in ALL)
    # The same key as an xpub with its script stated: same key material, same sequence.
    chains.BTC_XPUB = account_public(BTC_ACCOUNT, "xpub")
    assert derivation_keyset(currency="BTC") == btc
    chains.BTC_XPUB = account(Bip84, Bip84Coins.BITCOIN, 1).PublicKey().ToExtended()
    assert derivation_keyset(currency="BTC") != btc


# --- Payment URIs and networks ----------------------------------------------------


def test_payment_uris(chains):
    btc = destination_derive(currency="BTC", index=0)
    assert payment_uri(destination=btc, amount=390000, label="GPU Rent Hub", message="Invoice GRH-000001") == (
        f"bitcoin:{BIP84_FIRST}?amount=0.0039&label=GPU%20Rent%20Hub&message=Invoice%20GRH-000001"
    )
    ltc = destination_derive(currency="LTC", index=0)
    assert payment_uri(destination=ltc, amount=100000000, label="", message="") == f"litecoin:{ltc.address}?amount=1"
    eth = destination_derive(currency="ETH", index=0)
    assert payment_uri(destination=eth, amount=10**18 + 1, label="x", message="y") == (
        f"ethereum:{ETH_FIRST}@1?value=1000000000000000001"
    )
    chains.ETH_CHAIN_ID = 11155111
    usdc = destination_derive(currency="USDC", index=0)
    assert payment_uri(destination=usdc, amount=12168000000, label="", message="") == (
        f"ethereum:{USDC_MAINNET}@11155111/transfer?address={ETH_FIRST}&uint256=12168000000"
    )
    chains.USDT_CONTRACT = USDT_MAINNET.lower()  # accepted and written checksummed
    usdt = destination_derive(currency="USDT", index=0)
    assert payment_uri(destination=usdt, amount=5, label="", message="").startswith(f"ethereum:{USDT_MAINNET}@")
    xmr = destination_derive(currency="XMR", index=1)
    assert payment_uri(destination=xmr, amount=2 * 10**12, label="", message="Invoice 7") == (
        f"monero:{xmr.address}?tx_amount=2&tx_description=Invoice%207"
    )
    sol = destination_derive(currency="SOL", index=0)
    uri = payment_uri(destination=sol, amount=1500000000, label="GPU Rent Hub", message="")
    assert urlsplit(uri).scheme == "solana" and urlsplit(uri).path == sol.address
    assert parse_qs(urlsplit(uri).query) == {"amount": ["1.5"], "reference": [sol.reference], "label": ["GPU Rent Hub"]}


def test_network_names(chains):
    assert [network_name(currency=c) for c in ALL] == [
        "bitcoin-mainnet",
        "ethereum-1",
        "ethereum-1",
        "ethereum-1",
        "monero-mainnet",
        "solana-mainnet-beta",
        "litecoin-regtest",
    ]
    chains.BTC_NETWORK = "regtest"
    chains.BTC_XPUB = account(Bip84, Bip84Coins.BITCOIN_REGTEST).PublicKey().ToExtended()
    chains.ETH_CHAIN_ID = 31337
    stagenet = Seed()
    chains.XMR_ADDRESS = str(stagenet.public_address(net="stage"))
    chains.XMR_VIEW_KEY = stagenet.secret_view_key()
    chains.SOL_CLUSTER = "devnet"
    assert network_name(currency="BTC") == "bitcoin-regtest"
    assert destination_derive(currency="BTC", index=0).address.startswith("bcrt1q")
    assert network_name(currency="USDT") == "ethereum-31337"
    assert network_name(currency="XMR") == "monero-stagenet"
    assert network_name(currency="SOL") == "solana-devnet"
    chain_config_validate()


# --- Start-up refusal ---------------------------------------------------------------


def _secrets(xmr_wallet: Seed) -> list[tuple[str, str]]:
    pair = Keypair()
    eth_private = ETH_ACCOUNT.Change(Bip44Changes.CHAIN_EXT).AddressIndex(0).PrivateKey().Raw().ToHex()
    return [
        ("BTC_XPUB", account_private(BTC_ACCOUNT, "zpub")),
        ("BTC_XPUB", account_private(BTC_ACCOUNT, "xpub")),
        ("BTC_XPUB", MNEMONIC),
        ("LTC_XPUB", account_private(account(Bip84, Bip84Coins.LITECOIN), "Ltub")),
        ("LTC_XPUB", account_private(LTC_REGTEST_ACCOUNT, "ttub")),
        ("ETH_XPUB", account_private(ETH_ACCOUNT, "xpub")),
        ("ETH_XPUB", "0x" + eth_private),
        ("USDT_CONTRACT", "0x" + eth_private),
        ("XMR_VIEW_KEY", xmr_wallet.secret_spend_key()),
        ("XMR_VIEW_KEY", xmr_wallet.phrase),
        ("XMR_ADDRESS", xmr_wallet.phrase),
        ("SOL_RECIPIENT", str(pair)),
        ("SOL_RECIPIENT", "[" + ",".join(str(b) for b in bytes(pair)) + "]"),
    ]


def test_every_spending_key_is_refused_naming_its_setting(chains, xmr_wallet):
    for setting, secret in _secrets(xmr_wallet):
        original = getattr(chains, setting)
        setattr(chains, setting, secret)
        with pytest.raises(ImproperlyConfigured) as err:
            chain_config_validate()
        message = str(err.value)
        assert f"- {setting} holds " in message and "can spend" in message, (setting, message)
        # No part of the secret: not the whole, and not its first 20 characters or first four words (a
        # single mnemonic word may well be an English word of the message itself).
        assert secret not in message and secret[:20] not in message and " ".join(secret.split()[:4]) not in message
        setattr(chains, setting, original)
    chain_config_validate()


@pytest.mark.parametrize(
    "setting,value,expected",
    [
        ("BTC_XPUB", "zpub6rFR7y4Q2AijBEqTUquhVz398htDFrtymD9xYYfG1m4wAcvPhXNfE3EfH1r1", "BTC_XPUB is not an extended"),
        ("BTC_XPUB", BIP84_FIRST, "BTC_XPUB is not an extended"),
        ("BTC_NETWORK", "mainet", "BTC_NETWORK is 'mainet'"),
        ("BTC_NETWORK", "regtest", "BTC_XPUB holds a mainnet key (zpub)"),
        ("BTC_SCRIPT_TYPE", "p2pkh", "BTC_XPUB holds a zpub, which is a p2wpkh key"),
        ("BTC_SCRIPT_TYPE", "segwit", "BTC_SCRIPT_TYPE is 'segwit'"),
        ("LTC_NETWORK", "signet", "LTC_NETWORK is 'signet'"),
        ("ETH_XPUB", ETH_FIRST, "ETH_XPUB holds an address"),
        ("ETH_CHAIN_ID", 0, "ETH_CHAIN_ID is 0"),
        ("USDC_CONTRACT", USDC_MAINNET[:-1] + "b", "USDC_CONTRACT has an invalid EIP-55 checksum"),
        ("USDT_CONTRACT", "tether", "USDT_CONTRACT is not an Ethereum address"),
        # Another wallet's view key, random: a fixed id keeps the test's name the same on every xdist worker.
        pytest.param(
            "XMR_VIEW_KEY",
            Seed().secret_view_key(),
            "XMR_VIEW_KEY does not belong to XMR_ADDRESS",
            id="XMR_VIEW_KEY-another-wallets-XMR_VIEW_KEY does not belong to XMR_ADDRESS",
        ),
        ("XMR_VIEW_KEY", "", "XMR_VIEW_KEY is not set"),
        ("XMR_ADDRESS", "4" * 95, "XMR_ADDRESS is not a Monero address"),
        ("SOL_RECIPIENT", "not-base58-0OIl", "SOL_RECIPIENT is not a Solana address"),
        ("SOL_CLUSTER", "mainnet", "SOL_CLUSTER is 'mainnet'"),
    ],
)
def test_malformed_material_is_refused(chains, setting, value, expected):
    setattr(chains, setting, value)
    with pytest.raises(ImproperlyConfigured) as err:
        chain_config_validate()
    assert expected in str(err.value)


def test_all_problems_are_listed_at_once(chains):
    chains.BTC_XPUB = account_private(BTC_ACCOUNT, "zpub")
    chains.ETH_CHAIN_ID = -1
    chains.SOL_RECIPIENT = "nope"
    with pytest.raises(ImproperlyConfigured) as err:
        chain_config_validate()
    lines = str(err.value).splitlines()
    assert lines[0] == "Chain settings refused:"
    assert [line.split()[1] for line in lines[1:]] == ["BTC_XPUB", "ETH_CHAIN_ID", "SOL_RECIPIENT"]


def test_billing_app_ready_refuses(chains):
    chains.ETH_XPUB = account_private(ETH_ACCOUNT, "xpub")
    with pytest.raises(ImproperlyConfigured, match="ETH_XPUB holds an extended private key \\(xprv\\)"):
        apps.get_app_config("billing").ready()


@pytest.mark.slow
def test_the_process_does_not_start_with_a_private_key(tmp_path):
    secret = account_private(BTC_ACCOUNT, "zpub")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "PYTEST", "BTC_", "LTC_", "ETH_", "XMR_", "SOL_", "USD"))
    }
    env.update(
        DEBUG="1",
        DATA_DIR=str(tmp_path),
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        DJANGO_SETTINGS_MODULE="config.settings",
        BTC_XPUB=secret,
    )
    run = python_run("manage.py", "check", cwd=ROOT, env=env, timeout=120)
    assert run.returncode != 0
    assert "ImproperlyConfigured" in run.stderr
    assert "BTC_XPUB holds an extended private key (zprv)" in run.stderr
    assert secret not in run.stderr + run.stdout
