import type { Migration, MigrationProvider } from 'kysely';
import type { StoreCapabilities } from './store-capabilities.js';
import { migration0001Core } from './migrations/0001-core.js';
import { migration0002QueueParkingIndexes } from './migrations/0002-queue-parking-indexes.js';
import { migration0003StageShapes } from './migrations/0003-stage-shapes.js';
import { migration0004IdempotencyKeys } from './migrations/0004-idempotency-keys.js';
import { migration0005MachineScheduling } from './migrations/0005-machine-scheduling.js';
import { migration0006LogOffsets } from './migrations/0006-log-offsets.js';
import { migration0007StageIndexes } from './migrations/0007-stage-indexes.js';
import { migration0008Tokens } from './migrations/0008-tokens.js';
import { migration0009Audit } from './migrations/0009-audit.js';
import { migration0010Leader } from './migrations/0010-leader.js';
import { migration0011QueueTimeout } from './migrations/0011-queue-timeout.js';
import { migration0012TeamsPreemption } from './migrations/0012-teams-preemption.js';
import { migration0013Progress } from './migrations/0013-progress.js';
import { migration0014RerunOutputs } from './migrations/0014-rerun-outputs.js';
import { migration0015WriteOnlyIndexes } from './migrations/0015-write-only-indexes.js';
import { migration0016ReadyQueueIndex } from './migrations/0016-ready-queue-index.js';
import { migration0017AttemptEnd } from './migrations/0017-attempt-end.js';
import { migration0018ConvergeSchema } from './migrations/0018-converge-schema.js';
import { migration0019Containment } from './migrations/0019-containment.js';
import { migration0020IdempotencyScope } from './migrations/0020-idempotency-scope.js';
import { migration0021OutputLimits } from './migrations/0021-output-limits.js';
import { migration0022AuditFolding } from './migrations/0022-audit-folding.js';
import { migration0023LogCut } from './migrations/0023-log-cut.js';
import { migration0024GpuShares } from './migrations/0024-gpu-shares.js';
import { migration0025Autoscale } from './migrations/0025-autoscale.js';
import { migration0026Gangs } from './migrations/0026-gangs.js';
import { migration0027GangPorts } from './migrations/0027-gang-ports.js';
import { migration0028HeartbeatPeriod } from './migrations/0028-heartbeat-period.js';
import { migration0029MachineRevision } from './migrations/0029-machine-revision.js';

/**
 * Every migration, in order, one file each under migrations/. Each file is frozen: it imports
 * nothing but kysely and Node's built-ins and carries its own constants, so what it builds never
 * changes after it shipped (docs/store-contract.md, "Migrations"; a test checks the imports and
 * the resulting schema). The names are what databases recorded in kysely_migration: never rename
 * one. The only dialect difference, how an auto-incrementing key is spelled (and how 0018 moves a
 * check constraint, and whether 0020 opens its own transaction), comes from the adapter's capabilities.
 */
export function migrations(caps: StoreCapabilities): Record<string, Migration> {
  return {
    '0001_core': migration0001Core(caps.dialect),
    '0002_queue_parking_indexes': migration0002QueueParkingIndexes,
    '0003_stage_shapes': migration0003StageShapes,
    '0004_idempotency_keys': migration0004IdempotencyKeys,
    '0005_machine_scheduling': migration0005MachineScheduling,
    '0006_log_offsets': migration0006LogOffsets,
    '0007_stage_indexes': migration0007StageIndexes,
    '0008_tokens': migration0008Tokens,
    '0009_audit': migration0009Audit(caps.dialect),
    '0010_leader': migration0010Leader,
    '0011_queue_timeout': migration0011QueueTimeout,
    '0012_teams_preemption': migration0012TeamsPreemption,
    '0013_progress': migration0013Progress,
    '0014_rerun_outputs': migration0014RerunOutputs(),
    '0015_write_only_indexes': migration0015WriteOnlyIndexes,
    '0016_ready_queue_index': migration0016ReadyQueueIndex,
    '0017_attempt_end': migration0017AttemptEnd,
    '0018_converge_schema': migration0018ConvergeSchema(caps.dialect),
    '0019_containment': migration0019Containment,
    '0020_idempotency_scope': migration0020IdempotencyScope(caps.dialect),
    '0021_output_limits': migration0021OutputLimits,
    '0022_audit_folding': migration0022AuditFolding,
    '0023_log_cut': migration0023LogCut,
    '0024_gpu_shares': migration0024GpuShares,
    '0025_autoscale': migration0025Autoscale,
    '0026_gangs': migration0026Gangs,
    '0027_gang_ports': migration0027GangPorts,
    '0028_heartbeat_period': migration0028HeartbeatPeriod,
    '0029_machine_revision': migration0029MachineRevision(caps.dialect),
  };
}

export function migrationProvider(caps: StoreCapabilities): MigrationProvider {
  return { getMigrations: async () => migrations(caps) };
}
