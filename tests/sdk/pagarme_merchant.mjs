// A merchant's server code using Pagar.me's official Node SDK (npm @pagarme/pagarme-nodejs-sdk, Core API v5), with
// the SDK's documented calls only: a card token with the public key, an order with an idempotency key (sent twice),
// the charge read back, cancelled in part (partial refund) and then in full, orders listed by `code`.
//
// The SDK's base URL is the constant https://api.pagar.me/core/v5 (no setting changes it). Nothing here points it
// elsewhere: the deployment does, as a corporate egress proxy would — HTTPS_PROXY names a forward proxy (the SDK's
// axios honours it and tunnels with CONNECT) that presents a certificate for api.pagar.me signed by a CA that
// NODE_EXTRA_CA_CERTS adds to Node's trust store, and forwards to hookline's sandbox (tests/sdk/README.md).
//
// Environment: PAGARME_SECRET_KEY (sk_…), SDK_RUN (tags codes and idempotency keys; random when unset).
// Prints `ok - …` / `FAIL - …` per check and `N passed, N failed`; exits 1 on any failure.

import {
  ApiError,
  ChargesController,
  Client,
  OrdersController,
  TokensController,
} from '@pagarme/pagarme-nodejs-sdk';

const TIMEOUT_MS = 20_000; // every SDK call (the SDK's default, 0, waits forever)

let passed = 0;
let failed = 0;

function check(name, condition, detail = '') {
  if (condition) {
    passed += 1;
    console.log(`ok - ${name}`);
  } else {
    failed += 1;
    console.log(`FAIL - ${name}: ${detail}`);
  }
  return condition;
}

function equal(name, got, want) {
  return check(name, JSON.stringify(got) === JSON.stringify(want), `got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
}

function env(name) {
  const value = process.env[name];
  if (!value) {
    console.log(`FAIL - environment: ${name} is not set`);
    process.exit(2);
  }
  return value;
}

const secretKey = env('PAGARME_SECRET_KEY');
// The sandbox has no separate public key: it is the secret key with `sk_` made `pk_` (tests/sdk/README.md).
const publicKey = `pk_${secretKey.replace(/^sk_/, '')}`;
const run = process.env.SDK_RUN || `pg${Math.random().toString(36).slice(2, 10)}`;

// Pagar.me's documented authentication: HTTP Basic, the secret key as user, an empty password. No SDK retries
// (its default too): a test must see what the server answered.
const client = new Client({
  basicAuthCredentials: { username: secretKey, password: '' },
  timeout: TIMEOUT_MS,
  httpClientOptions: { timeout: TIMEOUT_MS, retryConfig: { maxNumberOfRetries: 0 } },
});
const tokens = new TokensController(client);
const orders = new OrdersController(client);
const charges = new ChargesController(client);

function orderRequest(cardToken, code = `${run}-pedido-1`, operationType = undefined) {
  // Every field the SDK's CreateOrderRequest schema requires (it refuses to send the request otherwise).
  return {
    code,
    closed: true,
    items: [
      { amount: 2500, description: 'Camiseta', quantity: 2, category: 'roupas', code: 'sku-1' },
    ],
    customer: {
      name: 'Tony Stark',
      email: 'tony@example.com',
      document: '12345678909',
      type: 'individual',
      code: `${run}-cliente`,
      metadata: { origem: 'sdk-node' },
      address: {
        street: 'Av. General Justo',
        number: '375',
        complement: '7º andar',
        neighborhood: 'Centro',
        line1: '375, Av. General Justo, Centro',
        line2: '7º andar',
        zipCode: '20021130',
        city: 'Rio de Janeiro',
        state: 'RJ',
        country: 'BR',
        metadata: {},
      },
      phones: {
        mobilePhone: { countryCode: '55', areaCode: '21', number: '999999999' },
      },
    },
    payments: [
      {
        paymentMethod: 'credit_card',
        amount: 5000,
        creditCard: { cardToken, installments: 1, statementDescriptor: 'HOOKLINE', ...(operationType ? { operationType } : {}) },
      },
    ],
    metadata: { sdk_run: run },
  };
}

// A card token of Pagar.me's approving test card, made with the public key.
async function cardToken() {
  return (
    await tokens.createToken(publicKey, {
      type: 'card',
      card: { number: '4000000000000010', holderName: 'Tony Stark', expMonth: 12, expYear: 2030, cvv: '123', brand: 'Visa', label: 'sdk' },
    })
  ).result.id;
}

async function main() {
  // 1. The card token, as a checkout page makes it with the public key (no secret key on this call).
  const token = (
    await tokens.createToken(publicKey, {
      type: 'card',
      card: {
        number: '4000000000000010',
        holderName: 'Tony Stark',
        expMonth: 12,
        expYear: 2030,
        cvv: '123',
        brand: 'Visa',
        label: 'sdk',
      },
    })
  ).result;
  check('token created (token_…)', typeof token.id === 'string' && token.id.startsWith('token_'), token.id);
  equal('token: card last four digits', token.card?.lastFourDigits, '0010');

  // 2. The order, with an idempotency key; the same request again with the same key (a retry after a lost
  //    answer) must give the same order back, not a second charge.
  const key = `${run}-order-1`;
  const first = (await orders.createOrder(orderRequest(token.id), key)).result;
  equal('order paid', first.status, 'paid');
  equal('order amount', first.amount, 5000);
  const charge = first.charges?.[0];
  check('order has its charge', charge !== undefined && typeof charge.id === 'string', JSON.stringify(first.charges));
  equal('charge paid', charge?.status, 'paid');
  const again = (await orders.createOrder(orderRequest(token.id), key)).result;
  equal('same key again: the same order', again.id, first.id);
  equal('same key again: the same charge', again.charges?.[0]?.id, charge?.id);
  console.log(`= order ${first.id}`);
  console.log(`= charge ${charge?.id}`);

  // 3. The charge read back.
  const read = (await charges.getCharge(charge.id)).result;
  equal('charge read: status', read.status, 'paid');
  equal('charge read: amount', read.amount, 5000);
  equal('charge read: paid amount', read.paidAmount, 5000);
  equal('charge read: last transaction is a credit card one', read.lastTransaction?.transactionType, 'credit_card');

  // 4. Part of it cancelled (a partial refund), then the rest (no amount: what is left).
  const partial = (await charges.cancelCharge(charge.id, { amount: 1500, operationReference: `${run}-devolucao-1` }, `${run}-refund-1`)).result;
  equal('partial cancel: canceled amount', partial.canceledAmount, 1500);
  check('partial cancel: still paid in part', partial.status !== 'canceled', partial.status);
  const rest = (await charges.cancelCharge(charge.id, undefined, `${run}-refund-2`)).result;
  equal('cancel the rest: canceled amount is the whole charge', rest.canceledAmount, 5000);
  equal('cancel the rest: charge canceled', rest.status, 'canceled');
  const after = (await charges.getCharge(charge.id)).result;
  equal('charge read after: canceled amount', after.canceledAmount, 5000);
  equal('charge read after: status', after.status, 'canceled');

  // 5. Orders found by their code, as a back office would.
  const listed = (await orders.getOrders(1, 10, `${run}-pedido-1`)).result;
  equal('list by code: one order', listed.data?.length, 1);
  equal('list by code: the order created', listed.data?.[0]?.id, first.id);
  const none = (await orders.getOrders(1, 10, `${run}-no-such-code`)).result;
  equal('list by an unknown code: none', none.data?.length, 0);

  // 6. A refusal comes back as the SDK's ApiError with Pagar.me's status code.
  try {
    await charges.cancelCharge(charge.id, { amount: 100, operationReference: `${run}-devolucao-3` }, `${run}-refund-3`);
    check('cancelling a cancelled charge is refused', false, 'it succeeded');
  } catch (e) {
    check('cancelling a cancelled charge is refused (ApiError 4xx)', e instanceof ApiError && e.statusCode >= 400 && e.statusCode < 500, `${e}`);
  }

  // 7. Authorize now, capture later: an auth_only order waits pending; captureCharge takes 3000 of 5000 (sent
  //    twice with one idempotency key: one capture); a second capture is an ApiError 4xx; another authorization
  //    is voided with cancelCharge.
  const held = (await orders.createOrder(orderRequest(await cardToken(), `${run}-pedido-2`, 'auth_only'), `${run}-order-2`)).result;
  const heldCharge = held.charges?.[0];
  equal('auth_only: order pending', held.status, 'pending');
  equal('auth_only: transaction authorized, pending capture', heldCharge?.lastTransaction?.status, 'authorized_pending_capture');
  const capture = { code: `${run}-pedido-2`, amount: 3000, operationReference: `${run}-captura-1` };
  const captured = (await charges.captureCharge(heldCharge.id, capture, `${run}-capture-1`)).result;
  equal('captured: charge paid', captured.status, 'paid');
  equal('captured: paid amount', captured.paidAmount, 3000);
  const recaptured = (await charges.captureCharge(heldCharge.id, capture, `${run}-capture-1`)).result;
  equal('same key again: the same capture', recaptured.paidAmount, 3000);
  try {
    await charges.captureCharge(heldCharge.id, { code: `${run}-pedido-2`, operationReference: `${run}-captura-2` }, `${run}-capture-2`);
    check('a second capture is refused', false, 'it succeeded');
  } catch (e) {
    check('a second capture is refused (ApiError 4xx)', e instanceof ApiError && e.statusCode >= 400 && e.statusCode < 500, `${e}`);
  }
  const voidable = (await orders.createOrder(orderRequest(await cardToken(), `${run}-pedido-3`, 'auth_only'), `${run}-order-3`)).result;
  const voided = (await charges.cancelCharge(voidable.charges?.[0]?.id, undefined, `${run}-void-1`)).result;
  equal('void: charge canceled', voided.status, 'canceled');
  equal('void: transaction voided', voided.lastTransaction?.status, 'voided');
}

try {
  await main();
} catch (e) {
  failed += 1;
  const body = e instanceof ApiError ? ` HTTP ${e.statusCode}: ${String(e.body).slice(0, 500)}` : '';
  console.log(`FAIL - unexpected exception: ${e?.stack || e}${body}`);
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
