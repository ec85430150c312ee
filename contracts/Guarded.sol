// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/// The contract the demo's sidecar protects. Its assertions (see
/// config/example-sidecar.toml): no call to it may revert, and `sweep` is
/// forbidden. Honest users deposit and poke; the attacker pokes 13 (which
/// reverts) and sweeps.
contract Guarded {
    mapping(address => uint256) public balanceOf;
    uint256 public pokes;

    function deposit() external payable {
        balanceOf[msg.sender] += msg.value;
    }

    function poke(uint256 x) external {
        require(x != 13, "unlucky");
        pokes += x;
    }

    function sweep(uint256 salt) external {
        pokes += salt;
    }
}
