import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TeamView } from '../../api/contract/team-view.js';
import type { CliIo } from '../render/cli-io.js';
import { ExitCode } from './exit-codes.js';
import { QuotaSyntaxError, quotaWireFrom, runTeamList } from './team-command.js';

const team = (name: string, borrowing: boolean): TeamView => ({
  name,
  weight: 1,
  quota: { cpu: null, memory: null, gpus: {} },
  usage: { cpu: null, memory: null, gpus: { h100: borrowing ? 4 : 0 } },
  borrowing,
  share: borrowing ? 0.5 : 0,
  quotaText: borrowing ? 'gpu:h100=2' : 'none',
  createdAt: '2026-01-01T00:00:00.000Z',
});
const server = createServer((_req, res) => res.end(JSON.stringify({ teams: [team('vision', true), team('ml', false)] })));
let url = '';
beforeAll(async () => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

describe('gantry team list', () => {
  it('labels every column, the last one BORROWING with yes or no', async () => {
    const out: string[] = [];
    const io: CliIo = { stdout: { write: (s: string) => out.push(s) }, stderr: { write: () => {} }, color: false };
    expect(await runTeamList({ server: url }, io)).toBe(ExitCode.ok);
    const lines = out.join('').split('\n');
    const cells = (line: string) =>
      line
        .split('│')
        .map((c) => c.trim())
        .filter((c, i, all) => i > 0 && i < all.length - 1);
    const head = lines.find((l) => l.includes('TEAM'))!;
    expect(cells(head)).toEqual(['TEAM', 'WEIGHT', 'QUOTA', 'HOLDS', 'SHARE', 'BORROWING']);
    expect(cells(lines.find((l) => l.includes('vision'))!)).toEqual(['vision', '1', 'gpu:h100=2', 'gpu:h100=4', '50.0%', 'yes']);
    expect(cells(lines.find((l) => l.includes(' ml '))!)).toEqual(['ml', '1', 'none', '-', '0.0%', 'no']);
  });
});

describe('quotaWireFrom', () => {
  it('takes GPU quotas with up to 3 decimals (shares of a GPU) and refuses a finer or malformed one', () => {
    expect(quotaWireFrom('gpu:h100=2.5,gpu:t4=0.125,cpu=8')).toEqual({ gpus: { h100: 2.5, t4: 0.125 }, cpu: '8' });
    expect(quotaWireFrom('gpu:h100=16')).toEqual({ gpus: { h100: 16 } });
    for (const bad of ['gpu:h100=0.0001', 'gpu:h100=.5', 'gpu:h100=1.', 'gpu:h100=-1']) {
      expect(() => quotaWireFrom(bad)).toThrow(QuotaSyntaxError);
      expect(() => quotaWireFrom(bad)).toThrow(/at most 3 decimals/);
    }
  });
});
