import { boundMessage } from './bound-message.js';
import type { SpecBounds } from './spec-limits.js';

/** The characters a JSON number or literal (`true`, `null`) is made of. */
const isWordChar = (c: number) => (c >= 48 && c <= 57) || (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || c === 43 || c === 45 || c === 46;

/**
 * Checks JSON text against the shape bounds before JSON.parse sees it: nesting depth and values
 * (every string, key included, number, literal, array and object). Returns the message for the
 * first bound passed, naming it and its line, or undefined; text that is not JSON is left to the
 * parser to refuse. JSON has no aliases. Linear, as JSON.parse is, and far cheaper than walking
 * what it would build (a megabyte of `[[[[…` is a million nested arrays).
 */
export function jsonTextBounds(text: string, bounds: SpecBounds, what: string): string | undefined {
  const n = text.length;
  let depth = 0;
  let nodes = 0;
  for (let i = 0; i < n; i += 1) {
    const c = text.charCodeAt(i);
    if (c === 34 /* " */) {
      if (++nodes > bounds.maxNodes) return boundMessage('nodes', bounds, text, i, what);
      for (i += 1; i < n; i += 1) {
        const s = text.charCodeAt(i);
        if (s === 92 /* \ */) i += 1;
        else if (s === 34) break;
      }
    } else if (c === 91 /* [ */ || c === 123 /* { */) {
      if (++depth > bounds.maxDepth) return boundMessage('depth', bounds, text, i, what);
      if (++nodes > bounds.maxNodes) return boundMessage('nodes', bounds, text, i, what);
    } else if (c === 93 /* ] */ || c === 125 /* } */) {
      depth -= 1;
    } else if (isWordChar(c)) {
      if (++nodes > bounds.maxNodes) return boundMessage('nodes', bounds, text, i, what);
      while (i + 1 < n && isWordChar(text.charCodeAt(i + 1))) i += 1;
    }
  }
  return undefined;
}
