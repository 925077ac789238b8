// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

/// @title The two functions of Multicall3 the balance-check mode calls, with
/// the same ABI: `aggregate3` over `getEthBalance`. Real networks have
/// Multicall3 deployed at 0xcA11bde05977b3631167028862bE2a173976CA11; the
/// test node gets this contract's runtime code put at that address.
contract BalanceMulticall {
    struct Call3 {
        address target;
        bool allowFailure;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    error CallFailed(uint256 index);

    function aggregate3(Call3[] calldata calls) external payable returns (Result[] memory returnData) {
        returnData = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; i++) {
            (bool ok, bytes memory data) = calls[i].target.call(calls[i].callData);
            if (!ok && !calls[i].allowFailure) revert CallFailed(i);
            returnData[i] = Result(ok, data);
        }
    }

    function getEthBalance(address addr) external view returns (uint256 balance) {
        balance = addr.balance;
    }
}
