import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ArtifactStore } from '../artifacts/artifact-store.js';
import { openSqliteStore } from '../store/sqlite/open-sqlite-store.js';
import type { Store } from '../store/store.js';
import { artifactCollection } from './artifact-collection.js';

describe('artifact collection, as a duty', () => {
  let dir: string;
  let store: Store;
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-collection-'));
    store = await openSqliteStore(':memory:');
  });
  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('collects every pass, sweeps for strays at its first pass and then every straySweepIntervalMs, and drops old upload files', async () => {
    const files = new ArtifactStore(join(dir, 'artifacts'));
    const strays = vi.spyOn(files, 'sweepStrays');
    const temporary = vi.spyOn(files, 'sweepTemporary');
    let now = 1_700_000_000_000;
    const s = {
      artifactsMaxBytes: null,
      artifactsGraceMs: 60_000,
      artifactsGcIntervalMs: 30_000,
      straySweepIntervalMs: 3_600_000,
      uploadTempKeepMs: 7_200_000,
    };
    const duty = artifactCollection(store, files, { now: () => now }, s);
    expect([duty.name, duty.intervalMs]).toEqual(['artifacts', 30_000]);
    const first = await duty.runOnce();
    expect(first.collection).toMatchObject({ dryRun: false, deleted: 0 });
    expect(first.strays).toEqual({ collected: 0, restored: 0, removedAside: 0 });
    expect(strays).toHaveBeenCalledTimes(1);
    expect(strays.mock.calls[0]![1]).toBe(now - 60_000);
    expect(temporary).toHaveBeenLastCalledWith(now - 7_200_000);
    now += 3_599_999;
    expect((await duty.runOnce()).strays).toBeNull();
    expect(strays).toHaveBeenCalledTimes(1);
    now += 1;
    expect((await duty.runOnce()).strays).not.toBeNull();
    expect(strays).toHaveBeenCalledTimes(2);
    expect(temporary).toHaveBeenCalledTimes(3);
  });
});
