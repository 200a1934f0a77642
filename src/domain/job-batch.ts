/**
 * A batch of job specs submitted together (`POST /v1/jobs/batch`): `{ jobs: [spec, …] }`. Every
 * spec is validated exactly as a single submit is (parseJobSpec), and the batch is all or nothing:
 * one bad spec refuses the whole batch, with every problem's path prefixed by its job's index.
 */
import { batchJobsList } from '../spec/job-batch-list.js';
import { ValidationError, type ValidationIssue } from '../spec/validation-error.js';
import type { JobDefinition } from './job-definition.js';
import { parseJobSpec } from './job-spec.js';

/** Stages in one batch at most, over all its jobs: a batch is one transaction, which holds the
 *  database's only writer while it runs (30,000 stages take under a second; this bounds it to a few). */
export const MAX_BATCH_STAGES = 100_000;
/** Problems reported at most; a batch of ten thousand bad specs does not get a 100 MB answer. */
export const MAX_BATCH_ISSUES = 1000;

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
