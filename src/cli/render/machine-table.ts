import { gpusUsed, gpuUsedMilli } from '../../api/contract/gpu-use.js';
import type { MachineView } from '../../api/contract/job-view.js';
import { formatCpu, formatMemory } from '../../spec/quantity.js';
import { colorLifecycle } from './autoscale-text.js';
import { containmentSummary } from './containment-text.js';
import { formatAge } from './format-age.js';
import { colorHealth } from './health-color.js';
import { palette, type Colors } from './palette.js';
import { plainTable } from './plain-table.js';
import type { RenderOptions } from './stage-table.js';

/**
 * `gantry machines`: status, capacity and what is allocated, what its agent enforces, one row per
 * machine. POOL and LIFECYCLE (the autoscaler's: issue 30) only when some machine was autoscaled,
 * so a cluster without an autoscaler reads as before.
 */
export function renderMachineTable(machines: MachineView[], now: number, opts: RenderOptions = {}): string {
  const c = palette(opts.color);
  const autoscaled = machines.some((m) => m.lifecycle !== undefined);
  const rows = machines.map((m) => [
    m.name,
    machineStatus(m, c),
    ...(autoscaled ? [m.pool ?? '-', m.lifecycle ? colorLifecycle(m.lifecycle, c) : '-'] : []),
    `${formatCpu(m.allocated.cpuMillis)}/${formatCpu(m.cpuMillis)}`,
    `${formatMemory(m.allocated.memoryBytes)}/${formatMemory(m.memoryBytes)}`,
    gpuSummary(m),
    containmentCell(m, c),
    m.region ?? '-',
    Object.entries(m.labels)
      .map(([k, v]) => `${k}=${v}`)
      .join(',') || '-',
    // Its period too, where the server says it: it grows with the fleet (docs/failure-detection.md).
    `${formatAge(m.lastHeartbeatAt, now)} ago${m.heartbeat ? `, every ${seconds(m.heartbeat.periodMs)}` : ''}`,
  ]);
  return plainTable(
    ['NAME', 'STATUS', ...(autoscaled ? ['POOL', 'LIFECYCLE'] : []), 'CPU', 'MEMORY', 'GPUS', 'CONTAIN', 'REGION', 'LABELS', 'HEARTBEAT'].map((h) => c.bold(h)),
    rows,
  );
}

/** 2000 → "2s", 2500 → "2.5s": a period or an allowance, to the tenth. */
export function seconds(ms: number): string {
  return `${Number((ms / 1000).toFixed(1))}s`;
}

/**
 * Its health, then what an operator wants of it when that is not "in service": "ready",
 * "ready,cordoned", "lost,drained" (as kubectl shows "Ready,SchedulingDisabled"; no space, so the
 * column stays one word for awk).
 */
export function machineStatus(m: Pick<MachineView, 'health' | 'scheduling'>, c: Colors): string {
  const health = colorHealth(m.health, c);
  return m.scheduling === 'eligible' ? health : `${health},${c.yellow(m.scheduling)}`;
}

/**
 * "4x h100 (declared) 2 busy", or with shares of a GPU "4x h100 1.5 used (1 shared)": a share
 * counts its part (issue 29). Declared GPUs were asserted by an operator rather than found by
 * nvidia-smi, which matters when a job fails to see its devices, so it is always spelled out.
 */
export function gpuSummary(m: MachineView): string {
  if (m.gpus.length === 0) return '-';
  const byType = new Map<string, number>();
  for (const g of m.gpus) byType.set(g.type, (byType.get(g.type) ?? 0) + 1);
  let text = [...byType].map(([type, n]) => `${n}x ${type}`).join(', ');
  if (m.gpusDeclared) text += ' (declared)';
  const busy = m.gpus.filter((g) => g.busy);
  const shared = busy.filter((g) => gpuUsedMilli(g) < 1000).length;
  if (shared > 0) {
    text += ` ${gpusUsed(m)} used (${shared} shared)`;
  } else if (busy.length > 0) text += ` ${busy.length} busy`;
  return text;
}

/** The CONTAIN cell: yellow where something is not enforced, so a machine that limits less stands out. */
function containmentCell(m: MachineView, c: Colors): string {
  const text = containmentSummary(m.containment);
  if (text === '?') return c.dim(text);
  const all = m.containment?.memory && m.containment.cpu && m.containment.pids;
  return all ? text : c.yellow(text);
}
