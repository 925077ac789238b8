"""The loopback Solana node answers as a real cluster does: the shapes of
recorded answers (fixtures/, each naming its source), the node's paging,
commitment and blockhash rules, its error codes, batches, and 429s on demand."""

from __future__ import annotations

import pytest
from solders.keypair import Keypair
from solders.rpc.errors import UnsupportedTransactionVersionMessage
from solders.rpc.responses import (
    GetBlockHeightResp,
    GetGenesisHashResp,
    GetLatestBlockhashResp,
    GetSignaturesForAddressResp,
    GetSlotResp,
    GetTransactionResp,
    IsBlockhashValidResp,
)

from billing.chains.solana.cluster import MAX_PROCESSING_AGE
from devtools.solana_rpc import TransactionRejected
from tests.chains.solana.shapes import recorded, shape_mismatches


@pytest.fixture
def post(sol_node, sol_http):
    """Post one JSON-RPC call to the loopback node; its decoded answer."""

    def call(method: str, params: list | None = None) -> dict:
        body = {"jsonrpc": "2.0", "id": 1, "method": method}
        if params is not None:
            body["params"] = params
        response = sol_http.post(sol_node.url, json=body)
        assert response.status_code == 200
        return response.json()

    return call


def pay_with_reference(ledger, payer, merchant, *, lamports=250_000, version="legacy", tables=()):
    reference = Keypair().pubkey()
    sig = ledger.pay(payer, merchant.pubkey(), lamports, references=[reference], version=version, lookup_tables=tables)
    return sig, str(reference)


# --- Shapes of recorded answers ---------------------------------------------------------------


def answer_for(name: str, ledger, post, payer, merchant) -> tuple[dict, type]:
    """Ask the loopback node what the recording asked a real one, about our own ledger."""
    if name == "getSignaturesForAddress":
        _, reference = pay_with_reference(ledger, payer, merchant)
        ledger.finalize()
        return post(name, [reference, {"limit": 1}]), GetSignaturesForAddressResp
    if name == "getTransaction_json_legacy":
        sig, _ = pay_with_reference(ledger, payer, merchant)
        ledger.finalize()
        return post("getTransaction", [sig]), GetTransactionResp
    if name == "getTransaction_base64_v0":
        references = [Keypair().pubkey() for _ in range(3)]
        table = ledger.lookup_table_create(payer, [merchant.pubkey(), *references])
        sig = ledger.pay(payer, merchant.pubkey(), 250_000, references=references, version=0, lookup_tables=[table])
        ledger.finalize()
        params = [sig, {"encoding": "base64", "maxSupportedTransactionVersion": 0}]
        return post("getTransaction", params), GetTransactionResp
    if name == "getTransaction_jsonParsed_v0":
        table = ledger.lookup_table_create(payer, [payer.pubkey(), merchant.pubkey()])
        sig = ledger.pay(payer, merchant.pubkey(), 1000, version=0, lookup_tables=[table])
        params = [sig, {"encoding": "jsonParsed", "commitment": "confirmed", "maxSupportedTransactionVersion": 0}]
        return post("getTransaction", params), GetTransactionResp
    if name == "getLatestBlockhash":
        return post(name, [{"commitment": "confirmed"}]), GetLatestBlockhashResp
    if name == "isBlockhashValid":
        return post(name, [str(ledger.latest_blockhash), {"commitment": "processed"}]), IsBlockhashValidResp
    if name == "getGenesisHash":
        return post(name), GetGenesisHashResp
    if name == "getBlockHeight":
        return post(name), GetBlockHeightResp
    if name == "getSlot":
        return post(name), GetSlotResp
    raise AssertionError(name)


@pytest.mark.parametrize(
    "name",
    [
        "getSignaturesForAddress",
        "getTransaction_json_legacy",
        "getTransaction_base64_v0",
        "getTransaction_jsonParsed_v0",
        "getLatestBlockhash",
        "isBlockhashValid",
        "getGenesisHash",
        "getBlockHeight",
        "getSlot",
    ],
)
def test_answers_have_the_shape_of_recorded_ones(name, sol_ledger, post, payer, merchant):
    recording = recorded(name)
    answer, parser = answer_for(name, sol_ledger, post, payer, merchant)
    assert answer.get("result") is not None, answer
    assert shape_mismatches(recording["response"], answer) == []
    # The reference parser (solders: the node's own Rust types) reads both alike.
    import json

    assert isinstance(parser.from_json(json.dumps(recording["response"])), parser)
    assert isinstance(parser.from_json(json.dumps(answer)), parser)


def test_shape_comparison_catches_a_missing_or_retyped_field():
    recording = recorded("getSignaturesForAddress")["response"]
    entry = dict(recording["result"][0])
    del entry["confirmationStatus"]
    assert shape_mismatches(recording, {**recording, "result": [entry]}) == ["$.result[0].confirmationStatus: missing"]
    retyped = {**recording["result"][0], "slot": "114"}
    assert shape_mismatches(recording, {**recording, "result": [retyped]}) == [
        "$.result[0].slot: string where the recording has number"
    ]


def test_version_0_answer_lists_loaded_addresses_in_lookup_order(sol_ledger, post, payer, merchant):
    reference = Keypair().pubkey()
    table = sol_ledger.lookup_table_create(payer, [reference, merchant.pubkey()])
    sig = sol_ledger.pay(payer, merchant.pubkey(), 777_000, references=[reference], version=0, lookup_tables=[table])
    result = post("getTransaction", [sig, {"commitment": "confirmed", "maxSupportedTransactionVersion": 0}])["result"]
    message, meta = result["transaction"]["message"], result["meta"]
    assert result["version"] == 0
    assert message["addressTableLookups"] == [
        {"accountKey": str(table.key), "readonlyIndexes": [0], "writableIndexes": [1]}
    ]
    assert meta["loadedAddresses"] == {"readonly": [str(reference)], "writable": [str(merchant.pubkey())]}
    assert str(reference) not in message["accountKeys"] and str(merchant.pubkey()) not in message["accountKeys"]
    keys = message["accountKeys"] + meta["loadedAddresses"]["writable"] + meta["loadedAddresses"]["readonly"]
    recipient = keys.index(str(merchant.pubkey()))
    assert meta["postBalances"][recipient] - meta["preBalances"][recipient] == 777_000


# --- Paging, commitment, blockhashes ------------------------------------------------------------------


@pytest.mark.slow  # makes over a thousand transactions
def test_signatures_page_newest_first_with_before_until_and_limit(sol_ledger, post, payer):
    reference = Keypair().pubkey()
    other = sol_ledger.keypair_funded(10**9)
    sigs = [sol_ledger.pay(payer, other.pubkey(), 1, references=[reference]) for _ in range(1003)]
    address = str(reference)
    first = post("getSignaturesForAddress", [address, {"commitment": "confirmed"}])["result"]
    assert [e["signature"] for e in first] == sigs[::-1][:1000]
    assert {e["confirmationStatus"] for e in first} == {"confirmed"}
    rest = post("getSignaturesForAddress", [address, {"commitment": "confirmed", "before": first[-1]["signature"]}])[
        "result"
    ]
    assert [e["signature"] for e in rest] == sigs[2::-1]
    window = post(
        "getSignaturesForAddress",
        [address, {"commitment": "confirmed", "before": sigs[10], "until": sigs[5], "limit": 3}],
    )["result"]
    assert [e["signature"] for e in window] == [sigs[9], sigs[8], sigs[7]]
    # Nothing is final yet; an unknown `before` finds nothing, as on a node.
    assert post("getSignaturesForAddress", [address])["result"] == []
    unknown = str(Keypair().sign_message(b"never sent"))
    assert post("getSignaturesForAddress", [address, {"commitment": "confirmed", "before": unknown}])["result"] == []
    for limit in (0, 1001):
        error = post("getSignaturesForAddress", [address, {"limit": limit}])["error"]
        assert error == {"code": -32602, "message": "Invalid limit; max 1000"}


def test_commitment_levels_and_abandoned_forks(sol_ledger, post, payer, merchant):
    sig, reference = pay_with_reference(sol_ledger, payer, merchant, lamports=400_000)
    params = {"commitment": "confirmed", "maxSupportedTransactionVersion": 0}
    assert post("getTransaction", [sig, params])["result"]["slot"] == sol_ledger.transaction(sig).slot
    assert post("getTransaction", [sig, {**params, "commitment": "finalized"}])["result"] is None
    error = post("getTransaction", [sig, {**params, "commitment": "processed"}])["error"]
    assert error == {"code": -32602, "message": "Method does not support commitment below `confirmed`"}
    before = sol_ledger.balance(merchant.pubkey())
    sol_ledger.drop(sig)
    assert sol_ledger.balance(merchant.pubkey()) == before - 400_000
    assert post("getTransaction", [sig, params])["result"] is None
    assert post("getSignaturesForAddress", [reference, {"commitment": "confirmed"}])["result"] == []
    kept, _ = pay_with_reference(sol_ledger, payer, merchant)
    sol_ledger.finalize()
    assert post("getTransaction", [kept, {**params, "commitment": "finalized"}])["result"] is not None
    with pytest.raises(ValueError, match="finalized"):
        sol_ledger.drop(kept)


def test_blockhash_expires_after_150_blocks_at_the_asked_commitment(sol_ledger, post):
    blockhash = post("getLatestBlockhash", [{"commitment": "confirmed"}])["result"]["value"]
    sol_ledger.advance(MAX_PROCESSING_AGE)
    sol_ledger.finalize()
    valid = post("isBlockhashValid", [blockhash["blockhash"], {"commitment": "finalized"}])["result"]
    assert valid["value"] is True
    assert post("getBlockHeight", [{"commitment": "finalized"}])["result"] == blockhash["lastValidBlockHeight"]
    sol_ledger.advance(1)
    assert post("isBlockhashValid", [blockhash["blockhash"], {"commitment": "confirmed"}])["result"]["value"] is False
    assert post("isBlockhashValid", [blockhash["blockhash"], {"commitment": "finalized"}])["result"]["value"] is True
    sol_ledger.finalize()
    assert post("isBlockhashValid", [blockhash["blockhash"], {"commitment": "finalized"}])["result"]["value"] is False


def test_version_0_needs_max_supported_transaction_version(sol_ledger, sol_node, sol_http, post, payer, merchant):
    sig, _ = pay_with_reference(sol_ledger, payer, merchant, version=0)
    answer = post("getTransaction", [sig, {"commitment": "confirmed"}])
    assert answer["error"]["code"] == -32015
    assert '"maxSupportedTransactionVersion": 0' in answer["error"]["message"]
    parsed = GetTransactionResp.from_json(
        sol_http.post(
            sol_node.url,
            json={"jsonrpc": "2.0", "id": 1, "method": "getTransaction", "params": [sig, {"commitment": "confirmed"}]},
        ).text
    )
    assert isinstance(parsed, UnsupportedTransactionVersionMessage)
    legacy = post("getTransaction", [pay_with_reference(sol_ledger, payer, merchant)[0], {"commitment": "confirmed"}])
    assert "version" not in legacy["result"]


def test_failed_transfer_is_kept_with_its_error_and_fee(sol_ledger, post, merchant):
    poor = sol_ledger.keypair_funded(1_000_000)
    sig = sol_ledger.pay(poor, merchant.pubkey(), 5_000_000)
    result = post("getTransaction", [sig, {"commitment": "confirmed"}])["result"]
    assert result["meta"]["err"] == {"InstructionError": [0, {"Custom": 1}]}
    assert result["meta"]["status"] == {"Err": {"InstructionError": [0, {"Custom": 1}]}}
    assert result["meta"]["preBalances"][0] - result["meta"]["postBalances"][0] == result["meta"]["fee"] == 5000
    assert result["meta"]["postBalances"][1] == result["meta"]["preBalances"][1]
    listed = post("getSignaturesForAddress", [str(merchant.pubkey()), {"commitment": "confirmed"}])
    assert listed["result"][0]["err"] == {"InstructionError": [0, {"Custom": 1}]}
    # A payer the cluster does not know cannot even pay the fee: rejected, never in a block.
    with pytest.raises(TransactionRejected):
        sol_ledger.pay(Keypair(), merchant.pubkey(), 1)


def test_batches_errors_and_memos(sol_ledger, sol_node, sol_http, payer, merchant):
    reference = Keypair().pubkey()
    sol_ledger.pay(payer, merchant.pubkey(), 1000, references=[reference], memo="Invoice GRH-1")
    batch = [
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "getSignaturesForAddress",
            "params": [str(reference), {"commitment": "confirmed"}],
        },
        {"jsonrpc": "2.0", "id": 8, "method": "noSuchMethod", "params": []},
        {"jsonrpc": "2.0", "id": 9, "method": "getBalance", "params": ["not-a-key"]},
        {"jsonrpc": "2.0", "id": 10, "method": "getHealth"},
    ]
    answers = {a["id"]: a for a in sol_http.post(sol_node.url, json=batch).json()}
    assert answers[7]["result"][0]["memo"] == "[13] Invoice GRH-1"
    assert answers[8]["error"] == {"code": -32601, "message": "Method not found"}
    assert answers[9]["error"] == {"code": -32602, "message": "Invalid param: WrongSize"}
    assert answers[10]["result"] == "ok"
    assert sol_node.stats.calls["getSignaturesForAddress"] == 1 and sol_node.stats.http_requests == 1


def test_rate_limits_on_demand(sol_node, sol_http):
    sol_node.rate_limit(2, retry_after=1.5)
    sol_node.rate_limit(1, style="jsonrpc")
    body = {"jsonrpc": "2.0", "id": 1, "method": "getSlot"}
    for _ in range(2):
        limited = sol_http.post(sol_node.url, json=body)
        assert limited.status_code == 429 and limited.headers["Retry-After"] == "1.5"
        assert limited.json()["error"]["code"] == 429
    in_body = sol_http.post(sol_node.url, json=body)
    assert in_body.status_code == 200 and in_body.json()["error"]["code"] == 429
    assert isinstance(sol_http.post(sol_node.url, json=body).json()["result"], int)
    assert sol_node.stats.rate_limited == 3


# --- sendTransaction (what the sandbox's wallet pays with) ----------------------------------------


def test_send_transaction_checks_the_blockhash_and_simulates_first(sol_ledger, post, payer, merchant):
    import base64

    from bip_utils import Base58Encoder

    def encoded(tx, encoding="base64") -> str:
        raw = bytes(tx)
        return base64.b64encode(raw).decode() if encoding == "base64" else Base58Encoder.Encode(raw)

    reference = str(Keypair().pubkey())
    instructions = sol_ledger.payment_instructions(
        payer=payer.pubkey(), recipient=merchant.pubkey(), lamports=7_000, references=[reference]
    )
    good = sol_ledger.build(payer, instructions)
    answer = post("sendTransaction", [encoded(good, "base58")])
    assert answer["result"] == str(good.signatures[0])
    assert sol_ledger.transaction(answer["result"]).err is None

    stale = sol_ledger.build(
        payer, sol_ledger.payment_instructions(payer=payer.pubkey(), recipient=merchant.pubkey(), lamports=8_000)
    )
    sol_ledger.advance(MAX_PROCESSING_AGE + 1)
    sol_ledger.finalize()
    refused = post("sendTransaction", [encoded(stale), {"encoding": "base64"}])["error"]
    assert (refused["code"], refused["message"]) == (-32002, "Transaction simulation failed: Blockhash not found")
    assert refused["data"]["err"] == "BlockhashNotFound"

    poor = sol_ledger.keypair_funded(3_000_000)
    broke = sol_ledger.build(
        poor, sol_ledger.payment_instructions(payer=poor.pubkey(), recipient=merchant.pubkey(), lamports=9_000_000)
    )
    refused = post("sendTransaction", [encoded(broke), {"encoding": "base64"}])["error"]
    assert refused["code"] == -32002 and refused["data"]["err"] == {"InstructionError": [0, {"Custom": 1}]}
    assert sol_ledger.transaction(str(broke.signatures[0])) is None  # preflight kept it off the ledger
    landed = post("sendTransaction", [encoded(broke), {"encoding": "base64", "skipPreflight": True}])["result"]
    assert sol_ledger.transaction(landed).err == {"InstructionError": [0, {"Custom": 1}]}  # its fee was charged

    assert post("sendTransaction", ["not a transaction", {"encoding": "base64"}])["error"]["code"] == -32602


def test_a_blockhash_newer_than_the_finalized_bank_is_not_valid_there_yet(sol_ledger, post):
    # As a node answers: the finalized bank's queue holds only its own ancestors' blockhashes.
    sol_ledger.finalize()
    sol_ledger.advance(3)
    blockhash = post("getLatestBlockhash", [{"commitment": "confirmed"}])["result"]["value"]["blockhash"]
    assert post("isBlockhashValid", [blockhash, {"commitment": "confirmed"}])["result"]["value"] is True
    assert post("isBlockhashValid", [blockhash, {"commitment": "finalized"}])["result"]["value"] is False
    sol_ledger.finalize()
    assert post("isBlockhashValid", [blockhash, {"commitment": "finalized"}])["result"]["value"] is True
