import type { ApiApp } from './api-app.js';
import { Type } from 'typebox';
import { collectArtifacts, sweepStrays } from '../artifacts/collect-artifacts.js';
import type { ApiContext } from './api-context.js';
import { auditBy } from './auth/audit-entry.js';
import { CollectionView } from './contract/artifacts-view.js';
import { ErrorBody } from './contract/job-view.js';

/** `POST /v1/artifacts/gc`: artifact collection now, or what it would do (docs/rerun.md). */
export function artifactRoutes(app: ApiApp, ctx: ApiContext): void {
  app.post(
    '/v1/artifacts/gc',
    {
      config: { access: 'admin', audit: 'artifacts.gc' },
      schema: {
        summary:
          "Collect artifacts: delete the outputs no job names, and release ended jobs' outputs past the size budget (GANTRY_ARTIFACTS_MAX_BYTES), oldest first",
        description:
          'What the collection that runs every GANTRY_ARTIFACTS_GC_SECONDS does, now. Outputs a job that has not ended holds, and outputs a rerun reuses, are never taken. ' +
          '`dryRun`: what would go, with sizes and why; nothing is written or deleted. Without it, the whole blob tree is also read for files a crash left behind (`strays`).',
        tags: ['artifacts'],
        body: Type.Optional(Type.Object({ dryRun: Type.Optional(Type.Boolean()) }, { additionalProperties: false })),
        response: { 200: CollectionView, 400: ErrorBody },
      },
    },
    async (req) => {
      const dryRun = req.body?.dryRun === true;
      const r = await collectArtifacts(ctx.store, ctx.artifacts, {
        now: () => ctx.clock.now(),
        maxBytes: ctx.config.artifactsMaxBytes,
        graceMs: ctx.config.artifactsGraceMs,
        dryRun,
        audit: auditBy(req, 'artifacts.gc'),
      });
      // Asked for by hand: the whole blob tree is read too, for files a crash left behind.
      const strays = dryRun ? undefined : await sweepStrays(ctx.store, ctx.artifacts, { now: ctx.clock.now(), graceMs: ctx.config.artifactsGraceMs });
      req.log.info(
        { dryRun, deleted: r.deleted, freedBytes: r.freedBytes, released: r.release.length, bytesAfter: r.bytesAfter, strays },
        'artifacts collected on request',
      );
      return { ...r, release: r.release.map(({ stageId: _, ...x }) => x), ...(strays ? { strays } : {}) };
    },
  );
}
