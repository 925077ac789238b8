"""Watch-only derivation against full-key derivation and public vectors.

Every account key is derived at test time from the public BIP39 test mnemonic
("abandon" x 11 + "about"); the private keys it yields exist only to prove that
each of their forms is refused.
"""

from __future__ import annotations

import json

import pytest
from bip_utils import (
    Base58Encoder,
    Bip32KeyNetVersions,
    Bip44,
    Bip44Changes,
    Bip44Coins,
    Bip49,
    Bip49Coins,
    Bip84,
    Bip84Coins,
    Bip86,
    Bip86Coins,
    Hash160,
    Monero,
    MoneroCoins,
    SegwitBech32Decoder,
    WifEncoder,
)
from bip_utils.bip.bip32.bip32_key_ser import Bip32PrivateKeySerializer
from monero.backends.offline import OfflineWallet
from monero.seed import Seed
from monero.wallet import Wallet
from solders.keypair import Keypair
from solders.pubkey import Pubkey

from billing.chains import keys
from billing.chains.ethereum import keys as ethereum_keys
from billing.chains.monero import keys as monero_keys
from billing.chains.solana import keys as solana_keys
from billing.chains.utxo import keys as utxo_keys
from tests.billing.key_vectors import (
    BIP84_FIRST,
    BIP86_FIRST,
    ETH_FIRST,
    MNEMONIC,
    SEED,
    account,
    account_private,
    account_public,
    full_address,
    full_node,
    full_pubkey,
    script_via_bitcoinlib,
)

INDEXES = [0, 1, 2, 7, 19, 1000, 2**31 - 1]


# --- Bitcoin -------------------------------------------------------------------


def test_bip84_public_vector_from_the_account_zpub():
    zpub = account(Bip84, Bip84Coins.BITCOIN).PublicKey().ToExtended()
    assert zpub.startswith("zpub")
    acct = utxo_keys.utxo_account_parse(chain="bitcoin", value=zpub, network="mainnet", script_type="p2wpkh")
    address, script = acct.destination(0)
    assert address == BIP84_FIRST
    assert script == script_via_bitcoinlib(BIP84_FIRST, "mainnet")


@pytest.mark.parametrize("form", ["zpub", "xpub"])
def test_bitcoin_mainnet_watch_only_equals_full_key_derivation(form):
    acc = account(Bip84, Bip84Coins.BITCOIN)
    acct = utxo_keys.utxo_account_parse(
        chain="bitcoin", value=account_public(acc, form), network="mainnet", script_type="p2wpkh"
    )
    for i in INDEXES:
        address, script = acct.destination(i)
        assert address == full_address(acc, i)
        assert script == "0014" + Hash160.QuickDigest(full_pubkey(acc, i)).hex()


@pytest.mark.parametrize(
    "network,coin,hrp,params",
    [
        ("testnet", Bip84Coins.BITCOIN_TESTNET, "tb", "testnet"),
        ("signet", Bip84Coins.BITCOIN_TESTNET, "tb", "testnet"),
        ("regtest", Bip84Coins.BITCOIN_REGTEST, "bcrt", "regtest"),
    ],
)
@pytest.mark.parametrize("form", ["vpub", "tpub"])
def test_bitcoin_test_networks(network, coin, hrp, params, form):
    acc = account(Bip84, coin)
    assert acc.PublicKey().ToExtended().startswith("vpub")
    acct = utxo_keys.utxo_account_parse(
        chain="bitcoin", value=account_public(acc, form), network=network, script_type="p2wpkh"
    )
    for i in INDEXES[:5]:
        address, script = acct.destination(i)
        assert address.startswith(hrp + "1q")
        assert not address.startswith("bcrt") or network == "regtest"
        assert SegwitBech32Decoder.Decode(hrp, address)[1] == Hash160.QuickDigest(full_pubkey(acc, i))
        assert script == script_via_bitcoinlib(address, params)
    if network != "signet":
        assert acct.destination(3)[0] == full_address(acc, 3)


def test_bitcoin_other_script_types_match_their_bips():
    # p2sh-p2wpkh (BIP49, ypub), p2pkh (BIP44, xpub with the type stated), p2tr (BIP86).
    bip49 = account(Bip49, Bip49Coins.BITCOIN)
    ypub = utxo_keys.utxo_account_parse(
        chain="bitcoin", value=bip49.PublicKey().ToExtended(), network="mainnet", script_type="p2sh-p2wpkh"
    )
    bip44 = account(Bip44, Bip44Coins.BITCOIN)
    xpub = utxo_keys.utxo_account_parse(
        chain="bitcoin", value=bip44.PublicKey().ToExtended(), network="mainnet", script_type="p2pkh"
    )
    bip86 = account(Bip86, Bip86Coins.BITCOIN)
    tr = utxo_keys.utxo_account_parse(
        chain="bitcoin", value=bip86.PublicKey().ToExtended(), network="mainnet", script_type="p2tr"
    )
    assert tr.destination(0)[0] == BIP86_FIRST
    for i in INDEXES[:5]:
        for acct, acc, prefix in ((ypub, bip49, "3"), (xpub, bip44, "1"), (tr, bip86, "bc1p")):
            address, script = acct.destination(i)
            assert address == full_address(acc, i)
            assert address.startswith(prefix)
        assert ypub.destination(i)[1] == script_via_bitcoinlib(ypub.destination(i)[0], "mainnet")
        assert xpub.destination(i)[1] == script_via_bitcoinlib(xpub.destination(i)[0], "mainnet")
        address, script = tr.destination(i)
        assert script == "5120" + SegwitBech32Decoder.Decode("bc", address)[1].hex()


# --- Litecoin ------------------------------------------------------------------


@pytest.mark.parametrize("form", ["zpub", "Ltub", "xpub"])
def test_litecoin_mainnet_native_segwit_equals_full_key_derivation(form):
    acc = account(Bip84, Bip84Coins.LITECOIN)
    acct = utxo_keys.utxo_account_parse(
        chain="litecoin", value=account_public(acc, form), network="mainnet", script_type="p2wpkh"
    )
    for i in INDEXES:
        address, script = acct.destination(i)
        assert address.startswith("ltc1q")
        assert address == full_address(acc, i)
        assert script == "0014" + Hash160.QuickDigest(full_pubkey(acc, i)).hex()


def test_litecoin_mtub_is_nested_segwit():
    acc = account(Bip49, Bip49Coins.LITECOIN)
    mtub = account_public(acc, "Mtub")
    assert mtub.startswith("Mtub")
    acct = utxo_keys.utxo_account_parse(chain="litecoin", value=mtub, network="mainnet", script_type="p2sh-p2wpkh")
    for i in INDEXES[:4]:
        address, script = acct.destination(i)
        assert address.startswith("M") and address == full_address(acc, i)
        redeem = b"\x00\x14" + Hash160.QuickDigest(full_pubkey(acc, i))
        assert script == "a914" + Hash160.QuickDigest(redeem).hex() + "87"
    with pytest.raises(keys.KeyMaterialError, match="p2sh-p2wpkh"):
        utxo_keys.utxo_account_parse(chain="litecoin", value=mtub, network="mainnet", script_type="p2wpkh")


@pytest.mark.parametrize("network,hrp", [("testnet", "tltc"), ("regtest", "rltc")])
@pytest.mark.parametrize("form", ["ttub", "vpub", "tpub"])
def test_litecoin_test_networks(network, hrp, form):
    acc = account(Bip84, Bip84Coins.LITECOIN_TESTNET)
    assert acc.PublicKey().ToExtended().startswith("ttub")  # what Litecoin Core's testnet writes
    acct = utxo_keys.utxo_account_parse(
        chain="litecoin", value=account_public(acc, form), network=network, script_type="p2wpkh"
    )
    for i in INDEXES[:5]:
        address, script = acct.destination(i)
        assert address.startswith(hrp + "1q")
        assert SegwitBech32Decoder.Decode(hrp, address)[1] == Hash160.QuickDigest(full_pubkey(acc, i))
        assert script == "0014" + Hash160.QuickDigest(full_pubkey(acc, i)).hex()
        if network == "testnet":
            assert address == full_address(acc, i)


def test_litecoin_prefixes_are_refused_for_bitcoin():
    ltub = account_public(account(Bip84, Bip84Coins.LITECOIN), "Ltub")
    with pytest.raises(keys.KeyMaterialError, match="wrong kind \\(Ltub\\)"):
        utxo_keys.utxo_account_parse(chain="bitcoin", value=ltub, network="mainnet", script_type="p2wpkh")


# --- Ethereum ------------------------------------------------------------------


def test_ethereum_public_vector_and_full_key_derivation():
    acc = account(Bip44, Bip44Coins.ETHEREUM)
    xpub = acc.PublicKey().ToExtended()
    eth = ethereum_keys.ethereum_account_parse(value=xpub)
    assert eth.address(0) == ETH_FIRST
    for i in INDEXES:
        assert eth.address(i) == full_address(acc, i)
        assert ethereum_keys.eip55(eth.address(i).lower()) == eth.address(i)


@pytest.mark.parametrize(
    "checksummed",
    [
        # The EIP-55 specification's own examples.
        "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
        "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
        "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
        "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
    ],
)
def test_eip55(checksummed):
    assert ethereum_keys.eip55(checksummed.lower()) == checksummed
    assert ethereum_keys.eth_address_parse(checksummed.lower()) == checksummed
    assert ethereum_keys.eth_address_parse("0x" + checksummed[2:].upper()) == checksummed
    broken = checksummed[:-1] + (checksummed[-1].swapcase() if checksummed[-1].isalpha() else "a")
    if broken[2:] not in (broken[2:].lower(), broken[2:].upper()):
        with pytest.raises(keys.KeyMaterialError, match="checksum"):
            ethereum_keys.eth_address_parse(broken)


def test_ethereum_refuses_an_address_and_bitcoin_prefixes():
    with pytest.raises(keys.KeyMaterialError, match="holds an address"):
        ethereum_keys.ethereum_account_parse(value=ETH_FIRST)
    zpub = account(Bip84, Bip84Coins.BITCOIN).PublicKey().ToExtended()
    with pytest.raises(keys.KeyMaterialError, match="wrong kind \\(zpub\\)"):
        ethereum_keys.ethereum_account_parse(value=zpub)


# --- Refusals ------------------------------------------------------------------


PRIVATE_CASES = [
    (Bip84, Bip84Coins.BITCOIN, "zpub", "zprv"),
    (Bip84, Bip84Coins.BITCOIN, "xpub", "xprv"),
    (Bip84, Bip84Coins.BITCOIN, "ypub", "yprv"),
    (Bip84, Bip84Coins.BITCOIN_TESTNET, "tpub", "tprv"),
    (Bip84, Bip84Coins.BITCOIN_TESTNET, "vpub", "vprv"),
    (Bip84, Bip84Coins.BITCOIN_TESTNET, "upub", "uprv"),
    (Bip84, Bip84Coins.LITECOIN, "Ltub", "Ltpv"),
    (Bip49, Bip49Coins.LITECOIN, "Mtub", "Mtpv"),
    (Bip84, Bip84Coins.LITECOIN_TESTNET, "ttub", "ttpv"),
]


@pytest.mark.parametrize("bip_cls,coin,form,name", PRIVATE_CASES)
def test_every_extended_private_key_form_is_refused(bip_cls, coin, form, name):
    secret = account_private(account(bip_cls, coin), form)
    assert secret.startswith(name)
    assert keys.secret_material_kind(secret) == f"an extended private key ({name})"
    network = "testnet" if form in ("tpub", "vpub", "upub", "ttub") else "mainnet"
    chain = "litecoin" if form in ("Ltub", "Mtub", "ttub") else "bitcoin"
    with pytest.raises(keys.KeyMaterialError) as err:
        utxo_keys.utxo_account_parse(chain=chain, value=secret, network=network, script_type="p2wpkh")
    assert err.value.private
    assert name in str(err.value)
    assert secret not in str(err.value) and secret[4:20] not in str(err.value)
    with pytest.raises(keys.KeyMaterialError) as err:
        ethereum_keys.ethereum_account_parse(value=secret)
    assert err.value.private


def test_private_keys_of_unknown_versions_and_inside_descriptors_are_refused():
    acc = account(Bip84, Bip84Coins.BITCOIN)
    node = acc.Bip32Object().PrivateKey()
    odd = Bip32PrivateKeySerializer.Serialize(
        node.KeyObject(), node.Data(), Bip32KeyNetVersions(b"\x01\x02\x03\x04", b"\x05\x06\x07\x08")
    )
    assert keys.secret_material_kind(odd) == "an extended private key (version 0x05060708)"
    # A private key wearing a public version is still private.
    disguised = Bip32PrivateKeySerializer.Serialize(
        node.KeyObject(), node.Data(), Bip32KeyNetVersions(b"\x05\x06\x07\x08", bytes.fromhex("04b24746"))
    )
    assert disguised.startswith("zpub")
    assert keys.secret_material_kind(disguised) == "an extended private key (version 0x04b24746)"
    xprv = account_private(acc, "xpub")
    descriptor = f"wpkh([73c5da0a/84h/0h/0h]{xprv}/0/*)#abcdefgh"
    assert keys.secret_material_kind(descriptor) == "an extended private key (xprv)"
    # The public descriptor is not a secret (but is not a bare key either).
    xpub = account_public(acc, "xpub")
    assert keys.secret_material_kind(f"wpkh([73c5da0a/84h/0h/0h]{xpub}/0/*)") is None
    with pytest.raises(keys.KeyMaterialError) as err:
        utxo_keys.utxo_account_parse(
            chain="bitcoin", value=f"wpkh({xpub}/0/*)", network="mainnet", script_type="p2wpkh"
        )
    assert not err.value.private


def test_other_secrets_are_recognised():
    raw = full_node(account(Bip84, Bip84Coins.BITCOIN), 0).PrivateKey().Raw().ToBytes()
    assert keys.secret_material_kind(WifEncoder.Encode(raw, net_ver=b"\x80")) == "a WIF private key"
    assert keys.secret_material_kind(WifEncoder.Encode(raw, net_ver=b"\xef")) == "a WIF private key"
    assert keys.secret_material_kind(MNEMONIC) == "a seed phrase (12 words)"
    assert keys.secret_material_kind("0x" + raw.hex()).startswith("a raw 32-byte hex key")
    assert keys.secret_material_kind(raw.hex(), hex32_is_secret=False) is None
    pair = Keypair()
    assert keys.secret_material_kind(str(pair)).startswith("a Solana keypair")
    assert keys.secret_material_kind(json.dumps(list(bytes(pair)))).startswith("a Solana keypair file")
    # Public material is not a secret.
    for public in (
        account(Bip84, Bip84Coins.BITCOIN).PublicKey().ToExtended(),
        BIP84_FIRST,
        ETH_FIRST,
        str(pair.pubkey()),
        str(Seed().public_address()),
        "",
    ):
        assert keys.secret_material_kind(public) is None


def test_malformed_public_material_is_refused():
    acc = account(Bip84, Bip84Coins.BITCOIN)
    zpub = acc.PublicKey().ToExtended()
    mangled = zpub[:40] + ("A" if zpub[40] != "A" else "B") + zpub[41:]
    master = Bip84.FromSeed(SEED, Bip84Coins.BITCOIN).PublicKey().ToExtended()  # depth 0
    change = acc.Change(Bip44Changes.CHAIN_EXT).PublicKey().ToExtended()  # depth 4
    multisig = account_public(acc, "zpub")
    multisig = Base58Encoder.CheckEncode(bytes.fromhex("02aa7ed3") + _payload(multisig)[4:])
    cases = [
        (mangled, "not an extended public key"),
        ("zpub-not-really", "not an extended public key"),
        (master, "depth 0"),
        (change, "depth 4"),
        (multisig, "multisig"),
    ]
    for value, message in cases:
        with pytest.raises(keys.KeyMaterialError, match=message) as err:
            utxo_keys.utxo_account_parse(chain="bitcoin", value=value, network="mainnet", script_type="p2wpkh")
        assert not err.value.private
    with pytest.raises(keys.KeyMaterialError, match="mainnet key \\(zpub\\)"):
        utxo_keys.utxo_account_parse(chain="bitcoin", value=zpub, network="regtest", script_type="p2wpkh")
    vpub = account(Bip84, Bip84Coins.BITCOIN_TESTNET).PublicKey().ToExtended()
    with pytest.raises(keys.KeyMaterialError, match="testnet key \\(vpub\\)"):
        utxo_keys.utxo_account_parse(chain="bitcoin", value=vpub, network="mainnet", script_type="p2wpkh")
    with pytest.raises(keys.KeyMaterialError, match="p2wpkh key"):
        utxo_keys.utxo_account_parse(chain="bitcoin", value=zpub, network="mainnet", script_type="p2pkh")
    with pytest.raises(keys.KeyMaterialError, match="not a bitcoin network"):
        utxo_keys.utxo_account_parse(chain="bitcoin", value=zpub, network="mainnett", script_type="p2wpkh")


def _payload(extended: str) -> bytes:
    from bip_utils import Base58Decoder

    return Base58Decoder.CheckDecode(extended)


def test_index_bounds():
    acct = utxo_keys.utxo_account_parse(
        chain="bitcoin",
        value=account(Bip84, Bip84Coins.BITCOIN).PublicKey().ToExtended(),
        network="mainnet",
        script_type="p2wpkh",
    )
    for bad in (-1, 2**31):
        with pytest.raises(ValueError):
            acct.destination(bad)


# --- Monero --------------------------------------------------------------------


@pytest.mark.parametrize(
    "net,name,coin",
    [
        ("main", "mainnet", MoneroCoins.MONERO_MAINNET),
        ("stage", "stagenet", MoneroCoins.MONERO_STAGENET),
        ("test", "testnet", MoneroCoins.MONERO_TESTNET),
    ],
)
def test_monero_subaddresses_equal_the_wallets_own(net, name, coin):
    seed = Seed()  # a fresh random wallet
    primary = str(seed.public_address(net=net))
    acct = monero_keys.monero_account_parse(address=primary, view_key=seed.secret_view_key())
    assert acct.network == name and acct.address == primary
    full = Wallet(OfflineWallet(primary, view_key=seed.secret_view_key(), spend_key=seed.secret_spend_key()))
    other = Monero.FromPrivateSpendKey(bytes.fromhex(seed.secret_spend_key()), coin)
    assert other.PrimaryAddress() == primary
    seen = set()
    for minor in (1, 2, 3, 50, 2**32 - 1):
        sub = acct.subaddress(major=0, minor=minor)
        assert sub == str(full.get_address(0, minor))
        assert sub == other.Subaddress(minor, 0)
        seen.add(sub)
    assert len(seen) == 5 and primary not in seen
    with pytest.raises(ValueError, match="primary address"):
        acct.subaddress(major=0, minor=0)


def test_monero_refusals():
    seed, other = Seed(), Seed()
    primary = str(seed.public_address())
    with pytest.raises(keys.KeyMaterialError, match="SPEND key") as err:
        monero_keys.monero_account_parse(address=primary, view_key=seed.secret_spend_key())
    assert err.value.private
    assert seed.secret_spend_key() not in str(err.value)
    with pytest.raises(keys.KeyMaterialError, match="seed phrase \\(25 words\\)") as err:
        monero_keys.monero_account_parse(address=primary, view_key=seed.phrase)
    assert err.value.private
    with pytest.raises(keys.KeyMaterialError, match="does not belong"):
        monero_keys.monero_account_parse(address=primary, view_key=other.secret_view_key())
    with pytest.raises(keys.KeyMaterialError, match="not a reduced scalar"):
        monero_keys.monero_account_parse(address=primary, view_key="ff" * 32)
    with pytest.raises(keys.KeyMaterialError, match="64 hex digits"):
        monero_keys.monero_account_parse(address=primary, view_key="abc")
    wallet = Wallet(OfflineWallet(primary, view_key=seed.secret_view_key()))
    with pytest.raises(keys.KeyMaterialError, match="is a subaddress"):
        monero_keys.monero_address_parse(str(wallet.get_address(0, 1)))
    with pytest.raises(keys.KeyMaterialError, match="integrated address"):
        monero_keys.monero_address_parse(str(wallet.address().with_payment_id("00" * 8)))
    with pytest.raises(keys.KeyMaterialError, match="not a Monero address"):
        monero_keys.monero_address_parse(primary[:-1] + ("1" if primary[-1] != "1" else "2"))
    with pytest.raises(keys.KeyMaterialError, match="seed phrase") as err:
        monero_keys.monero_address_parse(seed.phrase)
    assert err.value.private


# --- Solana --------------------------------------------------------------------


def test_solana_recipient_and_references():
    recipient = Keypair().pubkey()
    parsed = solana_keys.solana_recipient_parse(value=f" {recipient}\n")
    assert parsed.address == str(recipient)
    refs = {solana_keys.solana_reference_new() for _ in range(50)}
    assert len(refs) == 50
    for ref in refs:
        assert len(bytes(Pubkey.from_string(ref))) == 32
        assert str(Pubkey.from_string(ref)) == ref


def test_solana_refusals():
    pair = Keypair()
    for secret in (str(pair), json.dumps(list(bytes(pair))), MNEMONIC):
        with pytest.raises(keys.KeyMaterialError) as err:
            solana_keys.solana_recipient_parse(value=secret)
        assert err.value.private
        assert str(pair) not in str(err.value)
    for bad in ("not-an-address", "1111", ETH_FIRST):
        with pytest.raises(keys.KeyMaterialError, match="not a Solana address") as err:
            solana_keys.solana_recipient_parse(value=bad)
        assert not err.value.private
