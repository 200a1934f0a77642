import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { text } from 'node:stream/consumers';
import SQLite from 'better-sqlite3';
import { Kysely, Migrator, SqliteDialect } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ArtifactStore } from '../../artifacts/artifact-store.js';
import { collectArtifacts } from '../../artifacts/collect-artifacts.js';
import { parseJobSpec } from '../../domain/job-spec.js';
import { migrationProvider } from '../migrations.js';
import type { Database } from '../schema.js';
import { openSqliteStore } from './open-sqlite-store.js';

/**
 * 0014 (docs/rerun.md): outputs an earlier version committed, in `<artifacts>/<attemptId>/`, keep
 * working: read where they lie, reused by a rerun by reference, kept while it names them, and
 * collected with their directory once nothing does.
 */
describe('migration 0014_rerun_outputs', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-0014-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  /** A database at 0013 holding a failed job whose first stage committed model.bin, as that version wrote it. */
  async function databaseBefore0014(file: string): Promise<void> {
    const sqlite = new SQLite(file);
    const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: sqlite }) });
    try {
      const migrator = new Migrator({ db, provider: migrationProvider({ dialect: 'sqlite', skipLocked: false, singleWriter: true }) });
      expect((await migrator.migrateTo('0013_progress')).error).toBeUndefined();
      const def = parseJobSpec({
        name: 'old',
        stages: [
          { name: 'train', command: ['true'] },
          { name: 'eval', needs: ['train'], command: ['false'], retry: { maxAttempts: 1 } },
        ],
      });
      const t = 1_700_000_000_000;
      sqlite.prepare(`insert into teams (name, weight, created_at) values ('default', 1, ?)`).run(t);
      sqlite
        .prepare(
          `insert into machines (id, name, cpu_millis, memory_bytes, gpus, gpus_declared, region, labels, health, agent, last_heartbeat_at, registered_at, updated_at) values ('m_1', 'gpu-1', 1000, 1000, '[]', 0, null, '{}', 'ready', '{}', ?, ?, ?)`,
        )
        .run(t, t, t);
      sqlite
        .prepare(
          `insert into jobs (id, name, team, priority, labels, state, definition, source, created_at, updated_at, finished_at) values ('job_old', 'old', 'default', 50, '{}', 'failed', ?, null, ?, ?, ?)`,
        )
        .run(JSON.stringify(def), t, t, t + 5000);
      const stage = sqlite.prepare(
        `insert into stages (id, job_id, name, position, pool, state, priority, definition, token, output_attempt_id, created_at, updated_at, finished_at) values (?, 'job_old', ?, ?, 'cpu', ?, 50, ?, 1, ?, ?, ?, ?)`,
      );
      stage.run('stg_train', 'train', 0, 'succeeded', JSON.stringify(def.stages[0]), 'att_train', t, t, t + 3000);
      stage.run('stg_eval', 'eval', 1, 'failed', JSON.stringify(def.stages[1]), null, t, t, t + 5000);
      const attempt = sqlite.prepare(
        `insert into attempts (id, stage_id, job_id, stage_name, number, token, machine_id, gpu_indices, cpu_millis, memory_bytes, state, exit_code, outputs, scheduled_at, started_at, finished_at, released_at) values (?, ?, 'job_old', ?, 1, 1, 'm_1', ?, 1000, 1000, ?, ?, ?, ?, ?, ?, ?)`,
      );
      attempt.run(
        'att_train',
        'stg_train',
        'train',
        '[0,1]',
        'succeeded',
        0,
        JSON.stringify([{ path: 'ckpt/model.bin', size: 9 }]),
        t,
        t + 1000,
        t + 3000,
        t + 3000,
      );
      attempt.run('att_eval', 'stg_eval', 'eval', '[]', 'failed', 1, null, t + 3000, t + 4000, t + 5000, t + 5000);
    } finally {
      await db.destroy();
    }
    mkdirSync(join(dir, 'artifacts', 'att_train', 'ckpt'), { recursive: true });
    writeFileSync(join(dir, 'artifacts', 'att_train', 'ckpt', 'model.bin'), 'old bytes');
  }

  it('reads, reruns from and collects outputs written before content addressing', async () => {
    const file = join(dir, 'gantry.db');
    await databaseBefore0014(file);
    const store = await openSqliteStore(file);
    const files = new ArtifactStore(join(dir, 'artifacts'));
    try {
      const key = 'legacy:att_train/ckpt/model.bin';
      const before = (await store.jobGet({ jobId: 'job_old' }))!;
      expect(before.stages[0]!.outputs).toEqual([{ path: 'ckpt/model.bin', size: 9, blob: key }]);
      expect(await store.committedBlob({ attemptId: 'att_train', path: 'ckpt/model.bin' })).toEqual({ blob: key, size: 9 });
      expect(await text(await files.read(key))).toBe('old bytes');

      const now = Date.now();
      const r = (await store.jobRerun({ jobId: 'job_old', now }))!;
      expect(r.plan.reused).toEqual([
        { stage: 'train', fromJob: 'job_old', attemptId: 'att_train', runMs: 2000, gpus: 2, files: [{ path: 'ckpt/model.bin', blob: key, size: 9 }] },
      ]);
      // The original deleted: its old directory stays, since the rerun names a file in it.
      const deleted = (await store.jobDelete({ jobId: 'job_old', now }))!;
      expect(deleted.attempts.sort()).toEqual(['att_eval', 'att_train']);
      expect(deleted.legacyDirs).toEqual(['att_eval']);
      const keep = await collectArtifacts(store, files, { now: () => now, maxBytes: null, graceMs: 0, dryRun: false });
      expect(keep.collect).toEqual([]);
      expect(await text(await files.read(key))).toBe('old bytes');
      // Once nothing names it (the rerun canceled and deleted too), its file and directory go.
      await store.jobCancel({ jobId: r.job!.id, now, reason: 'done' });
      await store.jobDelete({ jobId: r.job!.id, now });
      const gone = await collectArtifacts(store, files, { now: () => now + 1000, maxBytes: null, graceMs: 0, dryRun: false });
      expect(gone.collect.map((c) => c.blob)).toEqual([key]);
      expect(gone.deleted).toBe(1);
      expect(existsSync(join(dir, 'artifacts', 'att_train'))).toBe(false);
    } finally {
      await store.close();
    }
  });
});
