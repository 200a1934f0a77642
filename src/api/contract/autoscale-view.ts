import { Type, type Static } from 'typebox';
import { wireEnum } from './wire-enum.js';

/**
 * What the operator sees of the autoscaler (issue 30, docs/autoscaling.md "What the operator
 * sees"): `GET /v1/autoscale`, read by `gantry autoscale` and the dashboard's pools page.
 */
const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(t: T) => Type.Union([t, Type.Null()]);
const StringMap = Type.Unsafe<Record<string, string>>(Type.Object({}, { additionalProperties: Type.String() }));

/** Where an autoscaled machine is in its life (the server's machine-lifecycle.ts; contract-agreement.ts holds them equal). */
export const MACHINE_LIFECYCLES = ['provisioning', 'joining', 'ready', 'draining', 'failed', 'released'] as const;
export type MachineLifecycle = (typeof MACHINE_LIFECYCLES)[number];

/** What starts and stops a pool's machines (pool-template.ts's ScaleProvider). */
export const SCALE_PROVIDERS = ['local', 'command'] as const;
export type ScaleProvider = (typeof SCALE_PROVIDERS)[number];

/** One machine the autoscaler started: its row (the server's AutoscaleRow, held equal by contract-agreement.ts). */
export const AutoscaleMachineView = Type.Object({
  name: Type.String({ description: 'what its agent registers as; the provider’s idempotency key' }),
  pool: Type.String(),
  lifecycle: wireEnum(MACHINE_LIFECYCLES, { description: 'provisioning | joining | ready | draining | failed | released' }),
  reason: Type.String({ description: 'the decision that started it, in words' }),
  startedAt: Type.Number({ description: 'when the start was decided (ms): its boot timeout runs from here' }),
  requestedAt: Nullable(Type.Number()),
  providerId: Nullable(Type.String()),
  joinedAt: Nullable(Type.Number()),
  machineId: Nullable(Type.String()),
  drainingAt: Nullable(Type.Number()),
  releasedAt: Nullable(Type.Number()),
  stoppedAt: Nullable(Type.Number()),
  idleSince: Nullable(Type.Number({ description: 'since when no attempt has held room on it (ms); null while one does, or before it joined' })),
  attempts: Type.Integer({ description: 'attempts holding room on it now' }),
  failReason: Nullable(Type.String()),
  heldFor: Type.Array(Type.String(), { description: 'ids of the waiting stages it is held for' }),
  updatedAt: Type.Number(),
});
export type AutoscaleMachineView = Static<typeof AutoscaleMachineView>;

/** When its row entered its present lifecycle: what SINCE counts from. */
export function lifecycleSince(m: AutoscaleMachineView): number {
  switch (m.lifecycle) {
    case 'provisioning':
      return m.startedAt;
    case 'joining':
      return m.requestedAt ?? m.startedAt;
    case 'ready':
      return m.joinedAt ?? m.updatedAt;
    case 'draining':
      return m.drainingAt ?? m.updatedAt;
    case 'failed':
      return m.updatedAt;
    case 'released':
      return m.releasedAt ?? m.updatedAt;
  }
}

/** A pool's machine template, as declared, and in words. */
export const AutoscaleTemplateView = Type.Object({
  cpuMillis: Type.Integer(),
  memoryBytes: Type.Integer(),
  gpus: Nullable(Type.Object({ type: Type.String(), count: Type.Integer() })),
  region: Nullable(Type.String()),
  labels: StringMap,
  description: Type.String({ description: '"8 × h100, 32 CPU, 256Gi"' }),
});
export type AutoscaleTemplateView = Static<typeof AutoscaleTemplateView>;

const Count = Type.Integer({ minimum: 0 });

export const AutoscalePoolView = Type.Object({
  name: Type.String(),
  template: AutoscaleTemplateView,
  provider: wireEnum(SCALE_PROVIDERS),
  min: Count,
  max: Count,
  idleSeconds: Count,
  bootTimeoutSeconds: Count,
  spareMachines: Count,
  maxStartsPerInterval: Nullable(Count),
  machines: Type.Object({ provisioning: Count, joining: Count, ready: Count, draining: Count, failed: Count }),
  desired: Type.Integer({ minimum: 0, description: 'provisioning + joining + ready: what counts toward min and max' }),
  current: Type.Integer({ minimum: 0, description: 'ready: joined and taking work' }),
  starting: Type.Integer({ minimum: 0, description: 'provisioning + joining: on their way in' }),
});
export type AutoscalePoolView = Static<typeof AutoscalePoolView>;

/** One decision: an `autoscale:*` event, its reason as its message. */
export const AutoscaleDecisionView = Type.Object({
  seq: Type.Integer(),
  at: Type.Number(),
  type: Type.String({ description: 'autoscale:start, autoscale:drain, autoscale:release, autoscale:fail, …' }),
  pool: Nullable(Type.String()),
  machine: Nullable(Type.String({ description: 'the machine it is about, by name; null for a decision about several' })),
  message: Type.String({ description: 'the reason, in words' }),
});
export type AutoscaleDecisionView = Static<typeof AutoscaleDecisionView>;

/** `GET /v1/autoscale`. */
export const AutoscaleView = Type.Object({
  at: Type.Number({ description: 'when it was read (ms)' }),
  pools: Type.Array(AutoscalePoolView, { description: 'the pools the server autoscales, as its cluster file declares them' }),
  machines: Type.Array(AutoscaleMachineView, { description: 'machines not released, then those released in the last hour; oldest start first' }),
  decisions: Type.Array(AutoscaleDecisionView, { description: 'the latest 50 autoscale:* events, newest first' }),
  /** Present when no pool is autoscaled: says so, and how to declare one. */
  note: Type.Optional(Type.String()),
});
export type AutoscaleView = Static<typeof AutoscaleView>;

/** What the autoscaler says of a waiting stage (`gantry explain`): a machine starting for it, or why it starts none. */
export const StageAutoscaleView = Type.Object({
  kind: Type.String({
    description:
      'held (a machine started for it is on its way, or joined: the next pass places it there), or why it starts nothing: starting, fits-now, quota, at-max, start-limit, backoff, not-placed, region, labels, gpu-type, too-big, gpu-machine, …',
  }),
  message: Type.String(),
  pool: Nullable(Type.String({ description: 'the autoscaled pool it names, if any' })),
  machine: Nullable(Type.String({ description: 'the machine held for it, if any' })),
});
export type StageAutoscaleView = Static<typeof StageAutoscaleView>;
