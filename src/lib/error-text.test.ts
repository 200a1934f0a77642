import { describe, expect, it } from 'vitest';
import { errorText } from './error-text.js';

describe('errorText', () => {
  it("an Error's message, anything else as text", () => {
    expect(errorText(new TypeError('bad'))).toBe('bad');
    expect(errorText('plain')).toBe('plain');
    expect(errorText(42)).toBe('42');
    expect(errorText(undefined)).toBe('undefined');
    expect(errorText(null)).toBe('null');
  });
});
