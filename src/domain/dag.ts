/**
 * Directed graphs of named nodes: cycle detection and a stable topological order. An edge
 * `[before, after]` says `after` depends on `before` (for stages: `after` needs `before`).
 * Edges naming unknown nodes are ignored; callers report those separately.
 */
export type Edge = readonly [before: string, after: string];

function adjacency(nodes: readonly string[], edges: Iterable<Edge>): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const n of nodes) out.set(n, []);
  for (const [from, to] of edges) {
    const list = out.get(from);
    if (list && out.has(to)) list.push(to);
  }
  return out;
}

/**
 * One cycle, as the path that closes it (`[a, b, c, a]`: a before b before c before a), or null
 * when the graph is acyclic. The cycle starts at its node that comes first in `nodes`, so the
 * answer is the same for the same input. Iterative, so a long chain cannot overflow the stack.
 */
export function findCycle(nodes: readonly string[], edges: Iterable<Edge>): string[] | null {
  const adj = adjacency(nodes, edges);
  const WHITE = 0;
  const GREY = 1;
  const BLACK = 2;
  const colour = new Map<string, number>();
  for (const n of nodes) colour.set(n, WHITE);
  for (const root of nodes) {
    if (colour.get(root) !== WHITE) continue;
    // Stack of [node, index of the next child to visit]; `path` mirrors the grey nodes.
    const stack: Array<[string, number]> = [[root, 0]];
    const path: string[] = [root];
    colour.set(root, GREY);
    while (stack.length > 0) {
      const top = stack[stack.length - 1]!;
      const children = adj.get(top[0]) ?? [];
      if (top[1] >= children.length) {
        colour.set(top[0], BLACK);
        stack.pop();
        path.pop();
        continue;
      }
      const child = children[top[1]++]!;
      const c = colour.get(child);
      if (c === GREY) {
        return rotate(path.slice(path.indexOf(child)), nodes);
      }
      if (c === WHITE) {
        colour.set(child, GREY);
        stack.push([child, 0]);
        path.push(child);
      }
    }
  }
  return null;
}

/** Turns an open cycle [x, y, z] into a closed path starting at its earliest node in `nodes`. */
function rotate(cycle: string[], nodes: readonly string[]): string[] {
  const rank = new Map(nodes.map((n, i) => [n, i] as const));
  let start = 0;
  for (let i = 1; i < cycle.length; i++) {
    if ((rank.get(cycle[i]!) ?? 0) < (rank.get(cycle[start]!) ?? 0)) start = i;
  }
  const open = [...cycle.slice(start), ...cycle.slice(0, start)];
  return [...open, open[0]!];
}

/**
 * A topological order (every node after all the nodes it depends on), stable: among the nodes
 * that are free to go next, the one earliest in `nodes` goes first. Null when there is a cycle.
 */
export function topologicalOrder(nodes: readonly string[], edges: Iterable<Edge>): string[] | null {
  const adj = adjacency(nodes, edges);
  const rank = new Map(nodes.map((n, i) => [n, i] as const));
  const indegree = new Map<string, number>();
  for (const n of nodes) indegree.set(n, 0);
  for (const targets of adj.values()) for (const t of targets) indegree.set(t, (indegree.get(t) ?? 0) + 1);
  // A binary heap keyed by position in `nodes` keeps the order stable at O(E log V).
  const heap: number[] = [];
  const push = (i: number): void => {
    heap.push(i);
    let k = heap.length - 1;
    while (k > 0) {
      const p = (k - 1) >> 1;
      if (heap[p]! <= heap[k]!) break;
      [heap[p], heap[k]] = [heap[k]!, heap[p]!];
      k = p;
    }
  };
  const pop = (): number => {
    const top = heap[0]!;
    const last = heap.pop()!;
    if (heap.length > 0) {
      heap[0] = last;
      let k = 0;
      for (;;) {
        const l = 2 * k + 1;
        const r = l + 1;
        let m = k;
        if (l < heap.length && heap[l]! < heap[m]!) m = l;
        if (r < heap.length && heap[r]! < heap[m]!) m = r;
        if (m === k) break;
        [heap[m], heap[k]] = [heap[k]!, heap[m]!];
        k = m;
      }
    }
    return top;
  };
  nodes.forEach((n, i) => {
    if (indegree.get(n) === 0) push(i);
  });
  const order: string[] = [];
  while (heap.length > 0) {
    const n = nodes[pop()]!;
    order.push(n);
    for (const t of adj.get(n) ?? []) {
      const d = (indegree.get(t) ?? 0) - 1;
      indegree.set(t, d);
      if (d === 0) push(rank.get(t)!);
    }
  }
  return order.length === nodes.length ? order : null;
}
