import { Type, type Static } from 'typebox';
import { NAME_PATTERN } from './names.js';

const Quantity = (what: string) => Type.Union([Type.String({ minLength: 1, maxLength: 40 }), Type.Number({ exclusiveMinimum: 0 })], { description: what });

/** A team's quota as people write it: CPU and memory in the job spec's spelling, GPUs per type. */
export const QuotaWire = Type.Object(
  {
    cpu: Type.Optional(Quantity('CPUs, e.g. 64 or "500m"')),
    memory: Type.Optional(Quantity('memory, e.g. "256Gi"')),
    gpus: Type.Optional(
      Type.Record(Type.String({ minLength: 1, maxLength: 100 }), Type.Number({ minimum: 0, maximum: 1_000_000 }), {
        description: 'GPUs per type, e.g. {"h100": 16} or {"t4": 2.5}: shares of a GPU count, at most 3 decimals (thousandths)',
      }),
    ),
    outputs: Type.Optional(
      Quantity(
        'the bytes its committed outputs may hold together, e.g. "2Ti": past it its new uploads are refused (default: the server\'s GANTRY_TEAM_OUTPUTS_MAX_BYTES)',
      ),
    ),
  },
  { additionalProperties: false },
);
export type QuotaWire = Static<typeof QuotaWire>;

export const TeamCreateRequest = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 200, pattern: NAME_PATTERN }),
    weight: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 1000, description: 'fair-share weight (default 1)' })),
    quota: Type.Optional(QuotaWire),
  },
  { additionalProperties: false },
);
export type TeamCreateRequest = Static<typeof TeamCreateRequest>;

export const TeamChangeRequest = Type.Object(
  {
    weight: Type.Optional(Type.Number({ exclusiveMinimum: 0, maximum: 1000 })),
    /** Replaces the whole quota; {} removes every limit. */
    quota: Type.Optional(QuotaWire),
  },
  { additionalProperties: false },
);
export type TeamChangeRequest = Static<typeof TeamChangeRequest>;

const Amounts = Type.Object({
  cpu: Type.Union([Type.String(), Type.Null()]),
  memory: Type.Union([Type.String(), Type.Null()]),
  /** GPUs per type; a share counts its part (0.25), so these may be fractional (thousandths). */
  gpus: Type.Record(Type.String(), Type.Number()),
});

export const TeamView = Type.Object({
  name: Type.String(),
  weight: Type.Number(),
  /** null entries: not limited. */
  quota: Amounts,
  /** What its attempts hold now. */
  usage: Amounts,
  /** Beyond its quota in some resource (with preemptible work, which its owners may reclaim). */
  borrowing: Type.Boolean(),
  /** Dominant share of the cluster over weight (docs/scheduling.md): lower is served first. */
  share: Type.Number(),
  /** The quota in the CLI's spelling: cpu=64,memory=256Gi,gpu:h100=16, or "none". */
  quotaText: Type.String(),
  createdAt: Type.String({ format: 'date-time' }),
});
export type TeamView = Static<typeof TeamView>;
