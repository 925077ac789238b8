"""A private anvil node (Foundry's Ethereum dev node) for the tests, the benchmark and the sandbox.

`AnvilNode.start()` runs anvil in a temporary directory on a free loopback
port (anvil picks it: `--port 0`, read back from its log), with mining on
demand by default, and `stop()` ends it and removes the directory. The process
is tied to ours (it gets SIGTERM if we die), so no node outlives the run.

The test contracts are Solidity sources in devtools/contracts/, compiled by
`contracts_compile()` with the npm build of solc (pinned in
devtools/node/package-lock.json, installed into .tools/ by
tests/ensure-chain-nodes.sh); compiled output is cached under .tools/ by the
hash of the sources and the compiler version.

Payers are anvil's unlocked dev accounts, used through `eth_sendTransaction`:
no private key is ever handled here. Deposit addresses the tests pay come from
a watch-only key, as on the server.

Nothing here runs in production.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from web3 import HTTPProvider, Web3

from devtools.processes import die_with_parent

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
TOOLS = REPO_ROOT / ".tools"
CONTRACTS_DIR = Path(__file__).resolve().parent / "contracts"
MULTICALL3_ADDRESS = "0xcA11bde05977b3631167028862bE2a173976CA11"
DEFAULT_CHAIN_ID = 31337
INSTALL_HINT = (
    "anvil and solc are needed for the Ethereum tests and the sandbox: run `bash tests/ensure-chain-nodes.sh` "
    "(it installs them from npm into .tools/), or put Foundry's anvil on PATH."
)
_LISTENING = re.compile(r"Listening on ([0-9.]+):(\d+)")
START_TIMEOUT = 30.0


class NodeNotInstalled(RuntimeError):
    pass


class NodeStartError(RuntimeError):
    pass


class CompileError(RuntimeError):
    pass


def anvil_binary() -> str:
    """The anvil to run: the pinned one in .tools/, else one on PATH; NodeNotInstalled otherwise."""
    pinned = TOOLS / "node_modules" / ".bin" / "anvil"
    if pinned.is_file() and os.access(pinned, os.X_OK):
        return str(pinned)
    found = shutil.which("anvil")
    if found:
        return found
    raise NodeNotInstalled(INSTALL_HINT)


def anvil_installed() -> bool:
    try:
        anvil_binary()
    except NodeNotInstalled:
        return False
    return True


# --- Contracts ------------------------------------------------------------------


@dataclass(frozen=True)
class Compiled:
    name: str
    abi: list
    bytecode: str  # creation code, 0x hex
    runtime: str  # deployed code, 0x hex


def _solc_module() -> Path:
    module = TOOLS / "node_modules" / "solc"
    if not (module / "soljson.js").is_file() or not shutil.which("node"):
        raise NodeNotInstalled(INSTALL_HINT)
    return module


_COMPILE_JS = (
    "const solc = require(process.argv[1]); let input = ''; process.stdin.setEncoding('utf8');"
    "process.stdin.on('data', d => { input += d; }).on('end', () => {"
    " process.stdout.write(JSON.stringify({version: solc.version(), output: JSON.parse(solc.compile(input))})); });"
)


def solc_standard_input(sources: dict[str, str]) -> dict:
    return {
        "language": "Solidity",
        "sources": {name: {"content": text} for name, text in sorted(sources.items())},
        "settings": {
            "optimizer": {"enabled": True, "runs": 200},
            "outputSelection": {"*": {"*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"]}},
        },
    }


def solc_run(standard_input: dict) -> tuple[str, dict]:
    """Run the pinned solc on a standard-JSON input: (compiler version, standard-JSON output)."""
    module = _solc_module()
    done = subprocess.run(
        ["node", "-e", _COMPILE_JS, str(module)],
        input=json.dumps(standard_input),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise CompileError(f"solc failed: {done.stderr.strip()[-2000:]}")
    answer = json.loads(done.stdout)
    return answer["version"], answer["output"]


def _solc_version() -> str:
    package = json.loads((_solc_module() / "package.json").read_text())
    return str(package["version"])


@cache
def contracts_compile() -> dict[str, Compiled]:
    """Every contract in devtools/contracts/, by contract name (compiled once, then cached on disk)."""
    sources = {p.name: p.read_text() for p in sorted(CONTRACTS_DIR.glob("*.sol"))}
    standard_input = solc_standard_input(sources)
    key = hashlib.sha256(json.dumps([_solc_version(), standard_input], sort_keys=True).encode()).hexdigest()[:32]
    cache_file = TOOLS / "solc-cache" / f"{key}.json"
    if cache_file.is_file():
        output = json.loads(cache_file.read_text())
    else:
        _version, output = solc_run(standard_input)
        errors = [e["formattedMessage"] for e in output.get("errors", ()) if e.get("severity") == "error"]
        if errors:
            raise CompileError("\n".join(errors))
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(output))
        tmp.replace(cache_file)
    compiled: dict[str, Compiled] = {}
    for contracts in output["contracts"].values():
        for name, data in contracts.items():
            compiled[name] = Compiled(
                name=name,
                abi=data["abi"],
                bytecode="0x" + data["evm"]["bytecode"]["object"],
                runtime="0x" + data["evm"]["deployedBytecode"]["object"],
            )
    return compiled


# --- The node ---------------------------------------------------------------------


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@dataclass
class AnvilNode:
    process: subprocess.Popen | None  # None: a node started by someone else (`attach`)
    directory: Path | None
    url: str
    chain_id: int
    web3: Web3 = field(repr=False)
    _finalizer: Any = field(default=None, repr=False)
    _names: dict[str, str] = field(default_factory=dict, repr=False)  # contract address -> contract name

    @classmethod
    def start(
        cls,
        *,
        chain_id: int = DEFAULT_CHAIN_ID,
        automine: bool = False,
        slots_in_an_epoch: int | None = None,
        gas_limit: int | None = None,
        accounts: int = 10,
        balance_eth: int = 1_000_000,
        random_accounts: bool = True,
        extra_args: Sequence[str] = (),
    ) -> AnvilNode:
        """Start anvil on a free loopback port; it mines only on request unless `automine`.

        `slots_in_an_epoch` sets where the `finalized` tag stands: two epochs
        below the newest block (anvil's default epoch is 32 slots).
        `random_accounts`: dev accounts from a mnemonic made for this run
        (else anvil's fixed dev accounts, the same on every start: the sandbox
        keeps its chain across runs and wants the same payers).
        """
        binary = anvil_binary()
        directory = Path(tempfile.mkdtemp(prefix="anvil-"))
        args = [
            binary,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--chain-id",
            str(chain_id),
            "--accounts",
            str(accounts),
            "--balance",
            str(balance_eth),
        ]
        if random_accounts:
            args.append("--mnemonic-random")
        if not automine:
            args.append("--no-mining")
        if slots_in_an_epoch is not None:
            args += ["--slots-in-an-epoch", str(slots_in_an_epoch)]
        if gas_limit is not None:
            args += ["--gas-limit", str(gas_limit)]
        args += list(extra_args)
        log_path = directory / "anvil.log"
        with open(log_path, "wb") as out:
            process = subprocess.Popen(
                args,
                cwd=directory,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
            )
        try:
            port = cls._wait_listening(process, log_path)
        except BaseException:
            _kill(process)
            shutil.rmtree(directory, ignore_errors=True)
            raise
        url = f"http://127.0.0.1:{port}"
        web3 = Web3(HTTPProvider(url, request_kwargs={"timeout": 60}))
        node = cls(process=process, directory=directory, url=url, chain_id=chain_id, web3=web3)
        node._finalizer = weakref.finalize(node, _stop, process, directory)
        return node

    @classmethod
    def attach(cls, url: str) -> AnvilNode:
        """A handle on an anvil already running at `url` (stop() leaves it running)."""
        web3 = Web3(HTTPProvider(url, request_kwargs={"timeout": 60}))
        node = cls(process=None, directory=None, url=url, chain_id=0, web3=web3)
        node.chain_id = int(node.rpc("eth_chainId"), 16)
        return node

    @staticmethod
    def _wait_listening(process: subprocess.Popen, log_path: Path) -> int:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            text = log_path.read_text(errors="replace")
            match = _LISTENING.search(text)
            if match:
                return int(match.group(2))
            if process.poll() is not None:
                raise NodeStartError(f"anvil exited with {process.returncode}: {text.strip()[-2000:]}")
            time.sleep(0.05)
        raise NodeStartError(f"anvil did not start listening within {START_TIMEOUT:.0f}s")

    def stop(self) -> None:
        if self._finalizer is not None:
            self._finalizer()

    @property
    def running(self) -> bool:
        return self.process is None or self.process.poll() is None

    # --- raw RPC and chain control ----------------------------------------------------

    def rpc(self, method: str, *params: Any) -> Any:
        response = self.web3.provider.make_request(method, list(params))
        if "error" in response:
            raise RuntimeError(f"{method}: {response['error']}")
        return response["result"]

    @property
    def accounts(self) -> list[str]:
        return [Web3.to_checksum_address(a) for a in self.rpc("eth_accounts")]

    @property
    def payer(self) -> str:
        return self.accounts[0]

    def height(self) -> int:
        return int(self.rpc("eth_blockNumber"), 16)

    def block(self, height: int | str = "latest", *, full: bool = False) -> dict:
        tag = hex(height) if isinstance(height, int) else height
        return self.rpc("eth_getBlockByNumber", tag, full)

    def block_hash(self, height: int) -> str:
        return self.block(height)["hash"]

    def mine(self, blocks: int = 1) -> int:
        """Mine `blocks` blocks (with whatever is pending); the new height."""
        self.rpc("anvil_mine", hex(blocks))
        return self.height()

    def automine(self, on: bool) -> None:
        self.rpc("evm_setAutomine", on)

    def snapshot(self) -> str:
        return self.rpc("evm_snapshot")

    def revert(self, snapshot: str) -> None:
        if not self.rpc("evm_revert", snapshot):
            raise RuntimeError(f"anvil has no snapshot {snapshot}")

    def reorg(self, depth: int, transactions: Sequence[tuple[dict | str, int]] = ()) -> None:
        """Replace the newest `depth` blocks with as many new ones holding
        `transactions` (each a transaction request, or a signed raw transaction
        in hex to put the very same transaction back, and the offset of the new
        block, 0 = the lowest, that carries it)."""
        self.rpc("anvil_reorg", depth, [[tx, offset] for tx, offset in transactions])

    def mempool(self) -> list[str]:
        content = self.rpc("txpool_content")
        return [tx["hash"] for by_nonce in content.get("pending", {}).values() for tx in by_nonce.values()]

    def drop_pending(self) -> None:
        self.rpc("anvil_dropAllTransactions")

    def set_code(self, address: str, runtime: str) -> None:
        self.rpc("anvil_setCode", address, runtime)

    # --- transactions ------------------------------------------------------------------

    def send(self, tx: dict) -> str:
        """eth_sendTransaction from an unlocked account (default: the first); the hash."""
        request = {"from": self.payer, **tx}
        for key in ("value", "gas", "nonce", "maxFeePerGas", "maxPriorityFeePerGas"):
            if isinstance(request.get(key), int):
                request[key] = hex(request[key])
        return self.rpc("eth_sendTransaction", request)

    def send_eth(self, to: str, value: int, *, sender: str | None = None, **extra: Any) -> str:
        return self.send(
            {"to": Web3.to_checksum_address(to), "value": value, **({"from": sender} if sender else {}), **extra}
        )

    def receipt(self, txid: str) -> dict | None:
        return self.rpc("eth_getTransactionReceipt", txid)

    def balance(self, address: str, block: int | str = "latest") -> int:
        tag = hex(block) if isinstance(block, int) else block
        return int(self.rpc("eth_getBalance", Web3.to_checksum_address(address), tag), 16)

    def _contract_name(self, contract: str, name: str | None) -> str:
        found = name or self._names.get(contract.lower())
        if found is None:
            raise KeyError(f"which test contract is at {contract}? Give its name")
        return found

    def call_data(self, contract: str, function: str, *args: Any, name: str | None = None) -> str:
        """ABI-encoded call data of `function(*args)` on a deployed test contract."""
        compiled = contracts_compile()[self._contract_name(contract, name)]
        instance = self.web3.eth.contract(address=Web3.to_checksum_address(contract), abi=compiled.abi)
        return instance.encode_abi(function, args=list(args))

    def transact(
        self,
        contract: str,
        function: str,
        *args: Any,
        value: int = 0,
        gas: int | None = 1_000_000,
        sender: str | None = None,
        name: str | None = None,
    ) -> str:
        """Call a test contract's function in a transaction (pending until mined); the hash.

        `gas` is given so that a call that reverts is still sent (and mined
        with status 0) instead of being refused by gas estimation.
        """
        tx: dict[str, Any] = {
            "to": Web3.to_checksum_address(contract),
            "data": self.call_data(contract, function, *args, name=name),
        }
        if value:
            tx["value"] = value
        if gas is not None:
            tx["gas"] = gas
        if sender:
            tx["from"] = sender
        return self.send(tx)

    def view(self, contract: str, function: str, *args: Any, name: str | None = None) -> Any:
        compiled = contracts_compile()[self._contract_name(contract, name)]
        instance = self.web3.eth.contract(address=Web3.to_checksum_address(contract), abi=compiled.abi)
        return getattr(instance.functions, function)(*args).call()

    def deploy(self, name: str, *args: Any, sender: str | None = None) -> str:
        """Deploy a contract of devtools/contracts/ and mine it; its address (checksummed)."""
        compiled = contracts_compile()[name]
        factory = self.web3.eth.contract(abi=compiled.abi, bytecode=compiled.bytecode)
        data = factory.constructor(*args).data_in_transaction
        txid = self.send({"data": data, "gas": 5_000_000, **({"from": sender} if sender else {})})
        self.mine()
        receipt = self.receipt(txid)
        if not receipt or int(receipt["status"], 16) != 1:
            raise RuntimeError(f"deploying {name} failed: {receipt}")
        address = Web3.to_checksum_address(receipt["contractAddress"])
        self._names[address.lower()] = name
        return address

    def token_deploy(self, symbol: str, decimals: int = 6, *, name: str | None = None) -> str:
        return self.deploy("TestToken", name or f"Test {symbol}", symbol, decimals)

    def token_mint(self, token: str, to: str, amount: int) -> str:
        return self.transact(token, "mint", Web3.to_checksum_address(to), amount, name="TestToken")

    def token_transfer(self, token: str, to: str, amount: int, *, sender: str | None = None) -> str:
        return self.transact(token, "transfer", Web3.to_checksum_address(to), amount, sender=sender, name="TestToken")

    def token_balance(self, token: str, address: str) -> int:
        return int(self.view(token, "balanceOf", Web3.to_checksum_address(address), name="TestToken"))

    def multicall_install(self, address: str = MULTICALL3_ADDRESS) -> str:
        """Put the balance-reading subset of Multicall3 at its canonical address, as on real networks."""
        self.set_code(address, contracts_compile()["BalanceMulticall"].runtime)
        self._names[address.lower()] = "BalanceMulticall"
        return address


def _stop(process: subprocess.Popen, directory: Path) -> None:
    _kill(process)
    shutil.rmtree(directory, ignore_errors=True)
