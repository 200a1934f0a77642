import { activeAttemptStates } from '../../domain/attempt-state.js';
import { jobStates, isJobTerminal } from '../../domain/job-state.js';
import type { ExpressionBuilder } from 'kysely';
import type { Database } from '../schema.js';
import type { CollectionPlan } from '../store.js';
import { preparedList } from './prepared-query.js';
import type { Db, TxContext } from './tx-context.js';

const endedStates = jobStates.filter(isJobTerminal);

/**
 * An upload whose attempt (`a`) may still commit it: the attempt is active, or it is a gang's
 * member that succeeded while another member of its gang is still active (its outputs are
 * committed when the last one succeeds: docs/gangs.md, "Outputs"). Found through attempts_gang.
 */
const uploaderPending = (eb: ExpressionBuilder<Database & { a: Database['attempts'] }, 'a'>) =>
  eb.or([
    eb('a.state', 'in', activeAttemptStates),
    eb.and([
      eb('a.state', '=', 'succeeded'),
      eb('a.gang_id', 'is not', null),
      eb.exists(eb.selectFrom('attempts as g').select('g.id').whereRef('g.gang_id', '=', 'a.gang_id').where('g.state', 'in', activeAttemptStates)),
    ]),
  ]);

/** Stages looked at per pass for release under the budget, and unreferenced blobs collected per pass. */
const RELEASE_SCAN = 500;

/**
 * Artifact collection's decision (docs/rerun.md, "Retention and collection"), made in one
 * transaction from what it reads there; the caller deletes the files after the commit.
 *
 * 1. Blobs no manifest names and no running attempt has uploaded (nor a gang's member waiting for
 *    the rest of its gang) go, oldest unreferenced first.
 * 2. With a budget the rest exceeds: the outputs of ended jobs are released, oldest ended first,
 *    stage by stage, until the store fits. Never a job not ended, and never a stage any of whose
 *    blobs another stage also names (a rerun reuses it): releasing it would free nothing.
 *
 * A dry run decides the same and writes nothing.
 */
export async function artifactsCollect(tx: TxContext, p: { maxBytes: number | null; dryRun: boolean; limit: number }): Promise<CollectionPlan> {
  const totals = await tx.db
    .selectFrom('artifact_blobs')
    .select((eb) => [eb.fn.countAll<number>().as('n'), eb.fn.coalesce(eb.fn.sum<number>('size'), eb.lit(0)).as('bytes')])
    .executeTakeFirstOrThrow();
  const totalBytes = Number(totals.bytes);
  const unreferenced = await tx.db
    .selectFrom('artifact_blobs as b')
    .select(['b.key', 'b.size', 'b.touched_at'])
    .where((eb) => eb.not(eb.exists(eb.selectFrom('output_files as f').select('f.blob').whereRef('f.blob', '=', 'b.key'))))
    .where((eb) =>
      eb.not(
        eb.exists(
          eb
            .selectFrom('output_uploads as u')
            .innerJoin('attempts as a', 'a.id', 'u.attempt_id')
            .select('u.blob')
            .whereRef('u.blob', '=', 'b.key')
            .where(uploaderPending),
        ),
      ),
    )
    .orderBy('b.touched_at')
    .orderBy('b.key')
    .limit(p.limit + 1)
    .execute();
  const more = unreferenced.length > p.limit;
  const collect: CollectionPlan['collect'] = unreferenced
    .slice(0, p.limit)
    .map((b) => ({ blob: b.key, size: Number(b.size), unreferencedSince: Number(b.touched_at), why: 'unreferenced' }));
  let remaining = totalBytes - collect.reduce((t, b) => t + b.size, 0);

  const release: CollectionPlan['release'] = [];
  if (p.maxBytes !== null && remaining > p.maxBytes) {
    const stages = await tx.db
      .selectFrom('stages as s')
      .innerJoin('jobs as j', 'j.id', 's.job_id')
      .select(['s.id', 's.job_id', 's.name', 'j.finished_at'])
      .where('j.state', 'in', endedStates)
      .where('s.state', '=', 'succeeded')
      .where('s.outputs_released_at', 'is', null)
      .where((eb) => eb.exists(eb.selectFrom('output_files as f').select('f.blob').whereRef('f.stage_id', '=', 's.id')))
      .orderBy('j.finished_at')
      .orderBy('j.id')
      .orderBy('s.position')
      .limit(RELEASE_SCAN)
      .execute();
    for (const s of stages) {
      if (remaining <= p.maxBytes) break;
      const files = await tx.db.selectFrom('output_files').select(['blob', 'size']).where('stage_id', '=', s.id).execute();
      const blobs = [...new Set(files.map((f) => f.blob))];
      const named = await tx.db.selectFrom('output_files').select('blob').where('blob', 'in', blobs).where('stage_id', '!=', s.id).limit(1).execute();
      const uploading = await tx.db
        .selectFrom('output_uploads as u')
        .innerJoin('attempts as a', 'a.id', 'u.attempt_id')
        .select('u.blob')
        .where('u.blob', 'in', blobs)
        .where(uploaderPending)
        .limit(1)
        .execute();
      if (named.length || uploading.length) continue;
      const sizes = new Map(files.map((f) => [f.blob, Number(f.size)]));
      const bytes = [...sizes.values()].reduce((t, n) => t + n, 0);
      release.push({ jobId: s.job_id, stage: s.name, stageId: s.id, files: files.length, bytes, endedAt: Number(s.finished_at ?? 0) });
      for (const [blob, size] of sizes) collect.push({ blob, size, unreferencedSince: tx.now, why: 'released' });
      remaining -= bytes;
    }
  }
  const plan: CollectionPlan = {
    totalBytes,
    blobs: Number(totals.n),
    budgetBytes: p.maxBytes,
    collect,
    release,
    bytesAfter: remaining,
    more,
  };
  if (p.dryRun) return plan;

  for (const r of release) {
    await tx.db.deleteFrom('output_files').where('stage_id', '=', r.stageId).execute();
    await tx.db
      .updateTable('stages')
      .set({ outputs_released_at: tx.now, updated_at: tx.now })
      .where('id', '=', r.stageId)
      .where('outputs_released_at', 'is', null)
      .execute();
    await tx.event({
      type: 'stage:outputs-released',
      jobId: r.jobId,
      stageName: r.stage,
      message: `stage ${r.stage}'s committed outputs released (${r.files} file(s), ${r.bytes} bytes): the artifact store was over its budget of ${p.maxBytes} bytes`,
      data: { files: r.files, bytes: r.bytes, budgetBytes: p.maxBytes },
    });
  }
  for (let i = 0; i < collect.length; i += 500) {
    await tx.db
      .deleteFrom('artifact_blobs')
      .where(
        'key',
        'in',
        collect.slice(i, i + 500).map((c) => c.blob),
      )
      .execute();
  }
  return plan;
}

/** Blobs whose files collection found freshly written (an upload of the same content under way): recorded again, to be judged later. */
export async function artifactsKeep(tx: TxContext, blobs: readonly { blob: string; size: number }[]): Promise<void> {
  for (const b of blobs) {
    await tx.db
      .insertInto('artifact_blobs')
      .values({ key: b.blob, size: b.size, created_at: tx.now, touched_at: tx.now })
      .onConflict((oc) => oc.column('key').doUpdateSet({ touched_at: tx.now }))
      .execute();
  }
}

const blobKeysIn = preparedList((db, keys) => db.selectFrom('artifact_blobs').select('key').where('key', 'in', keys));
/** Which of `keys` have a blob row: the rest, if their files are there, were left by a crash between a collection's commit and its file deletes. */
export async function artifactBlobsKnown(db: Db, keys: readonly string[]): Promise<string[]> {
  return (await blobKeysIn.rows(db, keys)).map((r) => r.key);
}
