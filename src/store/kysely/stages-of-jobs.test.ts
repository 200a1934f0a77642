/**
 * A report's outcomes read their jobs' stages in one statement (stagesOfJobs, apply-outcome.ts).
 * On PostgreSQL its plan must read only the jobs it names: a fresh schema has no statistics, and
 * the planner then hashed the whole jobs table for a report's few jobs, a cost that grew with every
 * job ever submitted (docs/throughput.md, "B after A: the server's phase, measured").
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import pg from 'pg';
import { schedulerPass } from '../../server/scheduler-pass.js';
import { freshPostgresStore } from '../../../test/support/fresh-postgres-store.js';
import { POSTGRES_URL, serviceMissing } from '../../../test/support/services.js';
import { cpuMachine, job, reportStarted, stage } from '../conformance/fixtures.js';
import type { KyselyStore } from './kysely-store.js';

const pgMissing = await serviceMissing('PostgreSQL', POSTGRES_URL);

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  Plans?: PlanNode[];
}
/**
 * The statement's text and values as sent: wrapped before any connection opens (the store's
 * clients bind `query` when they connect: multi-results.ts).
 */
const sent: { text: string; values: unknown[] }[] = [];
let capturing = false;
const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
const original = proto.query;
proto.query = function (this: object, ...args: unknown[]) {
  const [text, values] = args;
  if (capturing && typeof text === 'string' && text.startsWith('select "stages"."job_id"')) sent.push({ text, values: values as unknown[] });
  return original.apply(this, args);
};

const scans = (n: PlanNode): string[] => [...(n['Node Type'] === 'Seq Scan' ? [n['Relation Name'] ?? '?'] : []), ...(n.Plans ?? []).flatMap(scans)];

describe.skipIf(pgMissing)("a report's jobs' stages (PostgreSQL)", () => {
  let store: KyselyStore;
  const now = 1_700_000_000_000;
  const clock = { now: () => now };
  beforeEach(async () => {
    store = await freshPostgresStore('stagesofjobs');
  });
  afterEach(async () => {
    await store?.close();
  });

  it('reads the named jobs by their index, not every job, with no statistics on the tables', async () => {
    const m = await store.machineRegister({ ...cpuMachine('m1', { cpuMillis: 8000 }), now });
    // Many jobs waiting beside the few that run: what a report must not read.
    await store.jobSubmitBatch({ definitions: Array.from({ length: 3000 }, () => job([stage('a'), stage('b', { needs: ['a'] })])), now });
    await schedulerPass(store, clock, { leaseMs: 10_000 });
    const placed = await store.machineAssignments({ machineId: m.id });
    expect(placed.length).toBe(8);
    for (const a of placed) await reportStarted(store, { machineId: m.id, attempt: a, now });

    // The statement as the report sends it, with its values.
    sent.length = 0;
    capturing = true;
    try {
      const end = { kind: 'exited' as const, detail: null };
      await store.machineReport({
        machineId: m.id,
        started: [],
        completed: placed.map((a) => ({ attemptId: a.attemptId, token: a.token, exitCode: 0, signal: null, end, outputs: [] })),
        now,
        leaseMs: 10_000,
        jitter: () => 0.5,
      });
    } finally {
      capturing = false;
    }
    expect(sent).toHaveLength(1);
    const [{ text, values }] = sent as [{ text: string; values: unknown[] }];
    expect(new Set(values).size).toBe(8);

    const schema = (
      await store.db
        .selectFrom('installation')
        .select(({ fn }) => fn<string>('current_schema', []).as('s'))
        .executeTakeFirstOrThrow()
    ).s;
    const c = new pg.Client({ connectionString: POSTGRES_URL, options: `-c search_path=${schema}` });
    await c.connect();
    try {
      const r = await c.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(`explain (format json) ${text}`, values);
      expect(scans(r.rows[0]!['QUERY PLAN'][0].Plan)).toEqual([]);
    } finally {
      await c.end();
    }
  });
});
