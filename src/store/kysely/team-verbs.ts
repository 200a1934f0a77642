import { activeAttemptStates, isAttemptActive } from '../../domain/attempt-state.js';
import { NotFoundError } from '../../domain/errors.js';
import { GPU_MILLI_WHOLE, normalizeGpuType } from '../../domain/resources.js';
import { addUsage, emptyTeamUsage, formatTeamQuota, type Team, type TeamQuota, type TeamUsage } from '../../domain/team.js';
import type { StageDefinition } from '../../domain/job-definition.js';
import type { HeldUntil, RunningAttempt, TeamView } from '../../scheduler/snapshot.js';
import type { TeamsTable } from '../schema.js';
import { prepared } from './prepared-query.js';
import type { Db, Trx, TxContext } from './tx-context.js';

function toTeam(r: TeamsTable): Team {
  return { name: r.name, weight: Number(r.weight), quota: r.quota ? (JSON.parse(r.quota) as TeamQuota) : {}, createdAt: Number(r.created_at) };
}

// The scheduler's reads (every pass reads the teams and the preemption view): prepared, not built each time.
export const allTeams = prepared<[]>()((db) => db.selectFrom('teams').selectAll().orderBy('name'));

export async function teamList(db: Db | Trx): Promise<Team[]> {
  return (await allTeams.rows(db)).map(toTeam);
}

export async function teamGet(db: Db, name: string): Promise<Team | null> {
  const r = await db.selectFrom('teams').selectAll().where('name', '=', name).executeTakeFirst();
  return r ? toTeam(r) : null;
}

/**
 * Creates a team, or changes the weight or quota of one (what is not given stays). `create: false`
 * refuses an unknown team (NotFoundError) rather than making it. `changed: false` when it already
 * was as asked.
 */
export async function teamPut(
  tx: TxContext,
  p: { name: string; weight?: number; quota?: TeamQuota; create: boolean },
): Promise<{ team: Team; created: boolean; changed: boolean }> {
  const before = await teamGet(tx.db, p.name);
  if (!before && !p.create) throw new NotFoundError('team', p.name);
  const weight = p.weight ?? before?.weight ?? 1;
  const quota = p.quota ?? before?.quota ?? {};
  const quotaText = Object.keys(quota).length ? JSON.stringify(quota) : null;
  if (before && before.weight === weight && JSON.stringify(before.quota) === JSON.stringify(quota)) return { team: before, created: false, changed: false };
  if (before) await tx.db.updateTable('teams').set({ weight, quota: quotaText, updated_at: tx.now }).where('name', '=', p.name).execute();
  else await tx.db.insertInto('teams').values({ name: p.name, weight, quota: quotaText, created_at: tx.now, updated_at: tx.now }).execute();
  await tx.event({
    type: before ? 'team:changed' : 'team:created',
    message: `team ${p.name} ${before ? 'changed' : 'created'}: weight ${weight}, quota ${formatTeamQuota(quota)}`,
    data: { team: p.name, weight, quota },
  });
  // Fair share and quotas may let waiting work run now.
  await tx.publish('capacity:freed', { team: p.name });
  return { team: { name: p.name, weight, quota, createdAt: before?.createdAt ?? tx.now }, created: !before, changed: true };
}

/** What each team's attempts hold now: every attempt not yet released, by its job's team. */
const heldByTeam = prepared<[]>()((db) =>
  db
    .selectFrom('attempts')
    .innerJoin('jobs', 'jobs.id', 'attempts.job_id')
    .select(['jobs.team', 'attempts.cpu_millis', 'attempts.memory_bytes', 'attempts.gpu_indices', 'attempts.gpu_type', 'attempts.gpu_milli'])
    .where('attempts.released_at', 'is', null),
);

/** GPUs count as amounts (issue 29): a quarter of a GPU is 0.25 of its type, not 1; addUsage sums them in thousandths. */
export async function teamUsage(db: Db | Trx): Promise<Map<string, TeamUsage>> {
  const rows = await heldByTeam.rows(db);
  const out = new Map<string, TeamUsage>();
  for (const r of rows) {
    const u = out.get(r.team) ?? emptyTeamUsage();
    addUsage(u, {
      cpuMillis: Number(r.cpu_millis),
      memoryBytes: Number(r.memory_bytes),
      gpuCount: (JSON.parse(r.gpu_indices) as number[]).length,
      gpuMilli: Number(r.gpu_milli),
      gpuType: r.gpu_type === null ? null : normalizeGpuType(r.gpu_type),
    });
    out.set(r.team, u);
  }
  return out;
}

/** Every team with its weight, quota and usage: the scheduler's view (teams with usage but no row get weight 1). */
export async function schedulerTeams(db: Db | Trx, withUsage: boolean): Promise<TeamView[]> {
  return teamViews(await teamList(db), withUsage ? await teamUsage(db) : new Map<string, TeamUsage>());
}

/** The teams' rows as the scheduler sees them without usage (pass-reads.ts hands rows read with others). */
export const teamsWithoutUsage = (rows: readonly TeamsTable[]): TeamView[] => teamViews(rows.map(toTeam), new Map());

function teamViews(teams: readonly Team[], usage: ReadonlyMap<string, TeamUsage>): TeamView[] {
  const out: TeamView[] = teams.map((t) => ({ name: t.name, weight: t.weight, quota: t.quota, usage: usage.get(t.name) ?? emptyTeamUsage() }));
  for (const [name, u] of usage) if (!teams.some((t) => t.name === name)) out.push({ name, weight: 1, quota: {}, usage: u });
  return out;
}

export const preemptable = prepared<[]>()((db) =>
  db
    .selectFrom('attempts')
    .innerJoin('stages', 'stages.id', 'attempts.stage_id')
    .innerJoin('jobs', 'jobs.id', 'attempts.job_id')
    .select([
      'attempts.id',
      'attempts.token',
      'attempts.stage_id',
      'attempts.job_id',
      'attempts.stage_name',
      'attempts.machine_id',
      'attempts.state',
      'attempts.cpu_millis',
      'attempts.memory_bytes',
      'attempts.gpu_indices',
      'attempts.gpu_type',
      'attempts.gpu_milli',
      'attempts.gpu_memory_bytes',
      'attempts.started_at',
      'attempts.scheduled_at',
      'attempts.gang_id',
      'attempts.gang_rank',
      'attempts.gang_size',
      'stages.priority',
      'stages.preemptible',
      'stages.preempted_at',
      'jobs.team',
    ])
    .where('attempts.released_at', 'is', null)
    .where((eb) => eb.or([eb('stages.preemptible', '=', 1), eb('attempts.state', 'not in', activeAttemptStates)])),
);

/**
 * The attempts preemption looks at: those still holding resources whose stage is preemptible
 * (possible victims), and those the server has ended already whose agents are still killing
 * them (leaving: their room frees soon). A small set, read through the held-attempts index. A
 * gang's members come with their gang (docs/gangs.md, "Preemption"): every active member of a
 * preemptible gang stage is listed, so the planner takes and costs the gang whole.
 */
export async function preemptionView(db: Db | Trx): Promise<RunningAttempt[]> {
  return preemptionOf(await preemptable.rows(db));
}

type PreemptableRow = Awaited<ReturnType<typeof preemptable.rows>>[number];

/** The preemption view of these rows (pass-reads.ts hands rows read with others). */
export function preemptionOf(rows: readonly PreemptableRow[]): RunningAttempt[] {
  return rows.map((r) => ({
    attemptId: r.id,
    token: Number(r.token),
    stageId: r.stage_id,
    jobId: r.job_id,
    stageName: r.stage_name,
    machineId: r.machine_id,
    team: r.team,
    priority: Number(r.priority),
    preemptible: Number(r.preemptible) === 1,
    cpuMillis: Number(r.cpu_millis),
    memoryBytes: Number(r.memory_bytes),
    gpuIndices: JSON.parse(r.gpu_indices) as number[],
    gpuType: r.gpu_type === null ? null : normalizeGpuType(r.gpu_type),
    ...sharedGpu(r),
    startedAt: Number(r.started_at ?? r.scheduled_at),
    stagePreemptedAt: r.preempted_at === null ? null : Number(r.preempted_at),
    leaving: !isAttemptActive(r.state),
    ...(r.gang_id !== null ? { gang: { id: r.gang_id, size: Number(r.gang_size), rank: Number(r.gang_rank) } } : {}),
  }));
}

/**
 * What holds room on these machines and until when it must end by its stage's time limit (start,
 * or `now` if not started yet, plus timeoutSeconds; null: no limit): backfill's input, read only
 * for machines a pass holds. An attempt the server ended already frees within its kill grace:
 * taken as ending now.
 */
export async function heldUntil(db: Db | Trx, p: { machineIds: readonly string[]; now: number }): Promise<HeldUntil[]> {
  if (p.machineIds.length === 0) return [];
  const rows = await db
    .selectFrom('attempts')
    .innerJoin('stages', 'stages.id', 'attempts.stage_id')
    .select([
      'attempts.machine_id',
      'attempts.gpu_indices',
      'attempts.gpu_milli',
      'attempts.cpu_millis',
      'attempts.memory_bytes',
      'attempts.state',
      'attempts.started_at',
      'stages.definition',
    ])
    .where('attempts.released_at', 'is', null)
    .where('attempts.machine_id', 'in', [...p.machineIds])
    .execute();
  return rows.map((r) => {
    const timeout = (JSON.parse(r.definition) as StageDefinition).timeoutSeconds;
    const active = isAttemptActive(r.state);
    return {
      machineId: r.machine_id,
      gpuIndices: JSON.parse(r.gpu_indices) as number[],
      ...(Number(r.gpu_milli) < GPU_MILLI_WHOLE ? { gpuMilli: Number(r.gpu_milli) } : {}),
      cpuMillis: Number(r.cpu_millis),
      memoryBytes: Number(r.memory_bytes),
      endsBy: !active ? p.now : timeout ? Number(r.started_at ?? p.now) + timeout * 1000 : null,
    };
  });
}

/** A running share's thousandths and GPU memory for the planner (absent on whole-GPU attempts: the snapshot's default). */
function sharedGpu(r: { gpu_milli: number; gpu_memory_bytes: number | null }): { gpuMilli?: number; gpuMemoryBytes?: number } {
  const milli = Number(r.gpu_milli);
  if (milli >= GPU_MILLI_WHOLE) return {};
  return { gpuMilli: milli, ...(r.gpu_memory_bytes !== null ? { gpuMemoryBytes: Number(r.gpu_memory_bytes) } : {}) };
}
