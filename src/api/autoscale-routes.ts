import type { ApiApp } from './api-app.js';
import type { ApiContext } from './api-context.js';
import { autoscaleSummary, DECISIONS_SHOWN } from './autoscale-summary.js';
import { AutoscaleView } from './contract/autoscale-view.js';
import { ErrorBody } from './contract/job-view.js';

/**
 * The autoscaler as the operator sees it (issue 30, docs/autoscaling.md "What the operator sees"):
 * pools, their machines by lifecycle, the decisions and their reasons. Machines and counts, never a
 * job, as GET /v1/pools: any signed-in token reads it.
 */
export function autoscaleRoutes(app: ApiApp, ctx: ApiContext): void {
  const { store, clock } = ctx;
  app.get(
    '/v1/autoscale',
    {
      config: { access: 'user' },
      schema: {
        summary:
          'The autoscaled pools: provider, min/max, desired/current/starting machines; the machines the autoscaler started (not released, or released in the last hour) and its latest 50 decisions with their reasons',
        tags: ['machines'],
        response: { 200: AutoscaleView, 401: ErrorBody },
      },
    },
    async () => {
      const now = clock.now();
      // Every row, released ones too: the last hour's releases are shown, and a pool's rows are
      // few (one per machine it ever started, kept until the operator's retention drops them).
      const [rows, events] = await Promise.all([
        store.autoscaleRows({}),
        store.eventsList({ jobId: null, noun: 'autoscale', newestFirst: true, limit: DECISIONS_SHOWN }),
      ]);
      return autoscaleSummary({ pools: ctx.config.pools, rows, events, now });
    },
  );
}
