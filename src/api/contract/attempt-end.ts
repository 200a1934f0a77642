import { Type, type Static } from 'typebox';
import { wireEnum } from './wire-enum.js';

/**
 * How an attempt ended, as a kind that code decides on and a detail that people read. Decisions
 * (retry or not, charge the user's retries or the infrastructure's) are taken on the kind, by a
 * table (`src/domain/attempt-end-policy.ts`), never on the wording of the detail: an agent may
 * reword its messages without spending anybody's retries.
 *
 * Who says which:
 * - the agent, in an outcome: `exited` (the process exited, any code), `signaled` (a signal ended
 *   it and nobody asked: a crash, the kernel's OOM killer outside a cgroup), `timeout` (its
 *   timeoutSeconds passed and the agent killed it), `spawn-failed` (the command could not be
 *   started: no such file, not executable), `inputs-failed` (its inputs could not be fetched),
 *   `outputs-failed` (its outputs could not be uploaded), `killed` (the agent killed it because it
 *   was told to or lost the server past its grace), `oom-killed` (its cgroup's OOM counter moved;
 *   the containment issue);
 * - the control plane, for attempts that ended without an outcome: `lost` (its machine or lease
 *   was lost), `preempted` (a higher priority stage took its place), `killed` (canceled).
 */
export const ATTEMPT_END_KINDS = [
  'exited',
  'signaled',
  'timeout',
  'spawn-failed',
  'inputs-failed',
  'outputs-failed',
  'killed',
  'oom-killed',
  'lost',
  'preempted',
] as const;
export type AttemptEndKind = (typeof ATTEMPT_END_KINDS)[number];

export const AttemptEndKindWire = wireEnum(ATTEMPT_END_KINDS, { description: 'how the attempt ended' });

/** An attempt's end on the wire: the kind, and what a person should read (null when the kind and exit code say it all). */
export const AttemptEnd = Type.Object(
  {
    kind: AttemptEndKindWire,
    detail: Type.Union([Type.String({ maxLength: 2000 }), Type.Null()]),
  },
  { additionalProperties: false },
);
export type AttemptEnd = Static<typeof AttemptEnd>;

/**
 * The agent protocol's version. 1: outcomes carry only `exitCode`, `signal` and a `reason` text
 * (every release before typed ends). 2: an outcome carries `end`, an AttemptEnd; the server says
 * `protocol: 2` in its settings, and an agent sends `end` only to a server that says so (an older
 * server refuses fields it does not know). A server maps a version-1 outcome's text to a kind once,
 * at its edge (`src/api/legacy-attempt-end.ts`). 3: an outcome may carry `usage` (its memory's peak,
 * its CPU seconds, from its cgroup: docs/containment.md); an agent sends it only to a server that
 * says 3 or later.
 */
export const AGENT_PROTOCOL_VERSION = 3;
