import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CLI, REPO } from '../support/gantry-process.js';

/**
 * Issue 28: a join token given as `gantry agent --token …` sits in `ps` for the agent's life. The
 * agent says so at its start; given with --token-file or $GANTRY_JOIN_TOKEN it says nothing.
 */
describe('gantry agent: a join token on the command line', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-agent-token-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** Starts an agent against a server that is not there, and returns its stderr once its first line is out. */
  const startLines = (args: string[], env: Record<string, string> = {}) =>
    new Promise<string>((resolve, reject) => {
      const { GANTRY_JOIN_TOKEN: _inherited, ...parent } = process.env;
      const name = `m${Math.random().toString(36).slice(2, 8)}`;
      const proc = spawn(
        process.execPath,
        [CLI, 'agent', '--server', 'http://127.0.0.1:9', '--name', name, '--data-dir', join(dir, name), '--cpu', '1', '--memory', '1Gi', ...args],
        { cwd: REPO, env: { ...parent, NO_COLOR: '1', ...env }, stdio: ['ignore', 'ignore', 'pipe'] },
      );
      let stderr = '';
      const timer = setTimeout(() => {
        proc.kill('SIGKILL');
        reject(new Error(`no start line from the agent in 20 s: ${stderr}`));
      }, 20_000);
      proc.stderr.on('data', (d) => {
        stderr += String(d);
        // The line after the capacity line: the warning, or the first try to reach the server.
        if (stderr.split('\n').length > 2) {
          clearTimeout(timer);
          proc.kill('SIGKILL');
          resolve(stderr);
        }
      });
    });

  it('--token: warns that every user of the machine can read it, and names the ways that do not', async () => {
    const err = await startLines(['--token', 'gantry_join_0000000000000000000000000000000x']);
    expect(err).toMatch(
      /warning: the join token is on the command line \(--token\), where every user of this machine can read it \(ps, \/proc\/PID\/cmdline\) for as long as the agent runs; give it with --token-file FILE or \$GANTRY_JOIN_TOKEN instead/,
    );
    // The warning never repeats the token itself.
    expect(err).not.toContain('gantry_join_0000');
  }, 30_000);

  it('--token-file or $GANTRY_JOIN_TOKEN: no warning', async () => {
    const file = join(dir, 'join.token');
    writeFileSync(file, 'gantry_join_0000000000000000000000000000000x\n', { mode: 0o600 });
    expect(await startLines(['--token-file', file])).not.toMatch(/warning: the join token/);
    expect(await startLines([], { GANTRY_JOIN_TOKEN: 'gantry_join_0000000000000000000000000000000x' })).not.toMatch(/warning: the join token/);
  }, 45_000);
});
