import { lifecycleSince, type AutoscaleMachineView, type AutoscaleView } from '../../api/contract/autoscale-view.js';
import { formatAge } from './format-age.js';
import { palette, type Colors } from './palette.js';
import { plainTable } from './plain-table.js';
import type { RenderOptions } from './stage-table.js';

/**
 * `gantry autoscale`: per pool its provider, bounds and machines (desired / current / starting),
 * then the machines not released, then the latest decisions with their reasons. `decisions`: how
 * many decisions to print (the view carries up to 50).
 */
export function renderAutoscale(v: AutoscaleView, now: number, opts: RenderOptions & { decisions?: number } = {}): string {
  const c = palette(opts.color);
  const parts: string[] = [];
  if (v.pools.length) {
    parts.push(
      plainTable(
        ['POOL', 'PROVIDER', 'MIN/MAX', 'DESIRED', 'CURRENT', 'STARTING', 'DRAINING', 'FAILED', 'TEMPLATE'].map((h) => c.bold(h)),
        v.pools.map((p) => [
          p.name,
          p.provider,
          `${p.min}/${p.max}`,
          String(p.desired),
          String(p.current),
          p.starting ? c.cyan(String(p.starting)) : '0',
          String(p.machines.draining),
          p.machines.failed ? c.red(String(p.machines.failed)) : '0',
          p.template.description,
        ]),
      ),
    );
  }
  const live = v.machines.filter((m) => m.lifecycle !== 'released');
  if (live.length) {
    parts.push(
      plainTable(
        ['MACHINE', 'POOL', 'LIFECYCLE', 'SINCE', 'HELD', 'ATTEMPTS', 'FAILED'].map((h) => c.bold(h)),
        live.map((m) => [
          m.name,
          m.pool,
          colorLifecycle(m.lifecycle, c),
          `${formatAge(lifecycleSince(m), now)} ago`,
          String(m.heldFor.length),
          String(m.attempts),
          m.failReason ?? '-',
        ]),
      ),
    );
  } else if (v.pools.length) {
    parts.push(c.dim('no autoscaled machine is running'));
  }
  const shown = v.decisions.slice(0, opts.decisions ?? 10);
  if (shown.length) {
    const lines = shown.map((d) => `  ${`${formatAge(d.at, now)} ago`.padEnd(8)} ${d.type.replace(/^autoscale:/, '').padEnd(9)} ${d.message}`);
    parts.push([c.bold(`Latest decisions (${shown.length} of ${v.decisions.length}, newest first):`), ...lines].join('\n'));
  }
  return parts.join('\n\n');
}

/** On the way in cyan, out yellow, failed red: what needs a look stands out. */
export function colorLifecycle(l: AutoscaleMachineView['lifecycle'], c: Colors): string {
  switch (l) {
    case 'provisioning':
    case 'joining':
      return c.cyan(l);
    case 'ready':
      return c.green(l);
    case 'draining':
      return c.yellow(l);
    case 'failed':
      return c.red(l);
    case 'released':
      return c.dim(l);
  }
}
