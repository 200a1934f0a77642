import { createHash } from 'node:crypto';
import { readdirSync, statSync } from 'node:fs';
import SQLite from 'better-sqlite3';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { api, isTerminal, jobOf, type RunningGantry, startGantryUp, submit, until } from '../support/gantry-process.js';

const SECRET = 'sk-live-5f2e9c1a7b';
const DIGEST = createHash('sha256').update(SECRET).digest('hex').slice(0, 16);

/** secretEnv (issue 8, docs/security.md): the command has it; the API, events and the stored log do not. */
describe('secretEnv, end to end', () => {
  let g: RunningGantry;
  beforeAll(async () => {
    g = await startGantryUp({ cluster: 'machines:\n  - { name: cpu-1, cpu: 2, memory: 2Gi }\n' });
    await until(
      'the machine',
      () => api(g.url, '/v1/machines'),
      (r) => r.body.machines?.length === 1,
    );
  });
  afterAll(async () => {
    await g?.stop();
  });

  it('the command sees the value; the job, its events, its log and the kept source do not', async () => {
    const r = await submit(g.url, {
      name: 'uses-a-secret',
      stages: [
        {
          name: 'call',
          env: { MODE: 'live' },
          secretEnv: { API_KEY: SECRET },
          // The value checked by its hash: the command itself is no secret, and is kept as it is.
          command: [
            'sh',
            '-c',
            `echo "mode=$MODE key=$API_KEY length=\${#API_KEY}"; [ "$(printf %s "$API_KEY" | sha256sum | cut -c1-16)" = "${DIGEST}" ] && echo matches`,
          ],
        },
      ],
    });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    const job = await until('job ends', () => jobOf(g.url, r.body.id), isTerminal);
    expect(job.state).toBe('succeeded');
    const log = (await api(g.url, `/v1/jobs/${job.id}/stages/call/logs`)).body as string;
    expect(log).toBe(`mode=live key=*** length=${SECRET.length}\nmatches\n`);
    for (const path of [`/v1/jobs/${job.id}`, `/v1/jobs/${job.id}/events`, `/v1/jobs/${job.id}/stages/call/logs?format=json`, '/v1/jobs', '/v1/audit']) {
      const body = JSON.stringify((await api(g.url, path)).body);
      expect(body, path).not.toContain(SECRET);
    }
    // In the database: only in the definitions, which the agent is handed; not in the spec's source, the events, the log.
    const db = new SQLite(join(g.dataDir, 'gantry.db'), { readonly: true });
    try {
      const holding = (sql: string) =>
        (db.prepare(sql).all() as Record<string, string | null>[]).filter((r) => Object.values(r).some((v) => v?.includes(SECRET))).length;
      expect(holding('select source from jobs')).toBe(0);
      expect(holding('select message, data from events')).toBe(0);
      expect(holding('select data from log_chunks')).toBe(0);
      expect(holding('select actor, target, result from audit')).toBe(0);
      expect(JSON.parse((db.prepare('select source from jobs').get() as { source: string }).source).stages[0].secretEnv).toEqual({ API_KEY: '***' });
    } finally {
      db.close();
    }
    // On the agent's: its journal is its owner's only.
    const agentDir = join(g.dataDir, 'agents', 'cpu-1');
    expect(statSync(join(agentDir, 'attempts.journal')).mode & 0o777).toBe(0o600);
    expect(readdirSync(agentDir)).toContain('credential');
    expect(statSync(join(agentDir, 'credential')).mode & 0o777).toBe(0o600);
  });

  it('a secret written to the progress file is masked in the job view, /v1/attempts and the events, as in the log', async () => {
    const r = await submit(g.url, {
      name: 'progress-secret',
      stages: [
        {
          name: 'train',
          secretEnv: { API_KEY: SECRET },
          command: ['sh', '-c', 'printf \'{"progress": 0.5, "message": "key=%s"}\\n\' "$API_KEY" >> "$GANTRY_PROGRESS_FILE"; sleep 30'],
        },
      ],
    });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    const id = r.body.id as string;
    const seen = await until(
      'progress reported',
      () => jobOf(g.url, id),
      (j) => j.stages[0]?.attempts[0]?.progress?.fraction === 0.5,
      20_000,
    );
    expect(seen.stages[0]!.attempts[0]!.progress!.message).toBe('key=***');
    const held = (await api(g.url, '/v1/attempts')).body.attempts as { jobId: string; progress?: { message: string | null } | null }[];
    expect(held.find((a) => a.jobId === id)?.progress?.message).toBe('key=***');
    for (const path of [`/v1/jobs/${id}`, `/v1/jobs/${id}/events`, '/v1/attempts']) {
      expect(JSON.stringify((await api(g.url, path)).body), path).not.toContain(SECRET);
    }
    const db = new SQLite(join(g.dataDir, 'gantry.db'), { readonly: true });
    try {
      expect(db.prepare('select count(*) as n from attempts where progress_message like ?').get(`%${SECRET}%`)).toEqual({ n: 0 });
    } finally {
      db.close();
    }
    await api(g.url, `/v1/jobs/${id}/cancel`, { method: 'POST' });
  }, 40_000);
});
