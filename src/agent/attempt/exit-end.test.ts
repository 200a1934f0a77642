import { describe, expect, it } from 'vitest';
import { exitEnd, legacyExitKind } from './exit-end.js';

const at = '2026-01-01T00:00:00.000Z';

describe('exitEnd', () => {
  it('carries the recorded kind, with the reason as its detail', () => {
    expect(exitEnd({ kind: 'exited', exitCode: 4, signal: null, reason: null, finishedAt: at })).toEqual({ kind: 'exited', detail: null });
    expect(exitEnd({ kind: 'timeout', exitCode: null, signal: 'SIGTERM', reason: 'timeout after 5 s', finishedAt: at })).toEqual({
      kind: 'timeout',
      detail: 'timeout after 5 s',
    });
    expect(exitEnd({ kind: 'outputs-failed', exitCode: null, signal: null, reason: 'x'.repeat(3000), finishedAt: at })!.detail).toHaveLength(2000);
  });

  it('reports nothing typed for an end nobody can know', () => {
    expect(exitEnd({ kind: 'unknown', exitCode: null, signal: null, reason: 'ended while the agent was restarting', finishedAt: at })).toBeNull();
  });

  it("reads the kind of an older agent's exit record (no kind) from how it ended", () => {
    expect(legacyExitKind({ exitCode: 0, signal: null, reason: null })).toBe('exited');
    expect(legacyExitKind({ exitCode: null, signal: 'SIGSEGV', reason: null })).toBe('signaled');
    expect(legacyExitKind({ exitCode: null, signal: null, reason: 'spawn failed: ENOENT: x is not in PATH' })).toBe('spawn-failed');
    expect(legacyExitKind({ exitCode: null, signal: 'SIGTERM', reason: 'timeout after 5 s' })).toBe('timeout');
    expect(legacyExitKind({ exitCode: null, signal: null, reason: 'input download failed: 404' })).toBe('inputs-failed');
    expect(legacyExitKind({ exitCode: null, signal: null, reason: 'output upload failed: 413 (the process exited 0)' })).toBe('outputs-failed');
    expect(exitEnd({ exitCode: null, signal: null, reason: 'input download failed: 404', finishedAt: at })).toEqual({
      kind: 'inputs-failed',
      detail: 'input download failed: 404',
    });
  });
});
