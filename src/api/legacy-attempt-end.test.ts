import { describe, expect, it } from 'vitest';
import { legacyAttemptEnd } from './legacy-attempt-end.js';

/**
 * Every wording agents of protocol 1 wrote in an outcome's reason (src/agent and its history:
 * `git log -p -S'spawn failed' -- src/agent`), and the kind it means: such an agent is still
 * understood by a server that decides on kinds.
 */
describe('a protocol 1 outcome, typed at the edge', () => {
  const cases: [what: string, o: { exitCode: number | null; signal: string | null; reason: string | null }, kind: string][] = [
    ['a plain exit 0', { exitCode: 0, signal: null, reason: null }, 'exited'],
    ['a plain non-zero exit', { exitCode: 3, signal: null, reason: null }, 'exited'],
    ['a signal nobody asked for', { exitCode: null, signal: 'SIGSEGV', reason: null }, 'signaled'],
    ['spawn failed, no such command', { exitCode: null, signal: null, reason: 'spawn failed: ENOENT: no-such-command-xyz is not in PATH' }, 'spawn-failed'],
    ['spawn failed, not executable', { exitCode: null, signal: null, reason: 'spawn failed: EACCES: /x/not-executable is not executable' }, 'spawn-failed'],
    ['spawn failed, empty command', { exitCode: null, signal: null, reason: 'spawn failed: command is empty' }, 'spawn-failed'],
    ['spawn failed, the launcher gone', { exitCode: null, signal: null, reason: 'spawn failed: the launcher exited before starting it' }, 'spawn-failed'],
    ['a timeout (TERM honoured)', { exitCode: null, signal: 'SIGTERM', reason: 'timeout after 5 s' }, 'timeout'],
    ['a timeout of a fraction of a second', { exitCode: null, signal: 'SIGKILL', reason: 'timeout after 0.2 s' }, 'timeout'],
    ['killed when canceled', { exitCode: null, signal: 'SIGTERM', reason: 'killed: canceled' }, 'killed'],
    ['killed when stale', { exitCode: null, signal: 'SIGKILL', reason: 'killed: stale' }, 'killed'],
    ['killed before it started', { exitCode: null, signal: null, reason: 'killed: agent stopping' }, 'killed'],
    ['killed after a TERM it exited 0 on', { exitCode: 0, signal: null, reason: 'killed: canceled' }, 'killed'],
    ['inputs not fetched', { exitCode: null, signal: null, reason: 'input download failed: refusing path ../x' }, 'inputs-failed'],
    ['outputs not uploaded', { exitCode: null, signal: null, reason: 'output upload failed: ECONNRESET (the process exited 0)' }, 'outputs-failed'],
    [
      'ended while its agent restarted',
      { exitCode: null, signal: null, reason: 'ended while the agent was restarting, with no exit status recorded' },
      'exited',
    ],
    ['words it never wrote, with a signal', { exitCode: null, signal: 'SIGTERM', reason: 'something else' }, 'signaled'],
  ];
  for (const [what, o, kind] of cases) {
    it(`${what}: ${kind}, the text kept as the detail`, () => {
      expect(legacyAttemptEnd(o)).toEqual({ kind, detail: o.reason });
    });
  }
});
