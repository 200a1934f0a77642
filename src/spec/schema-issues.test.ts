import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Value } from 'typebox/value';
import { JobSpecSchema } from '../domain/job-spec.js';
import { schemaIssues } from './schema-issues.js';

describe('schemaIssues', () => {
  // The fast path is a compiled check; it must agree with the interpreted one that reports errors.
  it('finds issues exactly when the interpreted check fails', () => {
    const stage = { name: 'a', command: ['true'] };
    const nearMiss = fc
      .tuple(fc.constantFrom('name', 'team', 'priority', 'labels', 'retry', 'stages', 'x'), fc.jsonValue())
      .map(([k, v]) => ({ name: 'ok', stages: [stage], [k]: v }));
    const stageMiss = fc
      .tuple(fc.constantFrom('name', 'needs', 'resources', 'placement', 'command', 'env', 'timeoutSeconds', 'retry', 'preemptible'), fc.jsonValue())
      .map(([k, v]) => ({ name: 'ok', stages: [{ ...stage, [k]: v }] }));
    fc.assert(
      fc.property(fc.oneof(fc.jsonValue(), nearMiss, stageMiss), (value) => {
        expect(schemaIssues(JobSpecSchema, value).length === 0).toBe(Value.Check(JobSpecSchema, value));
      }),
      { numRuns: 2000 },
    );
  });
});
