import type { ContainmentReport } from '../../api/contract/containment.js';
import type { MachineView } from '../../api/contract/job-view.js';
import { formatCpu, formatMemory } from '../../spec/quantity.js';
import { formatAge } from './format-age.js';
import { gpuUseText } from '../../api/contract/gpu-use.js';
import { gpuSummary, machineStatus, seconds } from './machine-table.js';
import { colorLifecycle } from './autoscale-text.js';
import { palette, type Colors } from './palette.js';
import type { RenderOptions } from './stage-table.js';

/**
 * `gantry machine show NAME`: one machine in full, the containment its agent reported included
 * (docs/containment.md): the mechanism, each of memory, CPU, pids and devices enforced or not, how
 * an attempt's processes are killed, who stages run as, the sandbox, and the problems found.
 */
export function renderMachineDetail(m: MachineView, now: number, opts: RenderOptions = {}): string {
  const c = palette(opts.color);
  const labels = Object.entries(m.labels);
  const lines: [string, string][] = [
    ['machine', `${m.name}  ${c.dim(m.id)}`],
    ['status', machineStatus(m, c)],
    // The autoscaler's machines only (issue 30): the pool that started it, where it is in its life.
    ...(m.lifecycle ? [['autoscaled', `pool ${m.pool ?? '?'}, ${colorLifecycle(m.lifecycle, c)}`] as [string, string]] : []),
    ['cpu', `${formatCpu(m.allocated.cpuMillis)}/${formatCpu(m.cpuMillis)} allocated`],
    ['memory', `${formatMemory(m.allocated.memoryBytes)}/${formatMemory(m.memoryBytes)} allocated`],
    ['gpus', gpuSummary(m)],
    ...m.gpus.map((g): [string, string] => ['', c.dim(`GPU ${g.index}: ${g.name}${g.uuid ? ` ${g.uuid}` : ''}, ${gpuUseText(g)}`)]),
    ['attempts', String(m.allocated.attempts)],
    ['region', m.region ?? '-'],
    // Where gangs whose rank 0 runs here meet (docs/gangs.md, "Rendezvous"); an older server says neither.
    ...(m.address !== undefined ? [['address', m.address] as [string, string]] : []),
    ...(m.gangPorts ? [['gang ports', `${m.gangPorts.first}-${m.gangPorts.last}`] as [string, string]] : []),
    ['labels', labels.length ? labels.map(([k, v]) => `${k}=${v}`).join(',') : '-'],
    ['heartbeat', heartbeatText(m, now)],
    ['registered', `${formatAge(m.registeredAt, now)} ago`],
  ];
  return [table(lines, c), '', c.bold('containment'), table(containmentLines(m.containment, c), c, '  ')].join('\n');
}

/** The last heartbeat, and where the server says them, its period and the silence it is allowed (docs/failure-detection.md). */
function heartbeatText(m: MachineView, now: number): string {
  const last = `${formatAge(m.lastHeartbeatAt, now)} ago`;
  const h = m.heartbeat;
  if (!h) return last;
  return `${last}, every ${seconds(h.periodMs)}: suspect after ${seconds(h.suspectAfterMs)} silent, lost after ${seconds(h.lostAfterMs)} (its work elsewhere within ${seconds(h.lostWithinMs)})`;
}

function containmentLines(r: ContainmentReport | null | undefined, c: Colors): [string, string][] {
  if (!r) return [['', c.yellow('not reported: its agent predates containment (or the server does); assume nothing is enforced')]];
  const yes = (on: boolean) => (on ? c.green('yes') : c.yellow('no'));
  const lines: [string, string][] = [
    ['mechanism', r.mechanism],
    ['memory', yes(r.memory)],
    ['cpu', yes(r.cpu)],
    ['pids', yes(r.pids)],
    ['devices', yes(r.devices)],
    ['kill', r.kill === 'process-group' ? c.yellow(`${r.kill} (a child that leaves the group escapes)`) : r.kill],
    ['user', r.user.startsWith('agent ') ? c.yellow(`${r.user} (stages can read the agent's files)`) : r.user],
    ['sandbox', r.sandbox ?? 'off'],
    ['gpu sharing', gpuSharingText(r.gpuSharing, c)],
  ];
  // Only a machine with MIG devices says (docs/machines.md, "What isolates MIG devices from each other").
  if (r.migIsolated !== undefined)
    lines.push(['MIG devices', r.migIsolated ? c.green('isolated') : c.yellow('not isolated (each can open the others of its GPU: see problems)')]);
  // Only an agent whose attempts join cgroups says (docs/containment.md, "A host setting that makes the joins cheap").
  if (r.favordynmods !== undefined)
    lines.push([
      'cgroup joins',
      r.favordynmods ? 'favordynmods (no wait)' : c.yellow("each burst's first waits for an RCU grace period, ~8 ms (no favordynmods: see problems)"),
    ]);
  if (r.problems.length === 0) lines.push(['problems', 'none']);
  else r.problems.forEach((p, i) => lines.push([i === 0 ? 'problems' : '', c.yellow(p)]));
  return lines;
}

/** How stages given a share of one GPU are kept apart (docs/machines.md, "A share of a GPU"). */
function gpuSharingText(mode: ContainmentReport['gpuSharing'], c: Colors): string {
  if (mode === undefined) return c.dim('not reported (its agent predates shares)');
  switch (mode) {
    case 'mps':
      return "mps (each share's threads and memory bounded by NVIDIA MPS)";
    case 'time-slicing':
      return c.yellow('time-slicing (shares of a GPU are not bounded: each can use all of it)');
  }
}

function table(lines: [string, string][], c: Colors, indent = ''): string {
  const width = Math.max(...lines.map(([k]) => k.length)) + 2;
  return lines.map(([k, v]) => `${indent}${c.bold(k ? `${k}:`.padEnd(width) : ''.padEnd(width))}${v}`).join('\n');
}
