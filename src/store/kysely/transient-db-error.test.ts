import { describe, expect, it } from 'vitest';
import { isSchemaGone } from './transient-db-error.js';

describe('isSchemaGone', () => {
  it('is true for a schema or a table another client dropped while the migrator read the catalog (3F000, 42P01), not for other errors', () => {
    expect(isSchemaGone({ code: '3F000', severity: 'ERROR', message: 'schema "t_1" does not exist' })).toBe(true);
    expect(isSchemaGone({ code: '42P01', severity: 'ERROR', message: 'relation "fleet_2704eec51f0f.events" does not exist' })).toBe(true);
    expect(isSchemaGone({ code: '40001', severity: 'ERROR', message: 'could not serialize access' })).toBe(false);
    expect(isSchemaGone(new Error('relation does not exist'))).toBe(false);
    expect(isSchemaGone(null)).toBe(false);
  });
});
