import { type Document, LineCounter, parseAllDocuments, parseDocument } from 'yaml';
import { ValidationError } from './validation-error.js';

export interface SpecTextOptions {
  /** Named in every message when given ("train.yaml: line 3, column 5: …"). */
  filename?: string;
  /** Largest text accepted, in bytes. */
  maxBytes: number;
  /** What the text is, for the size message: "spec", "batch", "file". */
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

/**
 * Parses YAML text (JSON is YAML too) into plain values, one per document. Throws ValidationError
 * (path "") for text over `maxBytes`, syntax errors (with line and column) and unreadable
 * documents (alias bombs). A value may be null (an empty document): the caller says what it wanted.
 */
export function parseSpecDocuments(text: string, opts: SpecTextOptions): unknown[] {
  const fail = (messages: string[]) => failText(opts.filename, messages);
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > opts.maxBytes) {
    const size = opts.maxBytes % MiB === 0 ? ` (${opts.maxBytes / MiB} MiB)` : '';
    fail([`${opts.what} is ${bytes} bytes; the limit is ${opts.maxBytes} bytes${size}`]);
  }
  const lineCounter = new LineCounter();
  const options = { lineCounter, prettyErrors: false, uniqueKeys: true } as const;
  let docs: Document[];
  if (opts.multi) {
    const all = parseAllDocuments(text, options);
    docs = Array.isArray(all) ? all : [];
  } else {
    docs = [parseDocument(text, options)];
  }
  const errors = docs.flatMap((d) => d.errors);
  if (errors.length > 0) {
    fail(
      errors.map((e) => {
        const { line, col } = lineCounter.linePos(e.pos[0]);
        return `line ${line}, column ${col}: ${e.message}`;
      }),
    );
  }
  const values = docs.map((doc) => {
    try {
      return doc.toJS({ maxAliasCount: 100 }) as unknown;
    } catch (e) {
      return fail([`cannot read the ${opts.what}: ${e instanceof Error ? e.message : String(e)}`]);
    }
  });
  return opts.multi ? values.filter((v) => v !== null && v !== undefined) : values;
}
