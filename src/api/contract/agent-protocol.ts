import { Type, type Static } from 'typebox';

/**
 * The internal API between the control plane and agents. A local agent started by `gantry up`
 * and an agent on another host speak exactly this, over HTTP.
 *
 *   register  → machine id and the timing settings the agent must follow
 *   heartbeat → every `heartbeatMs`: names the attempts the agent runs (renewing their leases);
 *               the reply says which to kill and carries new assignments. The server holds the
 *               request open up to `waitMs` when it has nothing to say, so assignments and
 *               cancels arrive at once without a second channel.
 *   start     → before spawning: the attempt is acknowledged and becomes running
 *   logs      → batches of stdout/stderr
 *   outputs   → PUT each output file, then `complete` names them
 *   complete  → the outcome, fenced by the attempt's token
 * A reply of 409 to start, logs, outputs or complete means the attempt is no longer current: kill it.
 */
const StringMap = Type.Unsafe<Record<string, string>>(Type.Object({}, { additionalProperties: Type.String() }));

export const GpuInfoWire = Type.Object({
  index: Type.Integer({ minimum: 0 }),
  uuid: Type.Union([Type.String(), Type.Null()]),
  name: Type.String(),
  type: Type.String({ minLength: 1 }),
  memoryMiB: Type.Union([Type.Number(), Type.Null()]),
});

export const RegisterRequest = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 200, pattern: '^[A-Za-z0-9][A-Za-z0-9._-]*$' }),
    cpuMillis: Type.Integer({ minimum: 1 }),
    memoryBytes: Type.Integer({ minimum: 1 }),
    gpus: Type.Array(GpuInfoWire, { maxItems: 64 }),
    gpusDeclared: Type.Boolean(),
    region: Type.Union([Type.String(), Type.Null()]),
    labels: StringMap,
    agent: Type.Object({ version: Type.String(), host: Type.String(), pid: Type.Integer() }, { additionalProperties: true }),
  },
  { additionalProperties: false },
);
export type RegisterRequest = Static<typeof RegisterRequest>;

export const AgentSettings = Type.Object({
  heartbeatMs: Type.Integer(),
  leaseMs: Type.Integer(),
  killGraceMs: Type.Integer(),
});
export type AgentSettings = Static<typeof AgentSettings>;

export const RegisterResponse = Type.Object({ machineId: Type.String(), settings: AgentSettings });
export type RegisterResponse = Static<typeof RegisterResponse>;

export const RunningAttempt = Type.Object({ attemptId: Type.String(), token: Type.Integer() }, { additionalProperties: false });

export const HeartbeatRequest = Type.Object(
  {
    running: Type.Array(RunningAttempt, { maxItems: 10_000 }),
    /** How long the server may hold the request when it has nothing to say. */
    waitMs: Type.Optional(Type.Integer({ minimum: 0, maximum: 30_000 })),
  },
  { additionalProperties: false },
);
export type HeartbeatRequest = Static<typeof HeartbeatRequest>;

export const OutputFileWire = Type.Object({ path: Type.String(), size: Type.Integer({ minimum: 0 }) }, { additionalProperties: false });

export const AssignmentWire = Type.Object({
  attemptId: Type.String(),
  token: Type.Integer(),
  jobId: Type.String(),
  stageName: Type.String(),
  attemptNumber: Type.Integer(),
  command: Type.Array(Type.String()),
  env: StringMap,
  gpuIndices: Type.Array(Type.Integer()),
  timeoutSeconds: Type.Union([Type.Integer(), Type.Null()]),
  inputs: Type.Array(Type.Object({ stage: Type.String(), attemptId: Type.String(), files: Type.Array(OutputFileWire) })),
});
export type AssignmentWire = Static<typeof AssignmentWire>;

export const HeartbeatResponse = Type.Object({
  health: Type.String(),
  kill: Type.Array(Type.Object({ attemptId: Type.String(), reason: Type.String() })),
  assignments: Type.Array(AssignmentWire),
});
export type HeartbeatResponse = Static<typeof HeartbeatResponse>;

export const StartRequest = Type.Object(
  { token: Type.Integer(), pid: Type.Union([Type.Integer(), Type.Null()]) },
  { additionalProperties: false },
);
export type StartRequest = Static<typeof StartRequest>;

export const CompleteRequest = Type.Object(
  {
    token: Type.Integer(),
    exitCode: Type.Union([Type.Integer(), Type.Null()]),
    signal: Type.Union([Type.String(), Type.Null()]),
    /** Set when the attempt did not simply exit: "timeout after 60 s", "spawn failed: ENOENT …". */
    reason: Type.Union([Type.String({ maxLength: 2000 }), Type.Null()]),
    outputs: Type.Array(OutputFileWire, { maxItems: 100_000 }),
  },
  { additionalProperties: false },
);
export type CompleteRequest = Static<typeof CompleteRequest>;

export const CompleteResponse = Type.Object({ accepted: Type.Boolean(), jobState: Type.String() });
export type CompleteResponse = Static<typeof CompleteResponse>;

export const LogsRequest = Type.Object(
  {
    token: Type.Integer(),
    chunks: Type.Array(
      Type.Object({ stream: Type.Union([Type.Literal('stdout'), Type.Literal('stderr')]), data: Type.String() }, { additionalProperties: false }),
      { maxItems: 1000 },
    ),
  },
  { additionalProperties: false },
);
export type LogsRequest = Static<typeof LogsRequest>;
