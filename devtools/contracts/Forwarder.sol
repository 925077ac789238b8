// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

/// @title Pays ether on by internal calls, the way smart-contract wallets and
/// exchanges' payout contracts do: the payee's address never appears as a
/// transaction's `to`, only inside its execution.
contract Forwarder {
    error PaymentFailed(address to, uint256 value);
    error LengthMismatch();
    error Refused();

    /// Sends all of msg.value to `to`.
    function forward(address payable to) external payable {
        _pay(to, msg.value);
    }

    /// Sends `values[i]` to `to[i]`; what is left of msg.value stays here.
    function split(address payable[] calldata to, uint256[] calldata values) external payable {
        if (to.length != values.length) revert LengthMismatch();
        for (uint256 i = 0; i < to.length; i++) {
            _pay(to[i], values[i]);
        }
    }

    /// Pays `always` `alwaysValue`, and `until` the rest only while the block is
    /// no later than `lastBlock` (else the rest stays here): the same signed
    /// transaction, mined again in a later block after a reorg, pays less.
    function splitUntil(address payable always, uint256 alwaysValue, address payable until, uint256 lastBlock)
        external
        payable
    {
        _pay(always, alwaysValue);
        if (block.number <= lastBlock) {
            _pay(until, msg.value - alwaysValue);
        }
    }

    /// Sends msg.value to `to` through another forwarder: a transfer two calls deep.
    function forwardVia(Forwarder next, address payable to) external payable {
        next.forward{value: msg.value}(to);
    }

    /// Pays `to`, then reverts the whole transaction: the receipt has status 0
    /// and the payment never happened, although a trace shows the inner call.
    function forwardThenRevert(address payable to) external payable {
        _pay(to, msg.value);
        revert Refused();
    }

    /// Pays `good` in full and `bad` in a call that reverts on its own while the
    /// transaction succeeds: only `good` is paid.
    function forwardWithFailedInner(address payable good, address payable bad) external payable {
        uint256 half = msg.value / 2;
        _pay(good, half);
        try this.forwardThenRevert{value: msg.value - half}(bad) {} catch {}
    }

    /// Sends this contract's whole balance (plus msg.value) to `to` with
    /// SELFDESTRUCT, which moves ether without a call.
    function destroyTo(address payable to) external payable {
        selfdestruct(to);
    }

    receive() external payable {}

    function _pay(address payable to, uint256 value) private {
        (bool ok, ) = to.call{value: value}("");
        if (!ok) revert PaymentFailed(to, value);
    }
}
