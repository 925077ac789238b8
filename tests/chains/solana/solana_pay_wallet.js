// A Solana Pay wallet paying an invoice's transfer request, with the npm packages
// a wallet uses (@solana/pay 0.2, @solana/web3.js 1.x), against a Solana JSON-RPC
// node (the loopback node of `make run` in the tests):
//
//   node solana_pay_wallet.js <rpc url> '<solana: URI>'
//
// parseURL reads the request; a fresh keypair is funded by requestAirdrop;
// createTransfer builds the transfer (getAccountInfo, getLatestBlockhash); the
// wallet estimates its fee (getFeeForMessage), checks rent (getMinimumBalance-
// ForRentExemption) and simulates it (simulateTransaction), then
// sendAndConfirmTransaction sends it (sendTransaction) and waits for
// `confirmed` through signatureSubscribe on the node's websocket (RPC port + 1);
// validateTransfer and findReference check it as a merchant would; getBlock
// reads its block. Prints one JSON line; exits non-zero on any failure.
'use strict';

const { parseURL, createTransfer, validateTransfer, findReference } = require('@solana/pay');
const {
  Connection,
  Keypair,
  LAMPORTS_PER_SOL,
  PublicKey,
  sendAndConfirmTransaction,
} = require('@solana/web3.js');

async function main() {
  const [rpcUrl, uri] = process.argv.slice(2);
  if (!rpcUrl || !uri) throw new Error('usage: solana_pay_wallet.js <rpc url> <solana: URI>');
  const request = parseURL(uri);
  if (!(request.recipient instanceof PublicKey) || !request.amount) throw new Error('not a transfer request');
  const connection = new Connection(rpcUrl, 'confirmed');

  const wallet = Keypair.generate();
  const airdrop = await connection.requestAirdrop(wallet.publicKey, 2 * LAMPORTS_PER_SOL);
  const latest = await connection.getLatestBlockhash();
  const funded = await connection.confirmTransaction({ signature: airdrop, ...latest }, 'confirmed');
  if (funded.value.err) throw new Error(`airdrop failed: ${JSON.stringify(funded.value.err)}`);

  const transaction = await createTransfer(connection, wallet.publicKey, {
    recipient: request.recipient,
    amount: request.amount,
    splToken: request.splToken,
    reference: request.reference,
    memo: request.memo,
  });
  const fee = await transaction.getEstimatedFee(connection);
  const rentExempt = await connection.getMinimumBalanceForRentExemption(0);
  const simulated = await connection.simulateTransaction(transaction);
  if (simulated.value.err) throw new Error(`simulation failed: ${JSON.stringify(simulated.value.err)}`);

  const signature = await sendAndConfirmTransaction(connection, transaction, [wallet], { commitment: 'confirmed' });

  const found = await findReference(connection, request.reference[0], { finality: 'confirmed' });
  await validateTransfer(
    connection,
    signature,
    { recipient: request.recipient, amount: request.amount, reference: request.reference },
    { commitment: 'confirmed' },
  );
  const { value: [status] } = await connection.getSignatureStatuses([signature]);
  const block = await connection.getBlock(status.slot, {
    commitment: 'confirmed',
    maxSupportedTransactionVersion: 0,
  });
  const inBlock = block.transactions.some((tx) => tx.transaction.signatures[0] === signature);

  console.log(
    JSON.stringify({
      signature,
      wallet: wallet.publicKey.toBase58(),
      recipient: request.recipient.toBase58(),
      lamports: request.amount.times(LAMPORTS_PER_SOL).toNumber(),
      reference: request.reference.map((r) => r.toBase58()),
      fee,
      rentExempt,
      simulatedUnits: simulated.value.unitsConsumed,
      found: found.signature,
      slot: status.slot,
      inBlock,
    }),
  );
}

main().then(
  () => process.exit(0),
  (error) => {
    console.error(error && error.stack ? error.stack : String(error));
    process.exit(1);
  },
);
