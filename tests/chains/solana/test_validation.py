"""Validation of a SOL payment as Solana Pay's validateTransfer does it, on
real transactions (signed with solders, executed by LiteSVM) read back through
the loopback node's getTransaction."""

from __future__ import annotations

import copy

import pytest
from solders.keypair import Keypair

from billing.chains.solana.transactions import (
    SYSTEM_PROGRAM,
    Instruction,
    MalformedTransaction,
    SolanaTransaction,
    transfer_validate,
)


@pytest.fixture
def fetch(sol_rpc):
    def get(signature: str) -> dict:
        params = {"encoding": "json", "commitment": "confirmed", "maxSupportedTransactionVersion": 0}
        return sol_rpc.call("getTransaction", signature, params)

    return get


def check(fetch, signature: str, merchant, references):
    tx = SolanaTransaction.from_rpc(fetch(signature), signature=signature)
    return transfer_validate(tx, recipient=str(merchant.pubkey()), references={str(r) for r in references})


def test_legacy_transfer_counts_what_the_recipient_received_not_the_debit_or_fee(sol_ledger, fetch, payer, merchant):
    reference = Keypair().pubkey()
    before = sol_ledger.balance(payer.pubkey())
    sig = sol_ledger.pay(payer, merchant.pubkey(), 1_234_567, references=[reference])
    assert before - sol_ledger.balance(payer.pubkey()) == 1_234_567 + 5000  # the sender paid the fee too
    result = check(fetch, sig, merchant, [reference])
    assert result.received == 1_234_567 and result.unmatched == 0 and not result.rejected
    [part] = result.parts
    assert (part.reference, part.amount) == (str(reference), 1_234_567)
    tx = SolanaTransaction.from_rpc(fetch(sig))
    assert tx.version == "legacy" and tx.account_keys[part.position] == str(reference)
    assert tx.fee == 5000 and tx.balance_change(str(payer.pubkey())) == -(1_234_567 + 5000)


def test_version_0_with_the_reference_only_in_a_lookup_table(sol_ledger, fetch, payer, merchant):
    reference = Keypair().pubkey()
    table = sol_ledger.lookup_table_create(payer, [reference])
    sig = sol_ledger.pay(payer, merchant.pubkey(), 900_000, references=[reference], version=0, lookup_tables=[table])
    raw = fetch(sig)
    assert str(reference) not in raw["transaction"]["message"]["accountKeys"]
    assert raw["meta"]["loadedAddresses"]["readonly"] == [str(reference)]
    result = check(fetch, sig, merchant, [reference])
    assert [(p.reference, p.amount) for p in result.parts] == [(str(reference), 900_000)]
    tx = SolanaTransaction.from_rpc(raw)
    assert tx.version == "0" and result.parts[0].position >= tx.static_keys


def test_version_0_with_the_recipient_loaded_from_a_lookup_table(sol_ledger, fetch, payer, merchant):
    reference = Keypair().pubkey()
    table = sol_ledger.lookup_table_create(payer, [merchant.pubkey(), reference])
    sig = sol_ledger.pay(payer, merchant.pubkey(), 333_000, references=[reference], version=0, lookup_tables=[table])
    tx = SolanaTransaction.from_rpc(fetch(sig))
    index = tx.key_index(str(merchant.pubkey()))
    assert index == tx.static_keys  # the first loaded (writable) address
    result = check(fetch, sig, merchant, [reference])
    assert result.recipient_position == index and result.parts[0].amount == 333_000


def test_failed_transaction_pays_nothing_even_with_the_reference(sol_ledger, fetch, merchant):
    reference = Keypair().pubkey()
    poor = sol_ledger.keypair_funded(2_000_000)
    sig = sol_ledger.pay(poor, merchant.pubkey(), 50_000_000, references=[reference])
    result = check(fetch, sig, merchant, [reference])
    assert result.parts == () and result.unmatched == 0 and not result.counts
    assert result.rejected.startswith("failed:") and result.references == (str(reference),)


def test_transfer_without_a_known_reference_is_unmatched(sol_ledger, fetch, payer, merchant):
    plain = sol_ledger.pay(payer, merchant.pubkey(), 42_000)
    result = check(fetch, plain, merchant, [Keypair().pubkey()])
    assert result.parts == () and result.unmatched == 42_000 and result.counts
    strangers = sol_ledger.pay(payer, merchant.pubkey(), 43_000, references=[Keypair().pubkey()])
    assert check(fetch, strangers, merchant, []).unmatched == 43_000


def test_two_invoices_in_one_transaction_each_get_their_own_part(sol_ledger, fetch, payer, merchant):
    first, second = Keypair().pubkey(), Keypair().pubkey()
    instructions = [
        *sol_ledger.payment_instructions(
            payer=payer.pubkey(), recipient=merchant.pubkey(), lamports=700_000, references=[first]
        ),
        *sol_ledger.payment_instructions(
            payer=payer.pubkey(), recipient=merchant.pubkey(), lamports=300_000, references=[second]
        ),
    ]
    sig = sol_ledger.submit(sol_ledger.build(payer, instructions))
    result = check(fetch, sig, merchant, [first, second])
    assert result.received == 1_000_000 and result.unmatched == 0
    assert {p.reference: p.amount for p in result.parts} == {str(first): 700_000, str(second): 300_000}
    assert len({p.position for p in result.parts}) == 2


def test_several_references_on_one_transfer_cannot_be_told_apart(sol_ledger, fetch, payer, merchant):
    first, second = Keypair().pubkey(), Keypair().pubkey()
    sig = sol_ledger.pay(payer, merchant.pubkey(), 500_000, references=[first, second])
    result = check(fetch, sig, merchant, [first, second])
    assert result.parts == () and result.unmatched == 500_000


def test_one_reference_anywhere_in_the_transaction_takes_the_whole_amount(sol_ledger, fetch, payer, merchant):
    """validateTransfer only asks that the reference be among the account keys."""
    reference = Keypair().pubkey()
    transfer = sol_ledger.payment_instructions(payer=payer.pubkey(), recipient=merchant.pubkey(), lamports=600_000)
    memo = sol_ledger.payment_instructions(
        payer=payer.pubkey(), recipient=merchant.pubkey(), lamports=1, references=[reference], memo="x"
    )
    sig = sol_ledger.submit(sol_ledger.build(payer, [*transfer, *memo]))
    assert [p.amount for p in check(fetch, sig, merchant, [reference]).parts] == [600_001]


def test_recipient_paying_out_receives_nothing(sol_ledger, fetch, payer, merchant):
    reference = Keypair().pubkey()
    sig = sol_ledger.pay(merchant, payer.pubkey(), 10_000, references=[reference])
    result = check(fetch, sig, merchant, [reference])
    assert result.received == -(10_000 + 5000) and result.rejected == "nothing received" and not result.counts
    elsewhere = sol_ledger.pay(payer, Keypair().pubkey(), 5_000_000, references=[reference])
    assert check(fetch, elsewhere, merchant, [reference]).rejected == "recipient not found"


def test_cross_program_transfers_count_for_the_calling_instructions_references():
    recipient, first, second, payer, program = (str(Keypair().pubkey()) for _ in range(5))
    keys = (payer, recipient, first, second, program, SYSTEM_PROGRAM)

    def system_transfer(lamports: int) -> Instruction:
        return Instruction(
            SYSTEM_PROGRAM, (payer, recipient), (2).to_bytes(4, "little") + lamports.to_bytes(8, "little")
        )

    tx = SolanaTransaction(
        signature="s",
        slot=1,
        block_time=None,
        version="legacy",
        recent_blockhash="h",
        err=None,
        fee=5000,
        account_keys=keys,
        static_keys=len(keys),
        pre_balances=(10**9, 10**6, 0, 0, 1, 1),
        post_balances=(10**9 - 3005, 10**6 + 3000, 0, 0, 1, 1),
        instructions=(
            Instruction(program, (payer, recipient, first), b""),
            Instruction(program, (payer, recipient, second), b""),
        ),
        inner_instructions=((0, system_transfer(1000)), (1, system_transfer(2000))),
    )
    result = transfer_validate(tx, recipient=recipient, references={first, second})
    assert {p.reference: p.amount for p in result.parts} == {first: 1000, second: 2000}


def test_answers_that_cannot_be_read_are_refused(sol_ledger, fetch, payer, merchant):
    reference = Keypair().pubkey()
    table = sol_ledger.lookup_table_create(payer, [reference])
    sig = sol_ledger.pay(payer, merchant.pubkey(), 1000, references=[reference], version=0, lookup_tables=[table])
    good = fetch(sig)
    no_loaded = copy.deepcopy(good)
    del no_loaded["meta"]["loadedAddresses"]
    with pytest.raises(MalformedTransaction, match="lookup tables"):
        SolanaTransaction.from_rpc(no_loaded)
    short = copy.deepcopy(good)
    short["meta"]["postBalances"].pop()
    with pytest.raises(MalformedTransaction, match="post-balances"):
        SolanaTransaction.from_rpc(short)
    with pytest.raises(MalformedTransaction, match="asked for"):
        SolanaTransaction.from_rpc(good, signature=str(Keypair().sign_message(b"other")))
    no_meta = {**good, "meta": None}
    with pytest.raises(MalformedTransaction, match="meta"):
        SolanaTransaction.from_rpc(no_meta)
    with pytest.raises(MalformedTransaction):
        SolanaTransaction.from_rpc({"slot": "x"})
