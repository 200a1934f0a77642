import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { looseTree, modesOf, octalModes } from '../../test/support/loose-tree.js';
import { defaultServerConfig } from './server-config.js';
import { makeServerFilesPrivate } from './server-private-files.js';

const modeOf = (p: string) => statSync(p).mode & 0o7777;

let data: string;
beforeEach(() => {
  data = mkdtempSync(join(tmpdir(), 'gantry-server-modes-'));
});
afterEach(() => {
  rmSync(data, { recursive: true, force: true });
});

/** What `gantry up` before private files left under umask 022: every directory 0755, every file 0644. */
function oldLayout(): void {
  looseTree(
    data,
    [
      '',
      'artifacts',
      'artifacts/tmp',
      'artifacts/blobs',
      'artifacts/blobs/sha256',
      'artifacts/blobs/sha256/73',
      'agents',
      'agents/cpu-1',
      'agents/cpu-1/attempts',
    ],
    [
      'gantry.db',
      'gantry.db-wal',
      'gantry.db-shm',
      'server.lock',
      'server.pid',
      'admin.token',
      'join.token',
      'admin.token.4242.tmp',
      'server.log',
      'artifacts/blobs/sha256/73/73cb',
      'agents/cpu-1/credential',
      'agents/cpu-1/attempts.journal',
      'cluster.yaml',
    ],
  );
}

describe('makeServerFilesPrivate', () => {
  it("closes an older `gantry up`'s data directory: database, tokens, log and artifacts owner-only; its agents' the same; passages 0711", () => {
    oldLayout();
    const t = makeServerFilesPrivate(defaultServerConfig({ dataDir: data }), { holdsAgents: true });
    expect(t.problems).toEqual([]);
    const expected: Record<string, number> = {
      '': 0o711,
      'gantry.db': 0o600,
      'gantry.db-wal': 0o600,
      'gantry.db-shm': 0o600,
      'server.lock': 0o600,
      'server.pid': 0o600,
      'admin.token': 0o600,
      'join.token': 0o600,
      'admin.token.4242.tmp': 0o600,
      'server.log': 0o600,
      artifacts: 0o700,
      'artifacts/tmp': 0o700,
      'artifacts/blobs': 0o700,
      'artifacts/blobs/sha256': 0o700,
      'artifacts/blobs/sha256/73': 0o700,
      'artifacts/blobs/sha256/73/73cb': 0o600,
      agents: 0o711,
      'agents/cpu-1': 0o711,
      'agents/cpu-1/attempts': 0o711,
      'agents/cpu-1/credential': 0o600,
      'agents/cpu-1/attempts.journal': 0o600,
      // Not the server's (a test's cluster file, a user's notes): left as it is.
      'cluster.yaml': 0o644,
    };
    expect(modesOf(data, Object.keys(expected))).toEqual(octalModes(expected));
    expect(makeServerFilesPrivate(defaultServerConfig({ dataDir: data }), { holdsAgents: true }).changed).toEqual([]);
  });

  it('makes `gantry server`s data directory 0700 (no agent below it) and `gantry up`s agents/ 0711 before any agent makes it', () => {
    const t = makeServerFilesPrivate(defaultServerConfig({ dataDir: data }), { holdsAgents: false });
    expect(t.problems).toEqual([]);
    expect(modeOf(data)).toBe(0o700);
    makeServerFilesPrivate(defaultServerConfig({ dataDir: data }), { holdsAgents: true });
    expect([modeOf(data), modeOf(join(data, 'agents'))]).toEqual([0o711, 0o711]);
  });

  it('walks the artifacts only when an earlier version left their directory open (below a private one, the store is private)', () => {
    mkdirSync(join(data, 'artifacts', 'blobs'), { recursive: true });
    writeFileSync(join(data, 'artifacts', 'blobs', 'b'), 'x');
    chmodSync(join(data, 'artifacts', 'blobs', 'b'), 0o644);
    chmodSync(join(data, 'artifacts'), 0o700);
    makeServerFilesPrivate(defaultServerConfig({ dataDir: data }), { holdsAgents: false });
    expect(modeOf(join(data, 'artifacts', 'blobs', 'b'))).toBe(0o644);
    chmodSync(join(data, 'artifacts'), 0o755);
    makeServerFilesPrivate(defaultServerConfig({ dataDir: data }), { holdsAgents: false });
    expect(modeOf(join(data, 'artifacts', 'blobs', 'b'))).toBe(0o600);
  });

  it('tightens artifacts kept elsewhere (GANTRY_ARTIFACTS_DIR)', () => {
    const elsewhere = mkdtempSync(join(tmpdir(), 'gantry-artifacts-'));
    try {
      chmodSync(elsewhere, 0o755);
      makeServerFilesPrivate(defaultServerConfig({ dataDir: data, artifactsDir: elsewhere }), { holdsAgents: false });
      expect(modeOf(elsewhere)).toBe(0o700);
    } finally {
      rmSync(elsewhere, { recursive: true, force: true });
    }
  });
});
