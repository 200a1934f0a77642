/**
 * The wire (src/api/contract/) and the domain each declare the states: the domain as state machines
 * (who moves what where), the contract as the lists clients compare against, with no import of the
 * server's code. This file makes the build fail the moment the two name different states or
 * attempt end kinds, or the contract's names rule differs from the job spec's;
 * contract-agreement.test.ts checks the values that types cannot (the terminal and active sets,
 * read from the transition tables).
 */
import type * as wire from './contract/states.js';
import type { NAME_PATTERN as WIRE_NAME_PATTERN } from './contract/names.js';
import type { AttemptEndKind as WireAttemptEndKind } from './contract/attempt-end.js';
import type { AttemptEndKind } from '../domain/attempt-end.js';
import type { AttemptState } from '../domain/attempt-state.js';
import type { JobState } from '../domain/job-state.js';
import type { MachineHealth } from '../domain/machine-health.js';
import type { ShownScheduling } from '../domain/machine-scheduling.js';
import type { NAME_PATTERN } from '../domain/job-spec.js';
import type { StageState } from '../domain/stage-state.js';
import type { TokenKind } from '../domain/token-kind.js';
import type { AttemptLimitsWire, AttemptUsageWire, ContainmentReport } from './contract/containment.js';
import type { AttemptLimits, AttemptUsage, LogPiece, MachineContainment } from '../store/records.js';
import type * as autoscaleWire from './contract/autoscale-view.js';
import type { AutoscaleRow } from '../autoscale/autoscale-row.js';
import type { MachineLifecycle } from '../autoscale/machine-lifecycle.js';
import type { ScaleProvider } from '../autoscale/pool-template.js';

/** True only when A and B are the same type (neither a wider nor a narrower one). */
export type Same<A, B> = (<T>() => T extends A ? 1 : 2) extends <T>() => T extends B ? 1 : 2 ? true : false;
type Assert<T extends true> = T;

export type Agreement = [
  Assert<Same<wire.JobState, JobState>>,
  Assert<Same<wire.StageState, StageState>>,
  Assert<Same<wire.AttemptState, AttemptState>>,
  Assert<Same<WireAttemptEndKind, AttemptEndKind>>,
  Assert<Same<wire.MachineHealth, MachineHealth>>,
  Assert<Same<wire.MachineScheduling, ShownScheduling>>,
  Assert<Same<wire.TokenKind, TokenKind>>,
  Assert<Same<wire.LogStream, LogPiece['stream']>>,
  Assert<Same<typeof WIRE_NAME_PATTERN, typeof NAME_PATTERN>>,
  // Containment (docs/containment.md): what the store keeps of a machine's report and an attempt's usage, and the limits it hands agents.
  Assert<Same<ContainmentReport, MachineContainment>>,
  Assert<Same<AttemptLimitsWire, AttemptLimits>>,
  Assert<Same<AttemptUsageWire, AttemptUsage>>,
  // Autoscaling (issue 30): the lifecycle, the providers and the machine rows as GET /v1/autoscale shows them.
  Assert<Same<autoscaleWire.MachineLifecycle, MachineLifecycle>>,
  Assert<Same<autoscaleWire.ScaleProvider, ScaleProvider>>,
  Assert<Same<autoscaleWire.AutoscaleMachineView, AutoscaleRow>>,
];
