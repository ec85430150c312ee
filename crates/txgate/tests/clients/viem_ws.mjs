// viem over its webSocket transport, through txgate: subscribes to new
// heads, sends a signed transfer, waits for its receipt and for the head of
// its block on the same subscription. Prints one JSON line; exits non-zero
// on failure or after 30 s.
// Usage: node viem_ws.mjs WS_URL PRIVATE_KEY TO
import { createPublicClient, createWalletClient, parseEther, webSocket } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { foundry } from "viem/chains";

const [url, key, to] = process.argv.slice(2);
const timer = setTimeout(() => {
  console.error("viem: timed out");
  process.exit(2);
}, 30_000);

const transport = webSocket(url);
const account = privateKeyToAccount(key);
const client = createPublicClient({ chain: foundry, transport });
const wallet = createWalletClient({ account, chain: foundry, transport });

const heads = [];
let headSeen;
const seen = new Promise((resolve) => (headSeen = resolve));
const unwatch = client.watchBlockNumber({
  poll: false,
  onBlockNumber: (n) => {
    heads.push(n);
    headSeen();
  },
  onError: (e) => {
    console.error(`viem: subscription failed: ${e.message}`);
    process.exit(1);
  },
});

const hash = await wallet.sendTransaction({ to, value: parseEther("1") });
const receipt = await client.waitForTransactionReceipt({ hash });
await seen;
while (!heads.some((n) => n >= receipt.blockNumber)) {
  await new Promise((r) => setTimeout(r, 50));
}
unwatch();
console.log(
  JSON.stringify({
    hash,
    status: receipt.status,
    block: Number(receipt.blockNumber),
    heads: heads.map(Number),
  }),
);
clearTimeout(timer);
process.exit(0);
