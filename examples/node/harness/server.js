// Test harness: builds the real server binary from this repository and runs
// it on loopback with ports picked by the OS and a temporary data directory.

import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

/** The repository root (examples/node/harness → ../../..). */
export const REPO_ROOT = path.resolve(here, '../../..');

/** Where buildServer puts the binary unless told otherwise. */
export const DEFAULT_BIN = path.resolve(here, '../.build/sharelog-server');

/** buildServer runs `go build -o out ./cmd/server` at the repository root. */
export function buildServer(out = DEFAULT_BIN) {
  fs.mkdirSync(path.dirname(out), { recursive: true });
  execFileSync('go', ['build', '-o', out, './cmd/server'], { cwd: REPO_ROOT, stdio: 'inherit' });
  return out;
}

/**
 * startServer starts the server binary (SHARELOG_SERVER_BIN, else the one
 * buildServer made) with --grpc-addr and --http-addr on 127.0.0.1:0 and JSON
 * logs, and resolves once it logged "sharelog serving" with the addresses it
 * bound. `stop()` sends SIGTERM, waits for the exit, removes the data
 * directory and rejects if the server did not exit with status 0.
 *
 * @param {{bin?: string, args?: string[], startTimeoutMs?: number}} [opts]
 */
export function startServer({ bin = process.env.SHARELOG_SERVER_BIN || DEFAULT_BIN, args = [], startTimeoutMs = 20000 } = {}) {
  if (!fs.existsSync(bin)) {
    return Promise.reject(new Error(`no server binary at ${bin}: run 'npm test' (which builds it) or set SHARELOG_SERVER_BIN`));
  }
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sharelog-node-'));
  const child = spawn(
    bin,
    ['--grpc-addr', '127.0.0.1:0', '--http-addr', '127.0.0.1:0', '--data-dir', dataDir, '--log-format', 'json', '--fsync', 'never', ...args],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const logs = []; // the last lines of the server's log, for failure messages
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const tail = () => logs.slice(-20).join('\n');

  return new Promise((resolve, reject) => {
    let started = false;
    const fail = (err) => {
      if (!started) {
        started = true;
        clearTimeout(timer);
        child.kill('SIGKILL');
        fs.rmSync(dataDir, { recursive: true, force: true });
        reject(err);
      }
    };
    const timer = setTimeout(() => fail(new Error(`the server did not start within ${startTimeoutMs} ms:\n${tail()}`)), startTimeoutMs);
    child.on('error', fail);
    exited.then(({ code, signal }) => fail(new Error(`the server exited (code ${code}, signal ${signal}) before serving:\n${tail()}`)));

    readline.createInterface({ input: child.stderr }).on('line', (line) => {
      logs.push(line);
      if (logs.length > 200) {
        logs.shift();
      }
      if (started) {
        return;
      }
      let entry;
      try {
        entry = JSON.parse(line);
      } catch {
        return; // not a log record (e.g. a panic trace): kept for the tail
      }
      if (entry.msg !== 'sharelog serving') {
        return;
      }
      started = true;
      clearTimeout(timer);
      resolve({
        grpcAddr: entry.grpc_addr,
        httpAddr: entry.http_addr,
        dataDir,
        logs,
        async stop({ timeoutMs = 15000 } = {}) {
          child.kill('SIGTERM');
          let killTimer;
          const killed = new Promise((res) => {
            killTimer = setTimeout(() => {
              child.kill('SIGKILL');
              res(null);
            }, timeoutMs);
          });
          const result = await Promise.race([exited, killed]);
          clearTimeout(killTimer);
          fs.rmSync(dataDir, { recursive: true, force: true });
          if (!result) {
            throw new Error(`the server did not stop within ${timeoutMs} ms after SIGTERM:\n${tail()}`);
          }
          if (result.code !== 0) {
            throw new Error(`the server exited with code ${result.code} (signal ${result.signal}):\n${tail()}`);
          }
        },
      });
    });
  });
}
