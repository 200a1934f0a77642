import { describe, expect, it } from 'vitest';
import { chooseSandbox, SandboxUnavailableError } from './choose-sandbox.js';
import { ContainmentOptionError } from './containment-options.js';

describe('chooseSandbox', () => {
  const works = { bwrap: '/usr/bin/bwrap', disableUserns: true };
  const broken = { problem: 'bubblewrap is not installed (no bwrap in PATH): apt install bubblewrap' };
  const never = () => {
    throw new Error('looked for bwrap though --sandbox is off');
  };

  it('without --sandbox: none, and bwrap is not even looked for', () => {
    for (const mode of ['auto', 'require', 'off'] as const)
      expect(chooseSandbox({ sandbox: false, mode }, never)).toEqual({ tool: null, report: null, problems: [] });
  });

  it('with a working bwrap: it, reported as bwrap', () => {
    for (const mode of ['auto', 'require'] as const)
      expect(chooseSandbox({ sandbox: true, mode }, () => works)).toEqual({ tool: works, report: 'bwrap', problems: [] });
  });

  it('auto, without one: stages run unsandboxed, and the report says why', () => {
    expect(chooseSandbox({ sandbox: true, mode: 'auto' }, () => broken)).toEqual({
      tool: null,
      report: null,
      problems: ['no sandbox, stages run without it: bubblewrap is not installed (no bwrap in PATH): apt install bubblewrap'],
    });
    // ContainmentReport.problems holds 500 characters a problem.
    const long = chooseSandbox({ sandbox: true, mode: 'auto' }, () => ({ problem: 'x'.repeat(600) }));
    expect(long.problems[0]).toHaveLength(500);
  });

  it('require, without one: the agent does not start, and says why', () => {
    expect(() => chooseSandbox({ sandbox: true, mode: 'require' }, () => broken)).toThrow(
      new SandboxUnavailableError(
        '--sandbox with --containment require, and no sandbox here: bubblewrap is not installed (no bwrap in PATH): apt install bubblewrap',
      ),
    );
  });

  it('refuses --sandbox with --containment off, which it is part of', () => {
    expect(() => chooseSandbox({ sandbox: true, mode: 'off' }, never)).toThrow(ContainmentOptionError);
  });
});
