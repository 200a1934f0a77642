import { boundMessage } from './bound-message.js';
import type { SpecBounds } from './spec-limits.js';

const LF = 10;
const CR = 13;
const SPACE = 32;
const TAB = 9;
const HASH = 35;

/** A space, a line end, or the end of the text (charCodeAt past the end is NaN). */
const isBlank = (c: number) => c === SPACE || c === TAB || c === LF || c === CR || Number.isNaN(c);
/** The flow indicators, which end a plain scalar inside `[…]` and `{…}`. */
const isFlowIndicator = (c: number) => c === 44 /* , */ || c === 91 /* [ */ || c === 93 /* ] */ || c === 123 /* { */ || c === 125; /* } */

/**
 * Checks YAML text (JSON is YAML too) against the shape bounds before a parser sees it: nesting
 * depth (flow brackets and block indentation together), values, anchors and aliases. Returns the
 * message for the first bound passed, naming it and its line, or undefined. Linear and allocation
 * free: a few milliseconds a megabyte, where the parser takes seconds, and far longer (or runs out
 * of memory) on what this refuses.
 *
 * It reads YAML's tokens as the parser does where that decides what is structure: comments, quoted
 * scalars (from a token's start only: `it's` is plain text), block scalars (`|`, `>`: their lines
 * are text, by indentation) and plain scalars (brackets inside them are text outside `[…]`/`{…}`).
 * Where it cannot be exact it counts more, never less: a block mapping's key line counts a level
 * even when it holds a scalar, a multi-line plain scalar's further lines count as lines of their own.
 */
export function yamlTextBounds(text: string, bounds: SpecBounds, what: string): string | undefined {
  const n = text.length;
  /** Open flow collections (`[`, `{`). */
  let flow = 0;
  /** Columns of the open block collections, innermost last. */
  const block: number[] = [];
  let nodes = 0;
  let anchors = 0;
  let aliases = 0;
  let lineStart = 0;
  /** Indentation of the current line (its first token's column). */
  let lineIndent = 0;
  let atLineStart = true;
  /** A node may start here (after an indicator, at a line's start, after `[`, `{` or `,`). */
  let tokenStart = true;
  /** The last token was a quoted scalar or a flow collection's end: a `:` right after it is an indicator (`{"a":1}`). */
  let jsonLike = false;
  /** The column a block scalar's lines must be indented past: the key's of `key: |`, the dash's of `- |`. */
  let parentCol = 0;
  let keyCol = 0;

  const depthOver = () => block.length + flow > bounds.maxDepth;
  for (let i = 0; i < n;) {
    const c = text.charCodeAt(i);
    if (c === LF) {
      i += 1;
      lineStart = i;
      atLineStart = true;
      if (flow === 0) tokenStart = true;
      continue;
    }
    if (c === SPACE || c === TAB || c === CR) {
      i += 1;
      continue;
    }
    const col = i - lineStart;
    if (c === HASH && (i === 0 || isBlank(text.charCodeAt(i - 1)))) {
      i = lineEnd(text, i);
      continue;
    }
    if (atLineStart) {
      atLineStart = false;
      lineIndent = col;
      if (flow === 0) {
        if (col === 0 && (text.startsWith('---', i) || text.startsWith('...', i)) && isBlank(text.charCodeAt(i + 3))) {
          block.length = 0;
          i += 3;
          tokenStart = true;
          continue;
        }
        if (col === 0 && c === 37 /* % */) {
          i = lineEnd(text, i);
          continue;
        }
        while (block.length > 0 && block[block.length - 1]! >= col) block.pop();
        block.push(col);
        if (depthOver()) return boundMessage('depth', bounds, text, i, what);
        tokenStart = true;
      }
    }
    const next = text.charCodeAt(i + 1);
    switch (c) {
      case 91: // [
      case 123: // {
        if (tokenStart || flow > 0) {
          flow += 1;
          nodes += 1;
          if (depthOver()) return boundMessage('depth', bounds, text, i, what);
          if (nodes > bounds.maxNodes) return boundMessage('nodes', bounds, text, i, what);
          tokenStart = true;
          jsonLike = false;
          i += 1;
          continue;
        }
        break;
      case 93: // ]
      case 125: // }
        if (flow > 0) {
          flow -= 1;
          tokenStart = false;
          jsonLike = true;
          i += 1;
          continue;
        }
        break;
      case 44: // ,
        if (flow > 0) {
          tokenStart = true;
          jsonLike = false;
          i += 1;
          continue;
        }
        break;
      case 45: // - (a list item)
      case 63: // ? (an explicit key)
        if (tokenStart && isBlank(next)) {
          nodes += 1;
          if (nodes > bounds.maxNodes) return boundMessage('nodes', bounds, text, i, what);
          if (flow === 0) {
            // A compact nested list (`- - x`): one more level on this line.
            if (col !== lineIndent) block.push(col);
            if (depthOver()) return boundMessage('depth', bounds, text, i, what);
            parentCol = col;
            keyCol = col + 2;
          }
          jsonLike = false;
          i += 1;
          continue;
        }
        break;
      case 58: // : (a value follows)
        if (isBlank(next) || (flow > 0 && (jsonLike || isFlowIndicator(next)))) {
          parentCol = keyCol;
          tokenStart = true;
          jsonLike = false;
          i += 1;
          continue;
        }
        break;
      case 38: // & (an anchor)
      case 42: // * (an alias)
      case 33: // ! (a tag)
        if (tokenStart) {
          if (c === 38 && ++anchors > bounds.maxAliases) return boundMessage('anchors', bounds, text, i, what);
          if (c === 42) {
            if (++aliases > bounds.maxAliases) return boundMessage('aliases', bounds, text, i, what);
            if (++nodes > bounds.maxNodes) return boundMessage('nodes', bounds, text, i, what);
            tokenStart = false;
          }
          i += 1;
          while (i < n && !isBlank(text.charCodeAt(i)) && !(flow > 0 && isFlowIndicator(text.charCodeAt(i)))) i += 1;
          continue;
        }
        break;
      case 34: // "
      case 39: // '
        if (tokenStart) {
          if (++nodes > bounds.maxNodes) return boundMessage('nodes', bounds, text, i, what);
          keyCol = col;
          const lf = { last: -1 };
          i = quotedEnd(text, i, lineIndent, lf);
          // A scalar over several lines: columns after it count from its last line's start.
          if (lf.last !== -1) lineStart = lf.last + 1;
          tokenStart = false;
          jsonLike = true;
          continue;
        }
        break;
      case 124: // |
      case 62: // >
        if (tokenStart && flow === 0) {
          if (++nodes > bounds.maxNodes) return boundMessage('nodes', bounds, text, i, what);
          i = blockScalarEnd(text, i, parentCol);
          lineStart = i;
          atLineStart = true;
          tokenStart = true;
          continue;
        }
        break;
    }
    // A plain scalar, or the rest of one.
    if (tokenStart) {
      if (++nodes > bounds.maxNodes) return boundMessage('nodes', bounds, text, i, what);
      keyCol = col;
    }
    tokenStart = false;
    jsonLike = false;
    i = plainEnd(text, i + 1, flow > 0);
  }
  return undefined;
}

/** Where the line holding `i` ends (its line feed, or the text's end). */
function lineEnd(text: string, i: number): number {
  const e = text.indexOf('\n', i);
  return e === -1 ? text.length : e;
}

/** The indentation of the line starting at `i`, or -1 for a line of spaces only (or the text's end). */
function indentAt(text: string, i: number): number {
  let j = i;
  while (text.charCodeAt(j) === SPACE) j += 1;
  const c = text.charCodeAt(j);
  return c === LF || c === CR || Number.isNaN(c) ? -1 : j - i;
}

/**
 * Where a plain scalar that continues at `i` ends: at a line end, a comment (` #`) or a `: `; in a
 * flow collection also at a flow indicator (`,`, `]`…), as the parser ends it.
 */
function plainEnd(text: string, from: number, inFlow: boolean): number {
  const n = text.length;
  let i = from;
  for (; i < n; i += 1) {
    const c = text.charCodeAt(i);
    if (c === LF) return i;
    if (c === HASH && isBlank(text.charCodeAt(i - 1))) return i;
    if (c === 58 /* : */) {
      const next = text.charCodeAt(i + 1);
      if (isBlank(next) || (inFlow && isFlowIndicator(next))) return i;
    }
    if (inFlow && isFlowIndicator(c)) return i;
  }
  return i;
}

/**
 * Where a quoted scalar starting at `i` ends (past its closing quote; `lf.last`: its last line
 * break). As the parser does, a line break followed by a line indented no deeper than the line it
 * started on (or a document marker) ends it unclosed, so that a stray quote cannot hide the
 * structure after it from this scan.
 */
function quotedEnd(text: string, i: number, lineIndent: number, lf: { last: number }): number {
  const n = text.length;
  const q = text.charCodeAt(i);
  for (let j = i + 1; j < n; j += 1) {
    const c = text.charCodeAt(j);
    if (q === 34 && c === 92 /* \ */) {
      j += 1;
    } else if (c === q) {
      if (q === 39 && text.charCodeAt(j + 1) === 39) j += 1;
      else return j + 1;
    } else if (c === LF) {
      const indent = indentAt(text, j + 1);
      // Ended here: the line break is left to the scan, which starts the next line's structure.
      if (indent !== -1 && (indent <= lineIndent || text.startsWith('---', j + 1) || text.startsWith('...', j + 1))) return j;
      lf.last = j;
    }
  }
  return n;
}

/**
 * Where a block scalar (`|` or `>` at `i`) ends: at the start of the first line that is not
 * blank and is indented less than its content (the first content line's indentation, or the
 * header's explicit one, past `parentCol`), or at the text's end.
 */
function blockScalarEnd(text: string, i: number, parentCol: number): number {
  const n = text.length;
  let j = lineEnd(text, i);
  const header = text.slice(i + 1, Math.min(j, i + 4));
  const explicit = /[1-9]/.exec(header);
  let content = explicit ? parentCol + Number(explicit[0]) : -1;
  while (j < n) {
    const start = j + 1;
    const indent = indentAt(text, start);
    if (indent !== -1) {
      if (content === -1) content = indent;
      if (indent < content || indent <= parentCol) return start;
    }
    j = lineEnd(text, start);
  }
  return n;
}
