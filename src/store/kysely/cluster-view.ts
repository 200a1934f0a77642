import { sql } from 'kysely';
import { MachineScheduling } from '../../domain/machine-scheduling.js';
import { GPU_MILLI_WHOLE } from '../../domain/resources.js';
import type { ClusterView, GpuView, MachineView } from '../../scheduler/snapshot.js';
import type { GpuHeld, MachineGpu } from '../records.js';
import type { MachinesTable } from '../schema.js';
import { emptyUsage, machineUsage, usageOf, type HeldRow, type Usage } from './machine-usage.js';
import { prepared } from './prepared-query.js';
import type { Db, Trx } from './tx-context.js';

/**
 * The cluster's view, kept between reads (docs/scheduling.md, "The cluster's view, kept"). A
 * scheduler pass and a submit's warnings read every machine; at 10,000 machines that read was
 * 40–55 ms of the server's one thread (bench:fleet's profile: the longest stretches its
 * heartbeats waited behind). The machines' rows change rarely (a registration, a health or
 * scheduling change); what attempts hold changes with every placement and is read each time.
 *
 * Each machine row carries a revision that a trigger grows with every change of the columns read
 * here (migration 0029), and machines are never deleted, so `count(*) + sum(revision)` grows with
 * every change the view could see, in whichever process or transaction it was made. Each read asks
 * the database for that number (from the revision index alone on SQLite: no row is made into an
 * object) and re-reads the rows only when it differs from the number of the rows held. An equal
 * number means the same rows: any snapshot taken later holds every change an earlier one held, and
 * each change only grows the number. So a view is never staler than a full read in the same
 * transaction would have been, with one replica or several.
 */
export interface KeptCluster {
  /** The version of `machines`: -1 before the first read. */
  version: number;
  /** The machines not removed, their rows' text parsed, in name order. */
  machines: readonly KeptMachine[];
}

export const keptCluster = (): KeptCluster => ({ version: -1, machines: [] });

/** What the view reads of a machine: not its agent's or containment's reports (a few hundred bytes each). */
const CLUSTER_COLUMNS = ['id', 'name', 'health', 'scheduling', 'region', 'labels', 'cpu_millis', 'memory_bytes', 'gpus', 'revision'] as const;
type ClusterRow = Pick<MachinesTable, Exclude<(typeof CLUSTER_COLUMNS)[number], 'revision'>> & { revision: number | string };
const allMachines = prepared<[]>()((db) => db.selectFrom('machines').select(CLUSTER_COLUMNS).orderBy('name'));
export const clusterVersion = prepared<[]>()((db) =>
  db.selectFrom('machines').select(sql<number | string>`count(*) + coalesce(sum(revision), 0)`.as('version')),
);

/** A machine row with its text parsed once: shared by every view made from it, never changed. */
interface KeptMachine {
  readonly row: ClusterRow;
  readonly labels: Readonly<Record<string, string>>;
  readonly gpus: readonly Readonly<MachineGpu>[];
  /** Its view with nothing held, for a pass (heldAttempts 0) and for the submit's facts: made at first use (idleView). */
  idleCounted?: MachineView;
  idleFacts?: MachineView;
}

/** The version of the rows as read: the same sum the database makes. */
const versionOf = (rows: readonly ClusterRow[]) => rows.reduce((v, m) => v + 1 + Number(m.revision), 0);

export async function clusterView(db: Db | Trx, kept: KeptCluster, withUsage = true): Promise<ClusterView> {
  return (await clusterAndUsage(db, kept, withUsage)).view;
}

/**
 * The cluster's view and what attempts hold on each machine, as read for it: a pass before a
 * commit hands the latter to planApply (its `held`), which then does not read it again.
 */
export async function clusterAndUsage(
  db: Db | Trx,
  kept: KeptCluster,
  withUsage = true,
  /** The version and the held attempts, read already in this transaction with the pass's other reads (pass-reads.ts). */
  read?: { version: number; held: readonly HeldRow[] },
): Promise<{ view: ClusterView; usage: ReadonlyMap<string, Usage> }> {
  const now = read ? read.version : Number((await clusterVersion.first(db))?.version ?? 0);
  if (now !== kept.version) {
    const rows = await allMachines.rows(db);
    // The version of what was read, not the one asked just before: a commit between the two
    // leaves a number that the next read finds different, and it reads again.
    kept.version = versionOf(rows);
    kept.machines = rows.filter((m) => m.scheduling !== MachineScheduling.removed).map(keep);
  }
  const usage = !withUsage ? null : read ? usageOf(read.held) : await machineUsage(db);
  const machines = new Array<MachineView>(kept.machines.length);
  for (let i = 0; i < machines.length; i++) {
    const k = kept.machines[i]!;
    const u = usage?.get(k.row.id);
    machines[i] = u ? viewOf(k.row, k.labels, k.gpus, u, true) : idleView(k, withUsage);
  }
  return { view: { version: kept.version, machines }, usage: usage ?? NO_USAGE };
}

const NO_USAGE: ReadonlyMap<string, Usage> = new Map();

const keep = (row: ClusterRow): KeptMachine => ({
  row,
  labels: parsedOnce(parsedLabels, row.labels, parseLabels),
  gpus: parsedOnce(parsedGpus, row.gpus, parseGpus),
});

/**
 * A machine nothing holds, as every view of the same rows shows it: made once and shared, frozen
 * through its GPUs. At 10,000 machines most are idle, and making them anew was 10,000 machine and
 * 27,000 GPU objects of garbage a pass. Frozen, a reader that changed one would throw rather than
 * change what later passes see (the planner takes room from its own copies: workingCopy).
 */
function idleView(k: KeptMachine, counted: boolean): MachineView {
  const key = counted ? 'idleCounted' : 'idleFacts';
  let v = k[key];
  if (v === undefined) {
    const m = viewOf(k.row, k.labels, k.gpus, EMPTY, counted);
    for (const g of m.gpus) Object.freeze(g);
    Object.freeze(m.gpus);
    v = k[key] = Object.freeze(m);
  }
  return v;
}

/** Nothing held: one object for every idle machine (viewOf only reads it). */
const EMPTY: Usage = Object.freeze({
  ...emptyUsage(),
  gpuIndices: Object.freeze([]) as unknown as number[],
  gpuHeld: Object.freeze([]) as unknown as GpuHeld[],
});

/**
 * Machines' GPUs and labels as parsed from their text, by that text: a pass reads every machine,
 * and at 10,000 machines parsing the same JSON again each time was a tenth of the view's cost. The
 * values are frozen (shared by every view that reads the same text); a full map starts over.
 */
const parsedGpus = new Map<string, readonly Readonly<MachineGpu>[]>();
const parsedLabels = new Map<string, Readonly<Record<string, string>>>();
const PARSED_MAX = 50_000;
function parsedOnce<T>(cache: Map<string, T>, text: string, parse: (text: string) => T): T {
  let v = cache.get(text);
  if (v === undefined) {
    if (cache.size >= PARSED_MAX) cache.clear();
    v = parse(text);
    cache.set(text, v);
  }
  return v;
}
const parseGpus = (text: string) => Object.freeze((JSON.parse(text) as MachineGpu[]).map((g) => Object.freeze(g)));
const parseLabels = (text: string) => Object.freeze(JSON.parse(text) as Record<string, string>);

type ViewRow = Pick<MachinesTable, 'id' | 'name' | 'health' | 'scheduling' | 'region' | 'labels' | 'cpu_millis' | 'memory_bytes' | 'gpus'>;

/** A machine as the planner sees it, from its row and what its attempts hold (planApply's re-check makes its own from fresh rows). */
export function machineView(m: ViewRow, u: Usage, counted: boolean): MachineView {
  return viewOf(m, parsedOnce(parsedLabels, m.labels, parseLabels), parsedOnce(parsedGpus, m.gpus, parseGpus), u, counted);
}

function viewOf(m: ViewRow, labels: Readonly<Record<string, string>>, gpus: readonly Readonly<MachineGpu>[], u: Usage, counted: boolean): MachineView {
  const held = u.gpuHeld.length ? new Map(u.gpuHeld.map((g) => [g.index, g])) : null;
  return {
    id: m.id,
    name: m.name,
    health: m.health,
    scheduling: m.scheduling,
    region: m.region,
    labels,
    cpuMillisTotal: Number(m.cpu_millis),
    memoryBytesTotal: Number(m.memory_bytes),
    cpuMillisFree: Number(m.cpu_millis) - u.cpuMillis,
    memoryBytesFree: Number(m.memory_bytes) - u.memoryBytes,
    gpus: gpus.map((g) => gpuView(g, held?.get(g.index))),
    ...(counted ? { heldAttempts: u.attempts } : {}),
  };
}

/**
 * One GPU as the planner sees it (issue 29): the thousandths no active attempt holds, free only when
 * nothing holds any of it, and its memory where the machine reports it, less what shares hold.
 */
function gpuView(g: MachineGpu, held: GpuHeld | undefined): GpuView {
  const freeMilli = Math.max(0, GPU_MILLI_WHOLE - (held?.milli ?? 0));
  const total = g.memoryMiB === null || g.memoryMiB === undefined ? null : g.memoryMiB * 1024 * 1024;
  return {
    index: g.index,
    type: g.type,
    free: freeMilli === GPU_MILLI_WHOLE,
    freeMilli,
    memoryBytesTotal: total,
    ...(total !== null ? { memoryBytesFree: Math.max(0, total - (held?.memoryBytes ?? 0)) } : {}),
  };
}
