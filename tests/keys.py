"""Watch-only key material generated for the test run (never a real wallet's)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from bip_utils import Bip39MnemonicGenerator, Bip39SeedGenerator, Bip44, Bip44Coins, Bip84, Bip84Coins
from monero.seed import Seed
from solders.keypair import Keypair


@dataclass(frozen=True)
class WatchOnly:
    btc_zpub: str
    ltc_zpub: str
    eth_xpub: str
    xmr_address: str
    xmr_view_key: str
    sol_recipient: str

    def settings(self) -> dict[str, str]:
        return {
            "BTC_XPUB": self.btc_zpub,
            "BTC_NETWORK": "mainnet",
            "LTC_XPUB": self.ltc_zpub,
            "LTC_NETWORK": "mainnet",
            "ETH_XPUB": self.eth_xpub,
            "ETH_CHAIN_ID": 1,
            "XMR_ADDRESS": self.xmr_address,
            "XMR_VIEW_KEY": self.xmr_view_key,
            "SOL_RECIPIENT": self.sol_recipient,
        }


@cache
def watch_only() -> WatchOnly:
    seed = Bip39SeedGenerator(Bip39MnemonicGenerator().FromWordsNumber(12)).Generate()

    def account_pub(cls, coin) -> str:
        return cls.FromSeed(seed, coin).Purpose().Coin().Account(0).PublicKey().ToExtended()

    xmr = Seed()
    return WatchOnly(
        btc_zpub=account_pub(Bip84, Bip84Coins.BITCOIN),
        ltc_zpub=account_pub(Bip84, Bip84Coins.LITECOIN),
        eth_xpub=account_pub(Bip44, Bip44Coins.ETHEREUM),
        xmr_address=str(xmr.public_address()),
        xmr_view_key=xmr.secret_view_key(),
        sol_recipient=str(Keypair().pubkey()),
    )


# Round figures for quotes in tests; exchange rates come from MANUAL_RATES_USD.
TEST_RATES = "BTC=95000,ETH=3500,USDT=1,USDC=1,XMR=180,SOL=150,LTC=90"
