/**
 * What `gantry submit FILE` sends: a file holds one job spec (as always), a `jobs:` list of specs,
 * or several `---`-separated YAML documents, one spec each; any of those specs may be a sweep
 * (job-sweep.ts). Anything but one plain spec goes to the server as one batch of plain specs.
 */
import { batchJobsList } from './job-batch-list.js';
import { parseJobSpecText } from './job-spec-text.js';
import { expandSweep } from './job-sweep.js';
import { describeValue } from './schema-issues.js';
import { BATCH_BOUNDS, MAX_BATCH_JOBS } from './spec-limits.js';
import { failText, parseSpecDocuments } from './spec-text.js';
import { ValidationError, type ValidationIssue } from './validation-error.js';

export interface JobFile {
  /** The specs to submit, in file order, sweeps expanded. */
  specs: unknown[];
  /** One plain spec (no list, no documents, no sweep): submitted as a single job, as ever. */
  single: boolean;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const has = (o: Record<string, unknown>, k: string) => Object.prototype.hasOwnProperty.call(o, k);

/**
 * Reads a job file. Throws ValidationError for text that cannot be read (path "", the message
 * naming the file, line and column), a malformed list or sweep (paths such as `/jobs/2/sweep/lr`,
 * or `document 3 /sweep/lr` in a multi-document file), and more than MAX_BATCH_JOBS jobs in all.
 * The specs themselves are checked by the server, as a single spec always was.
 */
export function parseJobFile(text: string, filename?: string): JobFile {
  const docs = parseSpecDocuments(text, { filename, bounds: BATCH_BOUNDS, what: 'file', multi: true });
  let entries: { spec: unknown; where: string }[];
  if (docs.length > 1) {
    entries = docs.map((spec, i) => ({ spec, where: `document ${i + 1}` }));
  } else {
    const only = docs[0];
    if (isObj(only) && has(only, 'jobs')) {
      entries = batchJobsList(only).map((spec, i) => ({ spec, where: `/jobs/${i}` }));
    } else if (isObj(only) && has(only, 'sweep')) {
      entries = [{ spec: only, where: '' }];
    } else {
      // One plain spec: read exactly as before (its own size limit and messages).
      return { specs: [parseJobSpecText(text, filename)], single: true };
    }
  }

  const issues: ValidationIssue[] = [];
  const specs: unknown[] = [];
  for (const [n, { spec, where }] of entries.entries()) {
    const at = (path: string) => (where.startsWith('document') ? `${where}${path ? ` ${path}` : ''}` : `${where}${path}`);
    if (where.startsWith('document') && !isObj(spec)) {
      issues.push({ path: at(''), message: `a job spec must be a mapping (name: ..., stages: ...), got ${describeValue(spec)}` });
      continue;
    }
    try {
      specs.push(...expandSweep(spec));
    } catch (e) {
      if (!(e instanceof ValidationError)) throw e;
      issues.push(...e.issues.map((i) => ({ path: at(i.path), message: i.message })));
    }
    // Stop expanding once over the limit: a file of many large sweeps is not built in memory.
    if (specs.length > MAX_BATCH_JOBS) {
      const more = n < entries.length - 1 ? ' or more' : '';
      failText(filename, [`the file makes ${specs.length}${more} jobs; a batch may have at most ${MAX_BATCH_JOBS} (split the file, or the sweep)`]);
    }
  }
  if (issues.length > 0) throw new ValidationError(issues);
  return { specs, single: false };
}
