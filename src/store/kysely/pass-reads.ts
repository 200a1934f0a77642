import { CompiledQuery } from 'kysely';
import type { QueueShape, RunningAttempt, TeamView } from '../../scheduler/snapshot.js';
import type { TeamsTable } from '../schema.js';
import { clusterVersion } from './cluster-view.js';
import { heldEverywhere, type HeldRow } from './machine-usage.js';
import { execute } from './prepared-query.js';
import { READY_SHAPES, shapesOf } from './scheduler-verbs.js';
import { allTeams, preemptable, preemptionOf, teamsWithoutUsage } from './team-verbs.js';
import type { Db, Trx } from './tx-context.js';

/**
 * A pass's reads without arguments in one round trip (docs/throughput.md, "A pass's reads in one
 * round trip"), where the store's capabilities say the driver answers each statement of a
 * multi-statement text (PostgreSQL: postgres/multi-results.ts).
 *
 * Why: a pass before a commit read the ready shapes, the cluster's version, the held attempts,
 * the teams and the preemption view one after the other, five round trips in the report's
 * transaction; a round trip costs the server about 0.1 ms of CPU (most of it the kernel's
 * loopback send) and the transaction its wait. None of them takes an argument, so they go as one
 * text in PostgreSQL's simple protocol, which takes no parameters (their constants written in:
 * PreparedQuery.inlinedText) and answers every statement's rows.
 *
 * The same rows: the statements run in order in the pass's transaction, SERIALIZABLE, so in one
 * snapshot, the one the separate reads would have had. Nothing read is kept past a write of the
 * pass (a plan applied, a hold cleared): each part is taken at most once, and the next
 * readyShapes reads all anew.
 *
 * What it costs when nothing is ready: a pass stops at an empty queue before reading the cluster
 * (scheduler-pass.ts). So each statement after the shapes' walk, except the few rows of teams,
 * runs only where a ready stage exists (`exists`, a one-time filter PostgreSQL evaluates before
 * the statement's scan): a pass that finds nothing costs one probe of the queue index more, not
 * a read of every machine or held attempt. The cluster's version row is the sign: absent, nothing
 * was ready in the snapshot, and the parts are not used.
 */
export interface PassReadRows {
  shapes: { shape: string }[];
  cluster: { version: number; held: HeldRow[] } | null;
  teams: TeamsTable[];
  preemptable: Awaited<ReturnType<typeof preemptable.rows>>;
}

const WHILE_READY = `exists (select 1 from stages where state = 'ready')`;
const onlyWhileReady = (text: string) => `select * from (${text}) as q where ${WHILE_READY}`;

/**
 * The texts, made once (the same on every PostgreSQL store: the schema is the connection's search
 * path). Outside a transaction (the scheduler loop's pass) the five run in one of their own,
 * REPEATABLE READ and read only, begun and committed in the same text: one snapshot for all five,
 * as inside the pass's transaction, so that the version row's sign holds for every part.
 */
const texts = { within: '', alone: '' };
const OWN_TRANSACTION = ['start transaction isolation level repeatable read, read only', 'commit'] as const;

function passReadsText(db: Db | Trx, alone: boolean): string {
  if (!texts.within) {
    const reads = [
      READY_SHAPES.sql.trim(),
      onlyWhileReady(clusterVersion.inlinedText(db)),
      onlyWhileReady(heldEverywhere.inlinedText(db)),
      allTeams.inlinedText(db),
      onlyWhileReady(preemptable.inlinedText(db)),
    ];
    texts.within = reads.join(';\n');
    texts.alone = [OWN_TRANSACTION[0], ...reads, OWN_TRANSACTION[1]].join(';\n');
  }
  return alone ? texts.alone : texts.within;
}

/** The five reads, in one round trip: in `db`'s open transaction, or (`alone`) in one of their own. */
export async function passReadRows(db: Db | Trx, alone = false): Promise<PassReadRows> {
  const r = await execute<unknown[]>(db, CompiledQuery.raw(passReadsText(db, alone)));
  // The driver's answer for a multi-statement text (multi-results.ts): one array of rows a
  // statement, the transaction's begin and commit (no rows) around them when alone.
  const parts = alone ? r.rows.slice(1, -1) : r.rows;
  if (r.rows.length !== (alone ? 7 : 5) || !parts.every(Array.isArray)) throw new Error(`pass reads: ${r.rows.length} results, not the statements' rows`);
  const [shapes, version, held, teams, running] = parts as [
    PassReadRows['shapes'],
    { version: number | string }[],
    HeldRow[],
    TeamsTable[],
    PassReadRows['preemptable'],
  ];
  return {
    shapes,
    cluster: version.length ? { version: Number(version[0]!.version), held } : null,
    teams,
    preemptable: running,
  };
}

/**
 * A pass's reads, for a pass before a commit: readyShapes reads them all, and each of the pass's
 * later reads takes its part once, until a write of the pass drops them (see above).
 */
export class PassReads {
  private parts: Partial<Omit<PassReadRows, 'shapes'>> | null = null;

  constructor(
    /** The pass's transaction, or the database (the loop's pass: each read in a transaction of its own). */
    private readonly db: Db | Trx,
    private readonly known: Map<string, QueueShape>,
    private readonly alone = false,
  ) {}

  async readyShapes(): Promise<QueueShape[]> {
    this.parts = null;
    const r = await passReadRows(this.db, this.alone);
    const shapes = await shapesOf(this.db, r.shapes, this.known);
    // Nothing was ready in the snapshot: the pass stops here, and nothing else was read.
    if (r.cluster) this.parts = { cluster: r.cluster, teams: r.teams, preemptable: r.preemptable };
    return shapes;
  }

  /** A part read with the shapes and not taken since, or undefined (then read it alone). */
  take<K extends keyof Omit<PassReadRows, 'shapes'>>(part: K): NonNullable<PassReadRows[K]> | undefined {
    const p = this.parts?.[part];
    if (this.parts) delete this.parts[part];
    return p ?? undefined;
  }

  /** The teams as the scheduler sees them: asked without usage, from the part read with the shapes while it is there; else as `read` reads them. */
  async schedulerTeams(p: { usage: boolean }, read: () => Promise<TeamView[]>): Promise<TeamView[]> {
    const rows = p.usage ? undefined : this.take('teams');
    return rows ? teamsWithoutUsage(rows) : read();
  }

  /** The running attempts preemption may take: from the part read with the shapes while it is there; else as `read` reads them. */
  async preemptionView(read: () => Promise<RunningAttempt[]>): Promise<RunningAttempt[]> {
    const rows = this.take('preemptable');
    return rows ? preemptionOf(rows) : read();
  }

  /** A write of the pass: what was read before it is not used after. */
  drop(): void {
    this.parts = null;
  }
}
