import { Type, type Static } from 'typebox';
import { wireEnum } from './wire-enum.js';

/**
 * What an agent enforces on the attempts it runs (docs/containment.md), as it reports it at
 * registration and as `gantry machines` and the dashboard show it.
 *
 * - `mechanism`: `cgroup-v2` (every controller it uses from the unified hierarchy), `cgroup-v1`
 *   (from the v1 hierarchies), `cgroup-hybrid` (limits from v1, kill and emptiness from v2), `none`.
 * - `memory`, `cpu`, `pids`, `devices`: whether each is enforced on every attempt.
 * - `kill`: how an attempt's processes are all killed: `cgroup.kill` (v2), `freezer` (v1: freeze,
 *   SIGKILL every pid, thaw), `process-group` (no cgroup: a child that left the group escapes).
 * - `user`: who stages run as: `dynamic <first>-<last>` (a uid of its own per attempt), `run-as
 *   <name> (<uid>)`, or `agent <name> (<uid>)` (the agent's own user: nothing keeps a stage from the
 *   agent's files).
 * - `sandbox`: `bwrap` when `--sandbox` is on and bubblewrap works on the host, else null (`problems` says why).
 * - `problems`: why something is not enforced, or costs more than it must (`favordynmods`), one sentence each, for the operator.
 * - `gpuSharing`: how stages that share a GPU are kept apart (`--gpu-sharing`): `mps` (NVIDIA's
 *   MPS bounds each one's threads and memory), `time-slicing` (nothing bounds them). Absent from
 *   agents before shares.
 * - `migIsolated`: on a machine with MIG devices, whether an attempt can open only its own MIG
 *   devices' capability files (the devices cgroup or the sandbox, and every device's minors known;
 *   `problems` says why not). Absent on a machine without MIG devices, and from older agents.
 * - `favordynmods`: where attempts join cgroups, whether a cgroup hierarchy of the host is mounted
 *   with `favordynmods`; false: the first join of each burst of starts waits for an RCU grace
 *   period (about 8 ms), and `problems` says how the host's operator removes it
 *   (docs/containment.md). Absent where attempts join no cgroup, and from older agents.
 */
export const CONTAINMENT_MECHANISMS = ['cgroup-v2', 'cgroup-v1', 'cgroup-hybrid', 'none'] as const;
export type ContainmentMechanism = (typeof CONTAINMENT_MECHANISMS)[number];
export const CONTAINMENT_KILLS = ['cgroup.kill', 'freezer', 'process-group'] as const;
export type ContainmentKill = (typeof CONTAINMENT_KILLS)[number];
export const GPU_SHARING_MODES = ['mps', 'time-slicing'] as const;
export type GpuSharingMode = (typeof GPU_SHARING_MODES)[number];

export const ContainmentReport = Type.Object(
  {
    mechanism: wireEnum(CONTAINMENT_MECHANISMS, { description: 'where the limits come from' }),
    memory: Type.Boolean(),
    cpu: Type.Boolean(),
    pids: Type.Boolean(),
    devices: Type.Boolean(),
    kill: wireEnum(CONTAINMENT_KILLS, { description: "how all of an attempt's processes are killed" }),
    user: Type.String({ maxLength: 200 }),
    sandbox: Type.Union([Type.Literal('bwrap'), Type.Null()]),
    problems: Type.Array(Type.String({ maxLength: 500 }), { maxItems: 20 }),
    gpuSharing: Type.Optional(wireEnum(GPU_SHARING_MODES, { description: 'how stages sharing a GPU are bounded' })),
    migIsolated: Type.Optional(Type.Boolean({ description: "whether an attempt can open only its own MIG devices' capability files" })),
    favordynmods: Type.Optional(
      Type.Boolean({ description: "whether the host's cgroups are mounted with favordynmods (false: each burst's first join waits for an RCU grace period)" }),
    ),
  },
  // Later agents may report more: a server keeps what it knows.
  { additionalProperties: true },
);
export type ContainmentReport = Static<typeof ContainmentReport>;

/**
 * An attempt's limits as the agent applies them (the stage's `resources` and `limits`,
 * docs/containment.md): bytes, millicores, a count. Null: none beyond the request (CPU: no cap;
 * pids: the agent's `--pids-max`).
 */
export const AttemptLimitsWire = Type.Object(
  {
    /** The request: the memory limit where `memoryBytes` is null, and the CPU weight. */
    requestCpuMillis: Type.Integer({ minimum: 1 }),
    requestMemoryBytes: Type.Integer({ minimum: 1 }),
    memoryBytes: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()]),
    cpuMillis: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()]),
    pids: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()]),
    /** The stage asked for the network (`network: true`); only the sandbox takes it away otherwise. */
    network: Type.Boolean(),
    /** What the attempt may leave as outputs, in bytes (each file by its length) and files: the stage's
     *  `limits.outputs` or the server's default, capped by its maximum (docs/security.md, "Output limits").
     *  Absent from older servers: the agent checks nothing, and the server's upload route still does. */
    outputs: Type.Optional(Type.Object({ bytes: Type.Integer({ minimum: 1 }), files: Type.Integer({ minimum: 1 }) }, { additionalProperties: false })),
  },
  { additionalProperties: false },
);
export type AttemptLimitsWire = Static<typeof AttemptLimitsWire>;

/**
 * What an attempt used, measured from its cgroup when it ended (protocol 3): its memory's peak and
 * its CPU seconds. Null where the agent had no cgroup to read it from.
 */
export const AttemptUsageWire = Type.Object(
  {
    memoryPeakBytes: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()]),
    cpuSeconds: Type.Union([Type.Number({ minimum: 0 }), Type.Null()]),
  },
  { additionalProperties: false },
);
export type AttemptUsageWire = Static<typeof AttemptUsageWire>;
