import { describeValue } from './schema-issues.js';
import { MAX_BATCH_BYTES, MAX_SPEC_BYTES } from './spec-limits.js';
import { failText, parseSpecDocuments } from './spec-text.js';

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Parses spec text (YAML; JSON is YAML too) into a plain value for parseJobSpec. Throws
 * ValidationError (path "") for text over MAX_SPEC_BYTES, syntax errors (with line and column),
 * and documents that are not a mapping.
 */
export function parseJobSpecText(text: string, filename?: string): unknown {
  const [value] = parseSpecDocuments(text, { filename, maxBytes: MAX_SPEC_BYTES, what: 'spec' });
  if (value === null || value === undefined) failText(filename, ['the spec is empty']);
  if (!isObj(value)) failText(filename, [`a job spec must be a mapping (name: ..., stages: ...), got ${describeValue(value)}`]);
  return value;
}

/** Parses batch text (YAML or JSON with a top-level `jobs:` list) into a plain value for parseJobBatch. */
export function parseJobBatchText(text: string): unknown {
  const [value] = parseSpecDocuments(text, { maxBytes: MAX_BATCH_BYTES, what: 'batch' });
  if (value === null || value === undefined) failText(undefined, ['the batch is empty']);
  return value;
}
