import { Type, type Static } from 'typebox';
import { AttemptEnd } from './attempt-end.js';
import { AttemptLimitsWire, AttemptUsageWire, ContainmentReport } from './containment.js';

/**
 * The internal API between the control plane and agents. A local agent started by `gantry up`
 * and an agent on another host speak exactly this, over HTTP.
 *
 *   register  → machine id and the timing settings the agent must follow
 *   heartbeat → every `heartbeatMs`: names the attempts the agent runs (renewing their leases);
 *               the reply says which to kill and carries new assignments. The server holds the
 *               request open up to `waitMs` when it has nothing to say, so assignments and
 *               cancels arrive at once without a second channel. The reply's own `heartbeatMs`,
 *               grown with the fleet, is the period from then on (absent: the registration's).
 *   report    → what happened since the last report, for many attempts in one request and one
 *               transaction: acknowledgements (before spawning: the attempt becomes running), pids
 *               (after spawning), and outcomes (fenced by each attempt's token). One report is in
 *               flight per agent; what happens meanwhile waits for the next one, so the cost per
 *               stage falls as the load rises (group commit). Each item gets its own answer. A
 *               report with outcomes may ask for the assignments they made room for (placed in
 *               its own transaction): they come with its answer, and a heartbeat held meanwhile is
 *               not answered for them, so a busy machine's work flows on reports alone.
 *   logs      → pieces of stdout/stderr read from the attempt's log files, each at its byte
 *               offset; the server stores each byte once and answers how far it has each stream,
 *               so the agent retries until it has all of it (before the outcome, see docs/agent.md)
 *   outputs   → PUT each output file, then the outcome in a report names them
 *   start, complete → the same as one item of a report (kept for single-attempt clients)
 * A reply of 409 to start, logs, outputs or complete, or a report item answered `stale`, means the
 * attempt is no longer current: kill it.
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
    agent: Type.Object(
      {
        version: Type.String(),
        host: Type.String(),
        pid: Type.Integer(),
        /** What the agent enforces on its attempts (docs/containment.md). Inside `agent`, which
         *  servers before containment accept with any field, so that a new agent can join them. */
        containment: Type.Optional(ContainmentReport),
        /** Where other machines reach this one (`--advertise-addr`): a gang whose rank 0 runs here
         *  meets at it (docs/gangs.md, "Rendezvous"). Absent: `host`. Inside `agent` for the same reason. */
        advertiseAddr: Type.Optional(Type.String({ minLength: 1, maxLength: 253, pattern: '^[A-Za-z0-9._:-]+$' })),
        /** The ports this machine keeps for gangs (`--gang-ports`): the server reserves each gang's master
         *  port among them. Absent: 29500-29599. */
        gangPorts: Type.Optional(
          Type.Object(
            { first: Type.Integer({ minimum: 1, maximum: 65535 }), last: Type.Integer({ minimum: 1, maximum: 65535 }) },
            { additionalProperties: false },
          ),
        ),
      },
      { additionalProperties: true },
    ),
  },
  { additionalProperties: false },
);
export type RegisterRequest = Static<typeof RegisterRequest>;

export const AgentSettings = Type.Object({
  heartbeatMs: Type.Integer(),
  leaseMs: Type.Integer(),
  killGraceMs: Type.Integer(),
  /** How long an agent that cannot reach the server keeps its stages running before it kills
   *  them (the server's restart is not a reason to lose work; Nomad's max_client_disconnect).
   *  Absent from older servers: the lease then. */
  disconnectGraceMs: Type.Optional(Type.Integer()),
  /** This server answers a report that asks (`ReportRequest.assignments`) with the machine's new
   *  assignments, those its outcomes made room for. Absent from older servers: they would refuse
   *  the field, so an agent asks only where this says yes. */
  reportAssignments: Type.Optional(Type.Boolean()),
  /** This server can start at placement the work a report's transaction places on the reporting
   *  machine (`ReportRequest.startAssignments`; docs/agent.md, "Started at placement"). Absent
   *  from older servers: they would refuse the field, so an agent asks only where this says yes. */
  startedAssignments: Type.Optional(Type.Boolean()),
  /** The agent protocol this server speaks (`AGENT_PROTOCOL_VERSION`, attempt-end.ts). Absent from
   *  servers before typed ends: version 1, so an agent sends them no `end` in its outcomes. */
  protocol: Type.Optional(Type.Integer({ minimum: 1 })),
  /** This server may shed an idle heartbeat past its heartbeat budget (429 `heartbeat_shed` with
   *  Retry-After) from an agent that says it honours that (`HeartbeatRequest.acceptsShedding`).
   *  Absent from older servers: they would refuse the field, so an agent sends it only where this
   *  says yes (docs/failure-detection.md, "Shedding heartbeats past the budget"). */
  shedding: Type.Optional(Type.Boolean()),
  /** This server reads `HeartbeatRequest.knownAsOf` and says `asOf` in its answers to heartbeats and
   *  reports. Absent from older servers: they would refuse the field, so an agent sends it only
   *  where this says yes (docs/failure-detection.md, "What a heartbeat's list knows"). */
  knownAsOf: Type.Optional(Type.Boolean()),
});
export type AgentSettings = Static<typeof AgentSettings>;

export const RegisterResponse = Type.Object({
  machineId: Type.String(),
  settings: AgentSettings,
  /** The machine's own credential, when it joined with a join token: shown this once; the agent keeps it and speaks with it from then on. */
  credential: Type.Optional(Type.String()),
});
export type RegisterResponse = Static<typeof RegisterResponse>;

/** `progress`: what the stage last wrote to GANTRY_PROGRESS_FILE, sent when it changed. */
export const ProgressWire = Type.Object(
  { fraction: Type.Number({ minimum: 0, maximum: 1 }), message: Type.Optional(Type.String({ maxLength: 200 })) },
  { additionalProperties: false },
);
export const RunningAttempt = Type.Object(
  { attemptId: Type.String(), token: Type.Integer(), progress: Type.Optional(ProgressWire) },
  { additionalProperties: false },
);

/** An agent told to stop for good asks for its own machine to be drained (`now`: its stages stopped at once, requeued). */
export const DrainSelfRequest = Type.Object({ now: Type.Optional(Type.Boolean()) }, { additionalProperties: false });
export type DrainSelfRequest = Static<typeof DrainSelfRequest>;
export const DrainSelfResponse = Type.Object({ stopped: Type.Integer() });
export type DrainSelfResponse = Static<typeof DrainSelfResponse>;

export const HeartbeatRequest = Type.Object(
  {
    running: Type.Array(RunningAttempt, { maxItems: 10_000 }),
    /** How long the server may hold the request when it has nothing to say. */
    waitMs: Type.Optional(Type.Integer({ minimum: 0, maximum: 30_000 })),
    /** This agent waits out a 429's Retry-After before its next heartbeat: a server past its
     *  budget may shed this heartbeat if it lists nothing running. Absent (agents from before):
     *  never shed. */
    acceptsShedding: Type.Optional(Type.Boolean()),
    /** The list was made after the agent had acted on every answer given up to this time (the
     *  answers' `asOf`, the server's clock): a running attempt that started well before it and is
     *  not listed is not on this machine; one that started after it may be in an answer the agent
     *  had not read, and the list is no evidence against it (docs/failure-detection.md, "What a
     *  heartbeat's list knows"). Absent (agents from before, or one that has had no answer yet):
     *  judged by when the heartbeat arrived. Only where the settings say `knownAsOf`. */
    knownAsOf: Type.Optional(Type.Integer({ minimum: 0 })),
  },
  { additionalProperties: false },
);
export type HeartbeatRequest = Static<typeof HeartbeatRequest>;

export const OutputFileWire = Type.Object({ path: Type.String(), size: Type.Integer({ minimum: 0 }) }, { additionalProperties: false });

/** A share of one GPU: `milli` thousandths of it (the trace's gpu_milli), `memoryBytes` of its memory where asked. */
export const GpuShareWire = Type.Object(
  { milli: Type.Integer({ minimum: 1, maximum: 1000 }), memoryBytes: Type.Optional(Type.Integer({ minimum: 1 })) },
  { additionalProperties: false },
);
export type GpuShareWire = Static<typeof GpuShareWire>;

/** A gang's member (docs/gangs.md, "Rendezvous"): its rank, the gang's size, and where rank 0 listens (its machine's advertised address, the port reserved for the gang there). */
export const GangWire = Type.Object(
  {
    rank: Type.Integer({ minimum: 0 }),
    size: Type.Integer({ minimum: 2 }),
    masterAddr: Type.String({ minLength: 1 }),
    masterPort: Type.Integer({ minimum: 1, maximum: 65535 }),
  },
  { additionalProperties: false },
);
export type GangWire = Static<typeof GangWire>;

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
  /** The stage's own disconnect grace; null or absent: the settings' disconnectGraceMs. */
  disconnectGraceSeconds: Type.Optional(Type.Union([Type.Integer(), Type.Null()])),
  /** A preemptible stage: give it GANTRY_CHECKPOINT_DIR, a directory kept across its attempts. */
  checkpoint: Type.Optional(Type.Boolean()),
  inputs: Type.Array(Type.Object({ stage: Type.String(), attemptId: Type.String(), files: Type.Array(OutputFileWire) })),
  /** What the agent's containment enforces (docs/containment.md). Absent from older servers: the
   *  agent then limits nothing but the pids (its --pids-max). */
  limits: Type.Optional(AttemptLimitsWire),
  /** A share of its one GPU (`gpuIndices` holds exactly one): thousandths of it, and its memory
   *  where the stage asked. The agent bounds it with MPS where it runs (`--gpu-sharing mps`), and
   *  only says so otherwise (docs/machines.md, "A share of a GPU"). Absent: whole GPUs. */
  gpuShare: Type.Optional(GpuShareWire),
  /** A gang's member: the agent gives it the rendezvous variables (attempt-env.ts). Absent: not a
   *  gang; an agent from before gangs ignores it, and its member runs without them. */
  gang: Type.Optional(GangWire),
  /** Written `running` where it was placed, in the transaction of the report whose answer carries
   *  it (only to an agent that asked, `ReportRequest.startAssignments`): spawn it with no
   *  acknowledgement. Absent: acknowledge first, and run it only once that is answered `ok`. */
  started: Type.Optional(Type.Boolean()),
});
export type AssignmentWire = Static<typeof AssignmentWire>;

export const HeartbeatResponse = Type.Object({
  health: Type.String(),
  /** `graceMs`: a preempted attempt's own time between TERM and KILL, to checkpoint (else the cluster's killGraceMs). */
  kill: Type.Array(Type.Object({ attemptId: Type.String(), reason: Type.String(), graceMs: Type.Optional(Type.Integer({ minimum: 0 })) })),
  assignments: Type.Array(AssignmentWire),
  /** The agent's period from now on: hold the next heartbeat this long (its waitMs), and send it
   *  within this of this answer. Grown with the fleet's size (docs/failure-detection.md, "A period
   *  that grows with the fleet"). Absent from older servers: the registration's heartbeatMs. */
  heartbeatMs: Type.Optional(Type.Integer({ minimum: 1 })),
  /** When this answer was given (the server's clock): what the agent's `knownAsOf` is made of. Absent from older servers. */
  asOf: Type.Optional(Type.Integer()),
});
export type HeartbeatResponse = Static<typeof HeartbeatResponse>;

export const StartRequest = Type.Object({ token: Type.Integer(), pid: Type.Union([Type.Integer(), Type.Null()]) }, { additionalProperties: false });
export type StartRequest = Static<typeof StartRequest>;

export const CompleteRequest = Type.Object(
  {
    token: Type.Integer(),
    exitCode: Type.Union([Type.Integer(), Type.Null()]),
    signal: Type.Union([Type.String(), Type.Null()]),
    /** Set when the attempt did not simply exit: "timeout after 60 s", "spawn failed: ENOENT …".
     *  Text for people; protocol 1 agents carried the decision in it (mapped at the server's edge). */
    reason: Type.Union([Type.String({ maxLength: 2000 }), Type.Null()]),
    /** Protocol 2: how the attempt ended, typed. Absent from agents of protocol 1. */
    end: Type.Optional(AttemptEnd),
    outputs: Type.Array(OutputFileWire, { maxItems: 100_000 }),
    /** How long each stream's log file was when the process ended: what the server lacks of it is marked missing in the log. */
    logBytes: Type.Optional(Type.Object({ stdout: Type.Integer({ minimum: 0 }), stderr: Type.Integer({ minimum: 0 }) }, { additionalProperties: false })),
    /** Protocol 3: what the attempt used, from its cgroup. Sent only to a server that says protocol 3 or later. */
    usage: Type.Optional(AttemptUsageWire),
  },
  { additionalProperties: false },
);
export type CompleteRequest = Static<typeof CompleteRequest>;

export const CompleteResponse = Type.Object({ accepted: Type.Boolean(), jobState: Type.String() });
export type CompleteResponse = Static<typeof CompleteResponse>;

/**
 * A piece of one stream of an attempt's output, as the agent read it from the stream's file:
 * `offset` is where it starts in that file and `bytes` how many bytes of the file it covers
 * (`data` is their UTF-8 decoding, which can differ in length where the output is not valid UTF-8).
 * The server stores a piece once: one it already has is ignored, so a resend is harmless.
 */
export const LogPiece = Type.Object(
  {
    stream: Type.Union([Type.Literal('stdout'), Type.Literal('stderr')]),
    offset: Type.Integer({ minimum: 0 }),
    bytes: Type.Integer({ minimum: 0, maximum: 1024 * 1024 }),
    data: Type.String(),
    /**
     * Part of the log's tail, shipped once the process has ended and the server said `capped`: it
     * may start past the stream's mark, and the bytes between are then cut (docs/agent.md, "Logs").
     */
    tail: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);
export type LogPiece = Static<typeof LogPiece>;

/** With no chunks, only asks where the server's copy of each stream ends (an agent resuming after a restart). */
export const LogsRequest = Type.Object(
  {
    token: Type.Integer(),
    chunks: Type.Array(LogPiece, { maxItems: 1000 }),
  },
  { additionalProperties: false },
);
export type LogsRequest = Static<typeof LogsRequest>;

/**
 * How many bytes of each stream the server has taken (stored, or cut between the head and the tail):
 * the agent ships on from there. `capped`: the attempt's log filled its head, and the server takes
 * no more of it while it runs; once its process has ended it takes the last `tailBytes` of its
 * output as `tail` pieces (an agent that ships no tail may stop reading).
 */
export const LogsResponse = Type.Object({
  stdout: Type.Integer(),
  stderr: Type.Integer(),
  capped: Type.Boolean(),
  tailBytes: Type.Optional(Type.Integer({ minimum: 0 })),
});
export type LogsResponse = Static<typeof LogsResponse>;

export const StartedItem = Type.Object({ attemptId: Type.String({ maxLength: 100 }), ...StartRequest.properties }, { additionalProperties: false });
export type StartedItem = Static<typeof StartedItem>;

export const CompletedItem = Type.Object({ attemptId: Type.String({ maxLength: 100 }), ...CompleteRequest.properties }, { additionalProperties: false });
export type CompletedItem = Static<typeof CompletedItem>;

export const ReportRequest = Type.Object(
  {
    /** pid null: the acknowledgement, sent before spawning; nothing may run until it is answered `ok`.
     *  A second item with the pid, after the spawn, records it. */
    started: Type.Array(StartedItem, { maxItems: 10_000 }),
    completed: Type.Array(CompletedItem, { maxItems: 10_000 }),
    /** Answer with the assignments this report's outcomes made room for (`ReportResponse.assignments`):
     *  they then need no heartbeat of their own. Only where the settings say `reportAssignments`. */
    assignments: Type.Optional(Type.Boolean()),
    /** With `assignments`: this agent runs assignments marked `started` without acknowledging them,
     *  so the work placed on this machine in this report's transaction may be written `running`
     *  there and then. Only where the settings say `startedAssignments`. */
    startAssignments: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);
export type ReportRequest = Static<typeof ReportRequest>;

/**
 * One item's answer. `ok`: recorded. `duplicate`: this very outcome was recorded before (a
 * resend; nothing more is owed). `stale`: the attempt is no longer current (canceled, lost,
 * superseded, or not this machine's): kill it and report nothing more. `refused`: the item is
 * wrong in a way a resend cannot fix (an output named but not uploaded whole); `message` says how.
 */
export const ReportResult = Type.Union([Type.Literal('ok'), Type.Literal('duplicate'), Type.Literal('stale'), Type.Literal('refused')]);
export type ReportResult = Static<typeof ReportResult>;

export const ReportItemResult = Type.Object({
  attemptId: Type.String(),
  result: ReportResult,
  message: Type.Optional(Type.String()),
  /** For outcomes: the job's state after this one was recorded. */
  jobState: Type.Optional(Type.String()),
});
export type ReportItemResult = Static<typeof ReportItemResult>;

/**
 * The answers in the request's order, one per item. `assignments`, to a report that asked and had
 * outcomes: the machine's placed and not yet acknowledged attempts as a heartbeat would carry them
 * (one the agent already has is run once: it goes by the attempt's id), and, to one that said
 * `startAssignments`, those this report's transaction placed and started (`started: true`).
 */
export const ReportResponse = Type.Object({
  started: Type.Array(ReportItemResult),
  completed: Type.Array(ReportItemResult),
  assignments: Type.Optional(Type.Array(AssignmentWire)),
  /** When this answer was given (the server's clock), no earlier than the start of any attempt it
   *  carries started: what the agent's `knownAsOf` is made of. Absent from older servers. */
  asOf: Type.Optional(Type.Integer()),
});
export type ReportResponse = Static<typeof ReportResponse>;
