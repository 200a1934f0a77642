import { describe, expect, it } from 'vitest';
import { DEFAULT_REPORTS_IN_FLIGHT } from './agent.js';
import { reportsInFlightFromFlags } from './run-agent-cli.js';

describe('--reports-in-flight', () => {
  it('the flag over its variable over the default', () => {
    expect(reportsInFlightFromFlags({}, {})).toBe(DEFAULT_REPORTS_IN_FLIGHT);
    expect(reportsInFlightFromFlags({}, { GANTRY_REPORTS_IN_FLIGHT: '3' })).toBe(3);
    expect(reportsInFlightFromFlags({ reportsInFlight: '1' }, { GANTRY_REPORTS_IN_FLIGHT: '3' })).toBe(1);
  });

  it('refuses what is not a whole number from 1 to 8, naming the flag', () => {
    for (const bad of ['0', '9', '1.5', 'two', ''])
      expect(() => reportsInFlightFromFlags({ reportsInFlight: bad }, {})).toThrow(/--reports-in-flight .*1 to 8/);
  });
});
