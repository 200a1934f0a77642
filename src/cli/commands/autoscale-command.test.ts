import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { AutoscaleView } from '../../api/contract/autoscale-view.js';
import type { CliIo } from '../render/cli-io.js';
import { runAutoscale } from './autoscale-command.js';
import { ExitCode } from './exit-codes.js';

const T0 = 1_700_000_000_000;

/** A fake Gantry answering GET /v1/autoscale with `status` and `body`. */
async function fakeGantry(status: number, body: unknown) {
  const calls: string[] = [];
  const server = createServer((req, res) => {
    calls.push(`${req.method} ${req.url}`);
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  closers.push(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, calls };
}
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((c) => c()));
});

function io(): { io: CliIo; out: string[]; err: string[] } {
  const out: string[] = [];
  const err: string[] = [];
  return { io: { stdout: { write: (s: string) => out.push(s) }, stderr: { write: (s: string) => err.push(s) }, color: false, now: () => T0 }, out, err };
}

const none: AutoscaleView = { at: T0, pools: [], machines: [], decisions: [], note: 'no pool is autoscaled: declare one in the cluster file’s pools: section' };

describe('gantry autoscale', () => {
  it('no pool autoscaled: says so on stderr, prints nothing, exits 0', async () => {
    const g = await fakeGantry(200, none);
    const t = io();
    expect(await runAutoscale({ server: g.url, token: 't' }, t.io)).toBe(ExitCode.ok);
    expect(g.calls).toEqual(['GET /v1/autoscale']);
    expect(t.out).toEqual([]);
    expect(t.err.join('')).toBe(`${none.note}\n`);
  });

  it('--json prints the answer as it came', async () => {
    const g = await fakeGantry(200, none);
    const t = io();
    expect(await runAutoscale({ server: g.url, token: 't', json: true }, t.io)).toBe(ExitCode.ok);
    expect(JSON.parse(t.out.join(''))).toEqual(none);
  });

  it('a refused token exits 6, naming the problem', async () => {
    const g = await fakeGantry(401, { error: 'unauthorized', message: 'unknown token' });
    const t = io();
    expect(await runAutoscale({ server: g.url, token: 't' }, t.io)).toBe(ExitCode.denied);
    expect(t.err.join('')).toMatch(/unknown token/);
  });
});
