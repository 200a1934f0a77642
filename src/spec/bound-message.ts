import type { SpecBounds } from './spec-limits.js';

/** Which bound of SpecBounds a text passed (size is checked, and worded, before any scan). */
export type ShapeBound = 'depth' | 'nodes' | 'anchors' | 'aliases';

/** Line and column (both from 1) of an offset; computed only when a bound is passed, so the scans need not count lines. */
function positionOf(text: string, offset: number): string {
  let line = 1;
  let lineStart = 0;
  for (let i = text.indexOf('\n'); i !== -1 && i < offset; i = text.indexOf('\n', i + 1)) {
    line += 1;
    lineStart = i + 1;
  }
  return `line ${line}, column ${offset - lineStart + 1}`;
}

/** The message for a text that passed a bound at `offset`: which bound, its value, and where. */
export function boundMessage(bound: ShapeBound, bounds: SpecBounds, text: string, offset: number, what: string): string {
  const at = positionOf(text, offset);
  switch (bound) {
    case 'depth':
      return `${at}: the ${what} nests deeper than ${bounds.maxDepth} levels (lists and mappings inside each other; a job spec needs about 6)`;
    case 'nodes':
      return `${at}: the ${what} has more than ${bounds.maxNodes} values (scalars, keys, lists and mappings); split it into several`;
    case 'anchors':
      return `${at}: the ${what} has more than ${bounds.maxAliases} YAML anchors (&name)`;
    case 'aliases':
      return `${at}: the ${what} has more than ${bounds.maxAliases} YAML aliases (*name)`;
  }
}
