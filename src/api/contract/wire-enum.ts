import { Type } from 'typebox';

/**
 * A string that is one of `values`, as the wire says it: `{ type: "string", enum: […] }` in the
 * OpenAPI document, and the union of the values in TypeScript. A plain enum rather than a union
 * of literals, so that serializing a large list stays a string copy, not a match against each.
 */
export function wireEnum<T extends string>(values: readonly T[], options: { description?: string } = {}) {
  return Type.Unsafe<T>({ type: 'string', enum: [...values], ...options });
}
