import { chmodSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { looseTree, modesOf, octalModes } from '../../../test/support/loose-tree.js';
import { makeAgentFilesPrivate } from './agent-private-files.js';

const modeOf = (p: string) => statSync(p).mode & 0o7777;

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'gantry-agent-modes-'));
});
afterEach(() => {
  rmSync(root, { recursive: true, force: true });
});

/** What an agent before private files left under umask 022: every directory 0755, every file 0644. */
function oldLayout(data: string): void {
  looseTree(
    data,
    [
      '',
      'attempts',
      'attempts/att_1',
      'attempts/att_1/work',
      'attempts/att_1/output',
      'attempts/att_1/input',
      'attempts/att_1/input/prep',
      'attempts/.spare.9.abc.1',
      'attempts/.spare.9.abc.1/work',
      'attempts/att_legacy',
      'checkpoints',
      'checkpoints/job_1',
      'checkpoints/job_1/train',
    ],
    [
      'agent.json',
      'credential',
      'attempts.journal',
      '.agent.json.77.abcdef.3.tmp',
      'attempts/att_1/stdout.log',
      'attempts/att_1/stderr.log',
      'attempts/att_1/status',
      'attempts/att_1/progress.jsonl',
      'attempts/att_1/work/made-by-the-stage.txt',
      'attempts/att_1/input/prep/data.csv',
      'attempts/att_legacy/assignment.json',
      'checkpoints/job_1/train/step-100.ckpt',
      'notes.txt',
    ],
  );
}

describe('makeAgentFilesPrivate', () => {
  it("closes an older agent's layout: its files 0600, its directories 0700, the way to attempts' own directories 0711", () => {
    const data = join(root, 'agent');
    oldLayout(data);
    const t = makeAgentFilesPrivate(data, join(data, 'checkpoints'));
    expect(t.problems).toEqual([]);
    const expected: Record<string, number> = {
      '': 0o711,
      'agent.json': 0o600,
      credential: 0o600,
      'attempts.journal': 0o600,
      '.agent.json.77.abcdef.3.tmp': 0o600,
      attempts: 0o711,
      'attempts/att_1': 0o711,
      'attempts/att_1/stdout.log': 0o600,
      'attempts/att_1/stderr.log': 0o600,
      'attempts/att_1/status': 0o600,
      'attempts/att_1/progress.jsonl': 0o600,
      'attempts/att_1/work': 0o700,
      'attempts/att_1/output': 0o700,
      'attempts/att_1/input': 0o700,
      'attempts/.spare.9.abc.1': 0o711,
      'attempts/.spare.9.abc.1/work': 0o700,
      'attempts/att_legacy': 0o711,
      // An older agent's record, with the stage's environment in it.
      'attempts/att_legacy/assignment.json': 0o600,
      checkpoints: 0o711,
      'checkpoints/job_1': 0o711,
      'checkpoints/job_1/train': 0o700,
      // Inside a stage's own directories: the stage's, private by its directory.
      'attempts/att_1/work/made-by-the-stage.txt': 0o644,
      'attempts/att_1/input/prep': 0o755,
      'checkpoints/job_1/train/step-100.ckpt': 0o644,
      // Not the agent's: a data directory given as a directory with other things in it keeps them as they are.
      'notes.txt': 0o644,
    };
    expect(modesOf(data, Object.keys(expected))).toEqual(octalModes(expected));
    expect(t.changed).toHaveLength(21);
    // Once done, a second start finds nothing to change.
    expect(makeAgentFilesPrivate(data, join(data, 'checkpoints')).changed).toEqual([]);
  });

  it('tightens a checkpoint root given elsewhere (--checkpoint-dir), and does nothing where nothing is yet', () => {
    const ckpt = join(root, 'shared-ckpt');
    mkdirSync(join(ckpt, 'job_2', 'eval'), { recursive: true });
    for (const d of ['', 'job_2', 'job_2/eval']) chmodSync(join(ckpt, d), 0o755);
    const t = makeAgentFilesPrivate(join(root, 'not-yet'), ckpt);
    expect(t.problems).toEqual([]);
    expect([modeOf(ckpt), modeOf(join(ckpt, 'job_2')), modeOf(join(ckpt, 'job_2', 'eval'))]).toEqual([0o711, 0o711, 0o700]);
  });
});
