import type { ApiApp } from './api-app.js';
import { Type } from 'typebox';
import type { ApiContext } from './api-context.js';
import { ErrorBody } from './contract/job-view.js';
import { PoolHistoryView, PoolsView } from './contract/pool-view.js';
import { poolPoint, poolsNow } from './pool-stats.js';

const tags = ['machines'];

/**
 * The pools: queue depth, oldest wait, why stages wait and what the machines hold, now and over
 * time. Counts only, never a job: what `/metrics` tells any token, so a team token reads them too.
 */
export function poolRoutes(app: ApiApp, ctx: ApiContext): void {
  const { store, clock } = ctx;
  app.get(
    '/v1/pools',
    {
      config: { access: 'user' },
      schema: {
        summary: 'Every pool now: queue depth, oldest wait, why stages wait (by reason, with the reason in words), machines, CPUs, memory and GPUs allocated',
        tags,
        response: { 200: PoolsView, 401: ErrorBody },
      },
    },
    async () => {
      const at = clock.now();
      return { at, pools: await poolsNow(store, at, { reasons: true }) };
    },
  );

  app.get(
    '/v1/pools/history',
    {
      config: { access: 'user' },
      schema: {
        summary: "The pools over time: this server's samples (in memory since it started; GANTRY_POOL_SAMPLE_MS apart, 24 h kept), then one taken now",
        tags,
        querystring: Type.Object({
          since: Type.Optional(Type.Number({ minimum: 0, description: 'only samples taken after this time (ms)' })),
          max: Type.Optional(
            Type.Integer({ minimum: 2, maximum: 10_000, default: 500, description: 'at most this many samples: every n-th, evenly spaced, the newest kept' }),
          ),
        }),
        response: { 200: PoolHistoryView, 400: ErrorBody, 401: ErrorBody },
      },
    },
    async (req) => {
      const { since, max = 500 } = req.query;
      const history = ctx.poolHistory;
      const at = clock.now();
      // The last point is now, so a chart reaches the present whatever the interval.
      const current = { at, pools: (await poolsNow(store, at, { reasons: false })).map(poolPoint) };
      const kept = history?.since(since) ?? [];
      const stride = Math.ceil((kept.length + 1) / max);
      const picked = kept.filter((_, i) => (kept.length - i) % stride === 0);
      return { intervalMs: history?.intervalMs ?? 0, keptMs: history?.keptMs ?? 0, samples: [...picked, current] };
    },
  );
}
