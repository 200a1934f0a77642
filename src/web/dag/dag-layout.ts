/**
 * A job's DAG laid out in layers, left to right: a stage's layer is its depth (the longest chain
 * of `needs` above it), so every edge points right; within a layer, stages are ordered to cross
 * fewer edges (a few barycentre sweeps: each stage moves towards the mean position of its
 * neighbours in the layers beside it), then placed on a grid, each layer centred. Pure: the
 * job page draws what this returns as SVG.
 */

export interface DagInput {
  name: string;
  needs: readonly string[];
}

export interface DagBox {
  name: string;
  layer: number;
  /** Position within its layer, from the top. */
  row: number;
  x: number;
  y: number;
}

export interface DagEdge {
  from: string;
  to: string;
  /** An SVG path from the right side of `from` to the left side of `to`. */
  path: string;
}

export interface DagLayout {
  boxes: DagBox[];
  edges: DagEdge[];
  width: number;
  height: number;
}

export interface DagSizes {
  nodeWidth: number;
  nodeHeight: number;
  layerGap: number;
  rowGap: number;
  margin: number;
}

export const DEFAULT_SIZES: DagSizes = { nodeWidth: 184, nodeHeight: 58, layerGap: 56, rowGap: 18, margin: 8 };

const SWEEPS = 4;

/** The layer of each stage: 0 for a root, else one more than its deepest need. Unknown needs and cycles (the API refuses both) are ignored. */
export function dagLayers(stages: readonly DagInput[]): Map<string, number> {
  const byName = new Map(stages.map((s) => [s.name, s]));
  const layer = new Map<string, number>();
  const visiting = new Set<string>();
  const depth = (name: string): number => {
    const known = layer.get(name);
    if (known !== undefined) return known;
    if (visiting.has(name)) return 0;
    visiting.add(name);
    let d = 0;
    for (const n of byName.get(name)?.needs ?? []) if (byName.has(n)) d = Math.max(d, depth(n) + 1);
    visiting.delete(name);
    layer.set(name, d);
    return d;
  };
  for (const s of stages) depth(s.name);
  return layer;
}

export function layoutDag(stages: readonly DagInput[], sizes: DagSizes = DEFAULT_SIZES): DagLayout {
  const layerOf = dagLayers(stages);
  const known = new Set(stages.map((s) => s.name));
  const edges = stages.flatMap((s) => s.needs.filter((n) => known.has(n) && n !== s.name).map((n) => ({ from: n, to: s.name })));
  const layers: string[][] = [];
  for (const s of stages) (layers[layerOf.get(s.name)!] ??= []).push(s.name);
  for (let i = 0; i < layers.length; i++) layers[i] ??= [];

  const up = new Map<string, string[]>();
  const down = new Map<string, string[]>();
  for (const e of edges) {
    (up.get(e.to) ?? up.set(e.to, []).get(e.to)!).push(e.from);
    (down.get(e.from) ?? down.set(e.from, []).get(e.from)!).push(e.to);
  }
  const rowOf = new Map<string, number>();
  const number = (layer: string[]) => layer.forEach((n, i) => rowOf.set(n, i));
  layers.forEach(number);
  // Barycentre sweeps, down then up; stages without neighbours on that side keep their place.
  const reorder = (layer: string[], neighbours: Map<string, string[]>) => {
    const centre = (n: string) => {
      const ns = neighbours.get(n) ?? [];
      return ns.length ? ns.reduce((s, m) => s + rowOf.get(m)!, 0) / ns.length : rowOf.get(n)!;
    };
    const keyed = layer.map((n, i) => ({ n, key: centre(n), i }));
    keyed.sort((a, b) => a.key - b.key || a.i - b.i);
    layer.splice(0, layer.length, ...keyed.map((k) => k.n));
    number(layer);
  };
  for (let sweep = 0; sweep < SWEEPS; sweep++) {
    for (let i = 1; i < layers.length; i++) reorder(layers[i]!, up);
    for (let i = layers.length - 2; i >= 0; i--) reorder(layers[i]!, down);
  }

  const { nodeWidth: w, nodeHeight: h, layerGap, rowGap, margin } = sizes;
  const tallest = Math.max(0, ...layers.map((l) => l.length));
  const columnHeight = (n: number) => n * h + Math.max(0, n - 1) * rowGap;
  const boxes: DagBox[] = [];
  const at = new Map<string, DagBox>();
  layers.forEach((layer, li) => {
    const top = margin + (columnHeight(tallest) - columnHeight(layer.length)) / 2;
    layer.forEach((name, row) => {
      const box = { name, layer: li, row, x: margin + li * (w + layerGap), y: top + row * (h + rowGap) };
      boxes.push(box);
      at.set(name, box);
    });
  });
  const paths = edges.map((e) => {
    const a = at.get(e.from)!;
    const b = at.get(e.to)!;
    const x1 = a.x + w;
    const y1 = a.y + h / 2;
    const x2 = b.x;
    const y2 = b.y + h / 2;
    const bend = Math.max(layerGap / 2, (x2 - x1) / 2);
    return { ...e, path: `M ${x1} ${y1} C ${x1 + bend} ${y1}, ${x2 - bend} ${y2}, ${x2} ${y2}` };
  });
  return {
    boxes,
    edges: paths,
    width: layers.length ? 2 * margin + layers.length * w + (layers.length - 1) * layerGap : 0,
    height: tallest ? 2 * margin + columnHeight(tallest) : 0,
  };
}

/** How many pairs of edges between adjacent layers cross: what the ordering tries to keep low (for tests). */
export function crossings(layout: DagLayout): number {
  const box = new Map(layout.boxes.map((b) => [b.name, b]));
  const es = layout.edges.map((e) => ({ a: box.get(e.from)!, b: box.get(e.to)! })).filter((e) => e.b.layer === e.a.layer + 1);
  let n = 0;
  for (let i = 0; i < es.length; i++) {
    for (let j = i + 1; j < es.length; j++) {
      const p = es[i]!;
      const q = es[j]!;
      if (p.a.layer !== q.a.layer) continue;
      if ((p.a.row - q.a.row) * (p.b.row - q.b.row) < 0) n++;
    }
  }
  return n;
}
