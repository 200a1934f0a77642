import { describeValue } from './schema-issues.js';
import { BATCH_BOUNDS, SPEC_BOUNDS } from './spec-limits.js';
import { failText, parseSpecDocuments } from './spec-text.js';

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Parses spec text (YAML; JSON is YAML too) into a plain value for parseJobSpec. Throws
 * ValidationError (path "") for text over SPEC_BOUNDS (size, depth, values, aliases), syntax
 * errors (with line and column), and documents that are not a mapping.
 */
export function parseJobSpecText(text: string, filename?: string): unknown {
  const [value] = parseSpecDocuments(text, { filename, bounds: SPEC_BOUNDS, what: 'spec' });
  if (value === null || value === undefined) failText(filename, ['the spec is empty']);
  if (!isObj(value)) failText(filename, [`a job spec must be a mapping (name: ..., stages: ...), got ${describeValue(value)}`]);
  return value;
}

/** Parses batch text (YAML or JSON with a top-level `jobs:` list; within BATCH_BOUNDS) into a plain value for parseJobBatch. */
export function parseJobBatchText(text: string): unknown {
  const [value] = parseSpecDocuments(text, { bounds: BATCH_BOUNDS, what: 'batch' });
  if (value === null || value === undefined) failText(undefined, ['the batch is empty']);
  return value;
}
