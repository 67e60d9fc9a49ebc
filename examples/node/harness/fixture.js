// A node:test fixture: one server and one client per test file.
import { before, after } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { SharelogClient } from '../lib/index.js';
import { startServer } from './server.js';

/**
 * useServer registers before/after hooks that start a server and connect a
 * client, and returns an object whose `server` and `client` are set once
 * the hooks ran. The after hook fails the file if the server does not shut
 * down cleanly.
 */
export function useServer(opts) {
  const ctx = { server: null, client: null };
  before(async () => {
    ctx.server = await startServer(opts);
    ctx.client = new SharelogClient(ctx.server.grpcAddr, { timeoutMs: 15000 });
    await ctx.client.waitForReady();
  });
  after(async () => {
    ctx.client?.close();
    await ctx.server?.stop();
  });
  return ctx;
}

/**
 * eventually calls `fn` until it returns a truthy value or `timeoutMs`
 * passes, waiting `intervalMs` between calls (0 for an `fn` that blocks a
 * little itself, such as a long poll).
 */
export async function eventually(fn, { timeoutMs = 10000, intervalMs = 0, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) {
      return v;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    if (intervalMs > 0) {
      await sleep(intervalMs);
    }
  }
}
