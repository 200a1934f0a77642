import { sql } from 'kysely';
import { effectiveOutputLimits, type OutputPolicy, type OutputUsage } from '../../domain/output-limits.js';
import type { StageDefinition } from '../../domain/job-definition.js';
import type { TeamQuota } from '../../domain/team.js';
import { ValidationError } from '../../spec/validation-error.js';
import type { CommittedOutput, OutputFile } from '../records.js';
import { prepared, preparedList } from './prepared-query.js';
import type { Db, Trx, TxContext } from './tx-context.js';

/**
 * Outputs as content-addressed blobs named by manifests (docs/rerun.md). An upload records the
 * blob and which attempt uploaded it under which path; a commit copies the attempt's named
 * uploads into its stage's manifest (`output_files`), in the transaction that moves the stage to
 * succeeded. A blob is referenced while a manifest row names it.
 */

const uploadsOfAttempt = prepared<[attemptId: string]>()((db, [attemptId]) =>
  db.selectFrom('output_uploads').select(['path', 'blob', 'size']).where('attempt_id', '=', attemptId),
);
const insertManifestRow = prepared<[stageId: string, jobId: string, path: string, blob: string, size: number, attemptId: string]>()(
  (db, [stageId, jobId, path, blob, size, attemptId]) =>
    db.insertInto('output_files').values({ stage_id: stageId, job_id: jobId, path, blob, size, attempt_id: attemptId }),
);
const blobOfAttemptFile = prepared<[attemptId: string, path: string]>()((db, [attemptId, path]) =>
  db.selectFrom('output_files').select(['blob', 'size']).where('attempt_id', '=', attemptId).where('path', '=', path).limit(1),
);
const uploadsOfAttempts = preparedList((db, ids) =>
  db.selectFrom('output_uploads').select(['attempt_id', 'path', 'blob', 'size']).where('attempt_id', 'in', ids),
);

/**
 * Records an upload, in one transaction with its blob's row (its time refreshed: an upload of an
 * old unreferenced blob's content keeps it from collection). The caller fenced the attempt.
 */
export async function recordUpload(tx: TxContext, p: { attemptId: string; path: string; blob: string; size: number }): Promise<void> {
  await tx.db
    .insertInto('artifact_blobs')
    .values({ key: p.blob, size: p.size, created_at: tx.now, touched_at: tx.now })
    .onConflict((oc) => oc.column('key').doUpdateSet({ touched_at: tx.now }))
    .execute();
  await tx.db
    .insertInto('output_uploads')
    .values({ attempt_id: p.attemptId, path: p.path, blob: p.blob, size: p.size, created_at: tx.now })
    .onConflict((oc) => oc.columns(['attempt_id', 'path']).doUpdateSet({ blob: p.blob, size: p.size, created_at: tx.now }))
    .execute();
}

/** What these attempts uploaded (path, blob, size), for an outcome's check before its transaction. */
export async function uploadsOf(db: Db | Trx, attemptIds: readonly string[]): Promise<{ attemptId: string; path: string; blob: string; size: number }[]> {
  return (await uploadsOfAttempts.rows(db, attemptIds)).map((r) => ({ attemptId: r.attempt_id, path: r.path, blob: r.blob, size: Number(r.size) }));
}

/**
 * The files an outcome names, each resolved to what its attempt uploaded under that path; a file
 * not uploaded, or uploaded with another size, refuses the outcome (nothing of it is written).
 */
export async function uploadedOutputs(tx: TxContext, attemptId: string, outputs: readonly OutputFile[]): Promise<CommittedOutput[]> {
  return namedOutputs(await uploadsOfAttempt.rows(tx.db, attemptId), outputs);
}

/**
 * The files an outcome names, resolved against its attempt's uploads (as `uploadedOutputs`, for a
 * caller that read several attempts' uploads at once); `whose` prefixes each problem ("rank 2's ").
 */
export function namedOutputs(
  uploads: readonly { path: string; blob: string; size: number | string }[],
  outputs: readonly OutputFile[],
  whose = '',
): CommittedOutput[] {
  const uploaded = new Map(uploads.map((u) => [u.path, u]));
  const problems: string[] = [];
  const files = outputs.flatMap((o) => {
    const u = uploaded.get(o.path);
    if (u && Number(u.size) === o.size) return [{ path: o.path, size: o.size, blob: u.blob }];
    problems.push(`${whose}output ${o.path} was not uploaded${u ? ` whole (${u.size} bytes, not ${o.size})` : ''}`);
    return [];
  });
  if (problems.length) throw new ValidationError(problems.map((message) => ({ path: '/outputs', message })));
  return files;
}

/** The commit of a stage's outputs: its manifest, one row per file (one prepared insert each). */
export async function commitManifest(
  tx: TxContext,
  p: { stageId: string; jobId: string; attemptId: string; files: readonly CommittedOutput[] },
): Promise<void> {
  for (const f of p.files) await insertManifestRow.run(tx.db, p.stageId, p.jobId, f.path, f.blob, f.size, p.attemptId);
}

/** A committed file by the attempt that produced it, through any manifest that names it (a reused stage's included). */
export async function committedBlob(db: Db, attemptId: string, path: string): Promise<{ blob: string; size: number } | null> {
  const r = await blobOfAttemptFile.first(db, attemptId, path);
  return r ? { blob: r.blob, size: Number(r.size) } : null;
}

/** Upstream stages, in the jobs of the attempts active on a machine, whose committed outputs are the named attempt's; with the stage that would read them. */
const upstreamOfActiveOn = prepared<[machineId: string, attemptId: string]>()((db, [machineId, attemptId]) =>
  db
    .selectFrom('attempts as a')
    .innerJoin('stages as s', 's.id', 'a.stage_id')
    .innerJoin('stages as u', 'u.job_id', 'a.job_id')
    .select(['s.definition as definition', 'u.name as upstream'])
    .where('a.machine_id', '=', machineId)
    // Active attempts hold their machine's resources (released_at null): the partial index attempts_held.
    .where('a.released_at', 'is', null)
    .where('a.state', 'in', ['scheduled', 'running'])
    .where('u.output_attempt_id', '=', attemptId),
);

/**
 * Whether a machine may read an attempt's committed outputs: only as the inputs of a stage it runs
 * now, that is, an attempt placed on it and active (scheduled or running) whose stage needs the
 * stage those outputs are committed for (its output_attempt_id; a reused stage's names the attempt
 * of the job that made them). Bounded by the machine's active attempts (docs/security.md).
 */
export async function machineReadsOutput(db: Db, machineId: string, attemptId: string): Promise<boolean> {
  for (const r of await upstreamOfActiveOn.rows(db, machineId, attemptId)) {
    const { needs } = JSON.parse(r.definition) as StageDefinition;
    if (needs.includes(r.upstream)) return true;
  }
  return false;
}

const stageAndTeam = prepared<[stageId: string]>()((db, [stageId]) =>
  db.selectFrom('stages').innerJoin('jobs', 'jobs.id', 'stages.job_id').select(['stages.definition', 'jobs.team']).where('stages.id', '=', stageId),
);
const teamQuota = prepared<[team: string]>()((db, [team]) => db.selectFrom('teams').select('quota').where('name', '=', team));
/** Each blob a manifest of the team's jobs names, once: what the team keeps on the server's disk (jobs_team, 0021, finds its jobs). */
const teamCommittedBytes = prepared<[team: string]>()((db, [team]) =>
  db
    .selectFrom('artifact_blobs')
    .select(sql<number | string>`coalesce(sum(artifact_blobs.size), 0)`.as('bytes'))
    .where(
      'artifact_blobs.key',
      'in',
      db.selectFrom('output_files').innerJoin('jobs', 'jobs.id', 'output_files.job_id').select('output_files.blob').where('jobs.team', '=', team),
    ),
);

/**
 * What an attempt has used of its output limits when it uploads `path` (domain/output-limits.ts):
 * its stage's limits under the server's policy, its uploads under other paths, and, where its team
 * is bounded (its quota's `outputs`, else the policy's), its team's committed bytes. Costs the
 * attempt's uploads and, with a team bound, the team's manifests: read only by uploads, never by a
 * stage that leaves no file, but a team with many stored files pays for them on each upload.
 */
export async function outputUsage(db: Db | Trx, a: { id: string; stage_id: string }, path: string, policy: OutputPolicy): Promise<OutputUsage> {
  const st = await stageAndTeam.first(db, a.stage_id);
  const def = st ? (JSON.parse(st.definition) as StageDefinition) : null;
  let otherBytes = 0;
  let otherFiles = 0;
  for (const u of await uploadsOfAttempt.rows(db, a.id)) {
    if (u.path === path) continue;
    otherBytes += Number(u.size);
    otherFiles++;
  }
  // The team's own bound (its quota's `outputs`), else the server's.
  const quota = st ? (await teamQuota.first(db, st.team))?.quota : null;
  const teamMaxBytes = (quota ? (JSON.parse(quota) as TeamQuota).outputBytes : undefined) ?? policy.teamMaxBytes;
  const teamBytes = teamMaxBytes === null || !st ? null : Number((await teamCommittedBytes.first(db, st.team))?.bytes ?? 0);
  return { limits: effectiveOutputLimits(def?.outputLimits, policy), otherBytes, otherFiles, team: st?.team ?? '', teamMaxBytes, teamBytes };
}
