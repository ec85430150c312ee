"""web3.py over its WebSocketProvider, through txgate: subscribes to new
heads, signs and sends a transfer with eth_sendRawTransaction, waits for its
receipt and for the head of its block on the subscription. Prints one JSON
line; exits non-zero on failure or after 30 s.

Usage: python web3_ws.py WS_URL PRIVATE_KEY TO
"""

import asyncio
import json
import sys

from web3 import AsyncWeb3, WebSocketProvider


async def main(url: str, key: str, to: str) -> None:
    async with AsyncWeb3(WebSocketProvider(url)) as w3:
        subscription = await w3.eth.subscribe("newHeads")
        account = w3.eth.account.from_key(key)
        nonce = await w3.eth.get_transaction_count(account.address)
        tx = {
            "type": 2,
            "chainId": await w3.eth.chain_id,
            "nonce": nonce,
            "to": AsyncWeb3.to_checksum_address(to),
            "value": 10**18,
            "gas": 21_000,
            "maxFeePerGas": 30 * 10**9,
            "maxPriorityFeePerGas": 10**9,
        }
        signed = account.sign_transaction(tx)
        tx_hash = await w3.eth.send_raw_transaction(signed.raw_transaction)
        receipt = await w3.eth.wait_for_transaction_receipt(tx_hash, timeout=20)
        heads = []
        async for message in w3.socket.process_subscriptions():
            if message["subscription"] != subscription:
                continue
            heads.append(int(message["result"]["number"]))
            if heads[-1] >= receipt["blockNumber"]:
                break
        await w3.eth.unsubscribe(subscription)
        print(json.dumps({
            "hash": "0x" + tx_hash.hex().removeprefix("0x"),
            "status": receipt["status"],
            "block": receipt["blockNumber"],
            "heads": heads,
        }))


if __name__ == "__main__":
    asyncio.run(asyncio.wait_for(main(*sys.argv[1:4]), 30))
