import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { fileURLToPath } from 'node:url';
import { useServer } from '../harness/fixture.js';

const srv = useServer();

test('example.js runs against a server and exits 0', { timeout: 60_000 }, async () => {
  const script = fileURLToPath(new URL('../example.js', import.meta.url));
  const { stdout } = await promisify(execFile)(process.execPath, [script, '--addr', srv.server.grpcAddr], { timeout: 30000 });
  assert.match(stdout, /accepted 9 records/);
  assert.match(stdout, /fetch below the log start: OFFSET_OUT_OF_RANGE/);
  assert.match(stdout, /stream_end STREAM_END_REASON_OK/);
  assert.match(stdout, /^done$/m);
});
