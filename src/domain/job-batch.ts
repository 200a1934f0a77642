/**
 * A batch of job specs submitted together (`POST /v1/jobs/batch`): `{ jobs: [spec, …] }`. Every
 * spec is validated exactly as a single submit is (parseJobSpec), and the batch is all or nothing:
 * one bad spec refuses the whole batch, with every problem's path prefixed by its job's index.
 */
import { ValidationError, type ValidationIssue } from './errors.js';
import type { JobDefinition } from './job-definition.js';
import { parseJobSpec } from './job-spec.js';
import { describeValue, suggest } from './schema-issues.js';
import { failText, parseSpecDocuments } from './spec-text.js';

/** Jobs in one batch at most (a sweep expands to at most this many too). */
export const MAX_BATCH_JOBS = 10_000;
/** Stages in one batch at most, over all its jobs: a batch is one transaction, which holds the
 *  database's only writer while it runs (30,000 stages take under a second; this bounds it to a few). */
export const MAX_BATCH_STAGES = 100_000;
/** The largest batch body (the route's own limit; a single job's is MAX_SPEC_BYTES). */
export const MAX_BATCH_BYTES = 32 * 1024 * 1024;
/** Problems reported at most; a batch of ten thousand bad specs does not get a 100 MB answer. */
export const MAX_BATCH_ISSUES = 1000;

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The list of a batch body, or a ValidationError saying why it is not one. */
export function batchJobsList(input: unknown): unknown[] {
  const fail = (path: string, message: string): never => {
    throw new ValidationError([{ path, message }]);
  };
  if (!isObj(input)) return fail('', `a batch must be a mapping with a list of job specs (jobs: [...]), got ${describeValue(input)}`);
  const extra = Object.keys(input).filter((k) => k !== 'jobs');
  if (extra.length > 0) {
    throw new ValidationError(
      extra.map((k) => ({ path: `/${k}`, message: `unknown field "${k}"${suggest(k, ['jobs']) ? ' (did you mean "jobs"?)' : ''}; a batch has only "jobs"` })),
    );
  }
  const jobs = Object.prototype.hasOwnProperty.call(input, 'jobs') ? input.jobs : undefined;
  if (jobs === undefined) return fail('/jobs', 'missing required field "jobs"');
  if (!Array.isArray(jobs)) return fail('/jobs', `must be a list of job specs, got ${describeValue(jobs)}`);
  if (jobs.length === 0) return fail('/jobs', 'must not be empty');
  if (jobs.length > MAX_BATCH_JOBS) {
    return fail('/jobs', `too many jobs: ${jobs.length} (a batch may have at most ${MAX_BATCH_JOBS}; split it into several)`);
  }
  return jobs;
}

/**
 * Validates a batch body and returns its jobs normalised, in order. Throws ValidationError listing
 * the problems of every job (at most MAX_BATCH_ISSUES of them, then a count of the rest), each
 * with its path in the body: `/jobs/3/stages/1/command`.
 */
export function parseJobBatch(input: unknown): JobDefinition[] {
  const jobs = batchJobsList(input);
  const issues: ValidationIssue[] = [];
  let unreported = 0;
  let badJobs = 0;
  const definitions: JobDefinition[] = [];
  let stages = 0;
  jobs.forEach((spec, i) => {
    try {
      const def = parseJobSpec(spec);
      stages += def.stages.length;
      definitions.push(def);
    } catch (e) {
      if (!(e instanceof ValidationError)) throw e;
      badJobs += 1;
      for (const issue of e.issues) {
        if (issues.length < MAX_BATCH_ISSUES) issues.push({ path: `/jobs/${i}${issue.path}`, message: issue.message });
        else unreported += 1;
      }
    }
  });
  if (unreported > 0) {
    issues.push({ path: '/jobs', message: `and ${unreported} more problem(s); ${badJobs} of ${jobs.length} jobs are invalid` });
  }
  if (issues.length === 0 && stages > MAX_BATCH_STAGES) {
    issues.push({ path: '/jobs', message: `too many stages: ${stages} in all (a batch may have at most ${MAX_BATCH_STAGES}; split it into several)` });
  }
  if (issues.length > 0) throw new ValidationError(issues);
  return definitions;
}

/** Parses batch text (YAML or JSON with a top-level `jobs:` list) into a plain value for parseJobBatch. */
export function parseJobBatchText(text: string): unknown {
  const [value] = parseSpecDocuments(text, { maxBytes: MAX_BATCH_BYTES, what: 'batch' });
  if (value === null || value === undefined) failText(undefined, ['the batch is empty']);
  return value;
}
