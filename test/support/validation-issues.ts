import { expect } from 'vitest';
import { ValidationError, type ValidationIssue } from '../../src/spec/validation-error.js';

/** The issues of the ValidationError that `fn` throws; fails the test if it throws anything else, or nothing. */
export function issuesOf(fn: () => unknown): ValidationIssue[] {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(ValidationError);
    return (e as ValidationError).issues;
  }
  throw new Error('expected a ValidationError');
}
