import { type Document, isMap, isScalar, isSeq, LineCounter, type Node, parseAllDocuments, parseDocument } from 'yaml';
import type { SpecBounds } from './spec-limits.js';
import { ValidationError } from './validation-error.js';
import { yamlTextBounds } from './yaml-text-bounds.js';

export interface SpecTextOptions {
  /** Named in every message when given ("train.yaml: line 3, column 5: …"). */
  filename?: string;
  /** Size and shape the text is read within (spec-limits.ts). */
  bounds: SpecBounds;
  /** What the text is, for the messages: "spec", "batch", "file". */
  what: string;
  /** Several `---`-separated documents allowed (empty ones are left out); otherwise exactly one. */
  multi?: boolean;
}

/** Throws the ValidationError (path "") that text which cannot be read as a spec gets. */
export function failText(filename: string | undefined, messages: string[]): never {
  const where = filename ? `${filename}: ` : '';
  throw new ValidationError(messages.map((m) => ({ path: '', message: `${where}${m}` })));
}

const MiB = 1024 * 1024;
/** Duplicate keys reported at most. */
const MAX_DUPLICATES = 100;

/**
 * Throws the ValidationError (path "") of text over the bounds' size or shape: what
 * parseSpecDocuments checks before its parser runs, in a few milliseconds a megabyte.
 */
export function checkSpecText(text: string, opts: SpecTextOptions): void {
  const { bounds } = opts;
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > bounds.maxBytes) {
    const size = bounds.maxBytes % MiB === 0 ? ` (${bounds.maxBytes / MiB} MiB)` : '';
    failText(opts.filename, [`${opts.what} is ${bytes} bytes; the limit is ${bounds.maxBytes} bytes${size}`]);
  }
  const over = yamlTextBounds(text, bounds, opts.what);
  if (over) failText(opts.filename, [over]);
}

/**
 * Parses YAML text (JSON is YAML too) into plain values, one per document. Throws ValidationError
 * (path "") for text over the bounds' size or shape (checked before the parser runs), syntax
 * errors and duplicate keys (with line and column) and unreadable documents (alias bombs). A value
 * may be null (an empty document): the caller says what it wanted.
 */
export function parseSpecDocuments(text: string, opts: SpecTextOptions): unknown[] {
  const fail = (messages: string[]) => failText(opts.filename, messages);
  const { bounds } = opts;
  checkSpecText(text, opts);
  const lineCounter = new LineCounter();
  const at = (offset: number) => {
    const { line, col } = lineCounter.linePos(offset);
    return `line ${line}, column ${col}`;
  };
  // Keys are checked for uniqueness below, in linear time: the parser's own check compares each
  // key with every earlier one of its mapping (a mapping of 16,000 keys took seconds).
  const options = { lineCounter, prettyErrors: false, uniqueKeys: false } as const;
  let docs: Document[];
  try {
    if (opts.multi) {
      const all = parseAllDocuments(text, options);
      docs = Array.isArray(all) ? all : [];
    } else {
      docs = [parseDocument(text, options)];
    }
  } catch (e) {
    // Not expected within the bounds; a parser's stack overflow is still a refused text, not a 500.
    return fail([`cannot read the ${opts.what}: ${e instanceof Error ? e.message : String(e)}`]);
  }
  const errors = docs.flatMap((d) => d.errors);
  if (errors.length > 0) fail(errors.map((e) => `${at(e.pos[0])}: ${e.message}`));
  const problems = docs.flatMap((d) => shapeProblems(d.contents, bounds, opts.what, at));
  if (problems.length > 0) fail(problems);
  const values = docs.map((doc) => {
    try {
      return doc.toJS({ maxAliasCount: bounds.maxAliases }) as unknown;
    } catch (e) {
      return fail([`cannot read the ${opts.what}: ${e instanceof Error ? e.message : String(e)}`]);
    }
  });
  return opts.multi ? values.filter((v) => v !== null && v !== undefined) : values;
}

/**
 * Duplicate keys of every mapping (the first repeat of each), and, as a second line behind the
 * scan of the text, the exact depth and count of the parsed nodes. Iterative: depth is bounded
 * by then, but a walk that cannot overflow needs no argument that it will not.
 */
function shapeProblems(root: Node | null, bounds: SpecBounds, what: string, at: (offset: number) => string): string[] {
  const problems: string[] = [];
  if (!root) return problems;
  let nodes = 0;
  const stack: { node: Node; depth: number }[] = [{ node: root, depth: 0 }];
  while (stack.length > 0) {
    const { node, depth } = stack.pop()!;
    nodes += 1;
    const where = () => at(node.range?.[0] ?? 0);
    if (nodes > bounds.maxNodes)
      return [`${where()}: the ${what} has more than ${bounds.maxNodes} values (scalars, keys, lists and mappings); split it into several`];
    if (isMap(node) || isSeq(node)) {
      if (depth + 1 > bounds.maxDepth) return [`${where()}: the ${what} nests deeper than ${bounds.maxDepth} levels (lists and mappings inside each other)`];
    }
    if (isMap(node)) {
      // Each repeated key once (its first repeat), and at most MAX_DUPLICATES in all: a mapping of
      // 20,000 equal keys is one problem, not a 2 MB answer.
      const seen = new Set<string>();
      const told = new Set<string>();
      for (const pair of node.items) {
        const key = pair.key as Node | null;
        if (isScalar(key)) {
          const id = `${typeof key.value}:${String(key.value)}`;
          if (seen.has(id) && !told.has(id) && problems.length < MAX_DUPLICATES) {
            problems.push(`${at(key.range?.[0] ?? 0)}: Map keys must be unique`);
            told.add(id);
          }
          seen.add(id);
        }
        if (key) stack.push({ node: key, depth: depth + 1 });
        if (pair.value) stack.push({ node: pair.value as Node, depth: depth + 1 });
      }
    } else if (isSeq(node)) {
      for (const item of node.items) if (item) stack.push({ node: item as Node, depth: depth + 1 });
    }
  }
  return problems;
}
