import { describeValue, suggest } from './schema-issues.js';
import { MAX_BATCH_JOBS } from './spec-limits.js';
import { ValidationError } from './validation-error.js';

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
