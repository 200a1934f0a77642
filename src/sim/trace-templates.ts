/**
 * Pool templates made from the Alibaba trace's node list (issue 30's benchmark): one per GPU model
 * and one for the machines without GPUs. Pure.
 */
import { templateMachine, type PoolTemplate } from '../autoscale/pool-template.js';
import type { MachineView } from '../scheduler/snapshot.js';

export interface TemplateBounds {
  idleSeconds: number;
  bootTimeoutSeconds: number;
  /** Per pool; absent: 0. */
  min?: Record<string, number>;
  maxStartsPerInterval?: number | null;
  /** Spare machines per pool; absent: 0. */
  spare?: Record<string, number>;
}

/**
 * One template per GPU model (named after it, lower case: "g2", "t4", "v100m16") and one `cpu`:
 * the shape with the most GPUs of that model (so every pod the real cluster could run fits a
 * template), with the CPU and memory most of the nodes of that shape have; `max` is how many nodes
 * of the model the trace lists, the size of the real cluster. Sorted by name.
 */
export function templatesFromNodes(nodes: readonly MachineView[], bounds: TemplateBounds): PoolTemplate[] {
  const byModel = new Map<string, MachineView[]>();
  for (const n of nodes) {
    const model = n.gpus.length > 0 ? n.gpus[0]!.type : 'cpu';
    if (n.gpus.some((g) => g.type !== n.gpus[0]!.type)) throw new Error(`node ${n.name} mixes GPU models`);
    byModel.set(model, [...(byModel.get(model) ?? []), n]);
  }
  const out: PoolTemplate[] = [];
  for (const [model, group] of byModel) {
    const most = Math.max(...group.map((n) => n.gpus.length));
    const shapes = new Map<string, { n: MachineView; count: number }>();
    for (const n of group.filter((x) => x.gpus.length === most)) {
      const key = `${n.cpuMillisTotal}/${n.memoryBytesTotal}`;
      const s = shapes.get(key) ?? { n, count: 0 };
      s.count += 1;
      shapes.set(key, s);
    }
    const shape = [...shapes.values()].sort((a, b) => b.count - a.count || b.n.cpuMillisTotal - a.n.cpuMillisTotal)[0]!.n;
    out.push({
      name: model,
      template: {
        cpuMillis: shape.cpuMillisTotal,
        memoryBytes: shape.memoryBytesTotal,
        gpus: most > 0 ? { type: model, count: most } : null,
        region: null,
        labels: {},
      },
      autoscale: {
        provider: 'local',
        command: null,
        min: bounds.min?.[model] ?? 0,
        max: group.length,
        idleSeconds: bounds.idleSeconds,
        bootTimeoutSeconds: bounds.bootTimeoutSeconds,
        maxStartsPerInterval: bounds.maxStartsPerInterval ?? null,
        spareMachines: bounds.spare?.[model] ?? 0,
      },
    });
  }
  return out.sort((a, b) => (a.name < b.name ? -1 : 1));
}

/** A fixed cluster of `count[pool]` machines of each template, idle, ids `<pool>-<n>`. */
export function fixedCluster(
  pools: readonly PoolTemplate[],
  count: Readonly<Record<string, number>>,
): { machines: MachineView[]; poolOf: Map<string, string> } {
  const machines: MachineView[] = [];
  const poolOf = new Map<string, string>();
  for (const p of pools) {
    for (let i = 0; i < (count[p.name] ?? 0); i++) {
      const id = `${p.name}-${i + 1}`;
      machines.push(templateMachine(p.template, id));
      poolOf.set(id, p.name);
    }
  }
  return { machines, poolOf };
}
