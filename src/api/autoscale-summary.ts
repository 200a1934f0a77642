import type { AutoscaleRow } from '../autoscale/autoscale-row.js';
import { describeTemplate, type PoolTemplate } from '../autoscale/pool-template.js';
import type { EventRecord } from '../store/records.js';
import type { AutoscaleDecisionView, AutoscalePoolView, AutoscaleView } from './contract/autoscale-view.js';

/** How long a released machine stays in the list: long enough to see what the last scale-down did. */
export const RELEASED_SHOWN_MS = 3_600_000;
/** How many decisions the view carries (the events stay in `gantry events` for longer). */
export const DECISIONS_SHOWN = 50;

export const NO_POOLS_NOTE =
  'no pool is autoscaled: declare one in the cluster file’s pools: section (gantry server --pools FILE, or gantry up --cluster FILE); docs/autoscaling.md';

/**
 * `GET /v1/autoscale` from what the server read: the configured pools with their machines counted
 * by lifecycle, the machines not released (and those released within the hour), the decisions.
 * Pure: the route reads, this shapes.
 */
export function autoscaleSummary(p: {
  pools: readonly PoolTemplate[];
  rows: readonly AutoscaleRow[];
  events: readonly EventRecord[];
  now: number;
}): AutoscaleView {
  const machines = p.rows.filter((r) => r.lifecycle !== 'released' || (r.releasedAt ?? r.updatedAt) >= p.now - RELEASED_SHOWN_MS);
  return {
    at: p.now,
    pools: p.pools.map((pool) => poolSummary(pool, p.rows)),
    machines,
    decisions: p.events.filter((e) => e.type.startsWith('autoscale:')).map(decisionView),
    ...(p.pools.length === 0 ? { note: NO_POOLS_NOTE } : {}),
  };
}

function poolSummary(pool: PoolTemplate, rows: readonly AutoscaleRow[]): AutoscalePoolView {
  const counts = { provisioning: 0, joining: 0, ready: 0, draining: 0, failed: 0 };
  for (const r of rows) {
    if (r.pool !== pool.name) continue;
    // Typed over every lifecycle but released: a new lifecycle fails the build here until it is counted.
    if (r.lifecycle !== 'released') counts[r.lifecycle] += 1;
  }
  const a = pool.autoscale;
  const t = pool.template;
  return {
    name: pool.name,
    template: { cpuMillis: t.cpuMillis, memoryBytes: t.memoryBytes, gpus: t.gpus, region: t.region, labels: t.labels, description: describeTemplate(t) },
    provider: a.provider,
    min: a.min,
    max: a.max,
    idleSeconds: a.idleSeconds,
    bootTimeoutSeconds: a.bootTimeoutSeconds,
    spareMachines: a.spareMachines,
    maxStartsPerInterval: a.maxStartsPerInterval,
    machines: counts,
    // What counts toward min and max (machine-lifecycle.ts's COUNTED_STATES); draining and failed ones are on their way out.
    desired: counts.provisioning + counts.joining + counts.ready,
    current: counts.ready,
    starting: counts.provisioning + counts.joining,
  };
}

/** The event's pool and machine, from its data (the store writes `{ pool, name, … }`); null when it names none. */
function decisionView(e: EventRecord): AutoscaleDecisionView {
  const text = (v: unknown) => (typeof v === 'string' ? v : null);
  return { seq: e.seq, at: e.at, type: e.type, pool: text(e.data.pool), machine: text(e.data.name), message: e.message };
}
