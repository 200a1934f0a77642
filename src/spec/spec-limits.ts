/**
 * How large and how complex a spec, a batch and a job file may be: the server refuses more, and
 * the CLI says so before sending. Size bounds the work of reading a text; the shape bounds
 * (depth, values, aliases) bound what a small text can still cost: a megabyte of `[[[[…` nests a
 * million deep (the YAML parser recursed until the process ran out of memory), a megabyte of
 * `[1,1,…` is half a million values (seconds of parsing and hundreds of MB), and a few aliases of
 * aliases expand exponentially ("billion laughs"). All are checked by a linear scan of the text
 * before any parser sees it (spec-text-bounds.ts: YAML, json-text-bounds.ts: JSON bodies).
 */

/** The largest single job spec (text or body). */
export const MAX_SPEC_BYTES = 1024 * 1024;
/** Jobs in one batch at most (a sweep expands to at most this many too). */
export const MAX_BATCH_JOBS = 10_000;
/** The largest batch body (the route's own limit; a single job's is MAX_SPEC_BYTES), and the largest job file. */
export const MAX_BATCH_BYTES = 32 * 1024 * 1024;
/** Levels of nesting at most, lists and mappings together; a job spec needs about 6, a batch 8. */
export const MAX_SPEC_DEPTH = 32;
/** Values in one spec at most (every scalar, key, list and mapping): a spec of 1,000 stages of 60 values each fits. */
export const MAX_SPEC_NODES = 100_000;
/**
 * Values in one YAML batch or job file at most: 10,000 jobs of 50 values each. YAML's document
 * model costs about 1 KB a value (a batch at this bound takes the parser about 500 MB).
 */
export const MAX_BATCH_NODES = 500_000;
/**
 * Values in one JSON batch body at most: 10,000 jobs of 400 values each (a three-stage job with its
 * commands, resources and environment is 100 to 200). JSON.parse builds a value in tens of bytes, so
 * a body at this bound costs about what its 32 MiB of text does; programs send batches as JSON.
 */
export const MAX_BATCH_JSON_NODES = 4_000_000;
/** YAML anchors (`&name`), and aliases (`*name`), at most each in one text; a spec needs few or none. */
export const MAX_SPEC_ALIASES = 100;

/** The bounds one text or body is read within. */
export interface SpecBounds {
  /** Bytes (UTF-8). */
  maxBytes: number;
  /** Levels of nesting. */
  maxDepth: number;
  /** Values: scalars (keys too), lists and mappings. */
  maxNodes: number;
  /** Anchors, and aliases, each. */
  maxAliases: number;
}

/** One job spec: `POST /v1/jobs`, a rerun's spec, a job file of one spec. */
export const SPEC_BOUNDS: SpecBounds = { maxBytes: MAX_SPEC_BYTES, maxDepth: MAX_SPEC_DEPTH, maxNodes: MAX_SPEC_NODES, maxAliases: MAX_SPEC_ALIASES };
/** A batch (`POST /v1/jobs/batch`) and a job file of several specs. */
export const BATCH_BOUNDS: SpecBounds = { maxBytes: MAX_BATCH_BYTES, maxDepth: MAX_SPEC_DEPTH, maxNodes: MAX_BATCH_NODES, maxAliases: MAX_SPEC_ALIASES };
/** A batch sent as JSON (`POST /v1/jobs/batch`, application/json): more values, as JSON's are cheap (MAX_BATCH_JSON_NODES). */
export const BATCH_JSON_BOUNDS: SpecBounds = { ...BATCH_BOUNDS, maxNodes: MAX_BATCH_JSON_NODES };
