import { Type, type Static } from 'typebox';

/** Why some of a pool's ready stages wait: one code, how many stages, and the reason in words for the largest group. */
export const PoolWaitReason = Type.Object({
  kind: Type.String({
    description:
      "quota (their team is at its quota), quota-never (a stage asks for more than its team's whole quota), placeable (the next pass places them), a busy code (gpu-busy, cpu-busy, memory-busy, gpu-share: no room now), " +
      'a static one (gpu-type, gpu-total, cpu-total, labels, region, …: no machine will ever take them as the cluster is), gang-machines (a gang too few machines could ever run together), ' +
      'or no-machines: as gantry_stages_pending; a gang is placeable only when its whole set of machines fits now',
  }),
  stages: Type.Integer(),
  /** The scheduler's sentence for the largest group of stages of this kind: "no ready machine can run it: 2 lack 8 h100 GPUs". */
  message: Type.String(),
});
export type PoolWaitReason = Static<typeof PoolWaitReason>;

const Used = (unit: string) => Type.Object({ allocated: Type.Number({ description: unit }), total: Type.Number({ description: unit }) });

/** One pool now: its queue, why it waits, and the machines that serve it (`gpu:<type>` of a GPU machine's first GPU type, else `cpu`). */
export const PoolView = Type.Object({
  pool: Type.String({ description: 'cpu, gpu:h100, …' }),
  queued: Type.Integer({ description: 'ready stages waiting for a machine' }),
  oldestWaitSeconds: Type.Union([Type.Number(), Type.Null()], { description: 'how long the oldest ready stage has waited; null when none waits' }),
  reasons: Type.Array(PoolWaitReason, { description: 'most stages first' }),
  machines: Type.Object({
    total: Type.Integer(),
    ready: Type.Integer(),
    eligible: Type.Integer({ description: 'ready and taking new work (not cordoned or draining)' }),
  }),
  cpu: Used('millicores'),
  memory: Used('bytes'),
  gpus: Type.Array(
    Type.Object({ type: Type.String(), allocated: Type.Number({ description: 'GPUs held; a share counts its part (0.25)' }), total: Type.Integer() }),
  ),
});
export type PoolView = Static<typeof PoolView>;

export const PoolsView = Type.Object({ at: Type.Number({ description: 'when it was read (ms)' }), pools: Type.Array(PoolView) });
export type PoolsView = Static<typeof PoolsView>;

/** A pool at one moment of its history. */
export const PoolPoint = Type.Object({
  pool: Type.String(),
  queued: Type.Integer(),
  oldestWaitSeconds: Type.Union([Type.Number(), Type.Null()]),
  cpuAllocated: Type.Number({ description: 'millicores' }),
  cpuTotal: Type.Number({ description: 'millicores' }),
  gpusAllocated: Type.Number({ description: 'a share counts its part of a GPU' }),
  gpusTotal: Type.Integer(),
});
export type PoolPoint = Static<typeof PoolPoint>;

export const PoolSample = Type.Object({ at: Type.Number(), pools: Type.Array(PoolPoint) });
export type PoolSample = Static<typeof PoolSample>;

/** `GET /v1/pools/history`: samples this server took (in memory, since it started), oldest first, then one taken now. */
export const PoolHistoryView = Type.Object({
  intervalMs: Type.Integer({ description: 'how often the server samples' }),
  keptMs: Type.Integer({ description: 'how far back it keeps samples' }),
  samples: Type.Array(PoolSample),
});
export type PoolHistoryView = Static<typeof PoolHistoryView>;
