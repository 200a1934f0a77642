import { lstatSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join, relative } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { gantryUpForSuite, isTerminal, jobOf, submit, until } from '../support/gantry-process.js';

const SECRET = 'SUPERSECRET-alpha-1234567';

interface Entry {
  path: string;
  kind: 'file' | 'dir' | 'other';
  mode: number;
}

/** Every entry below `root` (relative paths), but what a stage made inside its own directories: its own to make as it likes. */
function walk(root: string): Entry[] {
  const out: Entry[] = [];
  const dirs = [root];
  for (let dir = dirs.pop(); dir !== undefined; dir = dirs.pop()) {
    for (const name of readdirSync(dir)) {
      const abs = join(dir, name);
      const st = lstatSync(abs);
      const path = relative(root, abs);
      out.push({ path, kind: st.isDirectory() ? 'dir' : st.isFile() ? 'file' : 'other', mode: st.mode & 0o7777 });
      if (st.isDirectory() && !STAGE_OWN.test(path)) dirs.push(abs);
    }
  }
  return out;
}

/** An attempt's work/, output/, input/ and a checkpoint directory: the stage's own (0700), its contents its own. */
const STAGE_OWN = /^agents\/[^/]+\/(attempts\/[^/]+\/(work|output|input)|checkpoints\/[^/]+\/[^/]+)$/;
/**
 * The directories on the way to a stage's own, 0711 (docs/containment.md, "Private files"): the
 * data directory (it holds the agents'), agents/, each agent's data directory, its attempts/, each
 * and the checkpoint root and its job directories.
 */
const PASSAGE = /^(|agents|agents\/[^/]+|agents\/[^/]+\/attempts|agents\/[^/]+\/checkpoints|agents\/[^/]+\/checkpoints\/[^/]+)$/;
/** An attempt's directory: 0711 while its command runs, closed (0700) once it is settled, before its uid can go to another. */
const ATTEMPT = /^agents\/[^/]+\/attempts\/[^/]+$/;

/** Issue 27: the files of a fresh `gantry up` are 0600 and its directories 0700 (0711 on the way to stages' own) under umask 022. */
describe('private files, end to end', () => {
  const up = gantryUpForSuite({ cluster: 'machines:\n  - { name: cpu-1, cpu: 2, memory: 2Gi }\n', machines: 1, umask: '022' });
  afterAll(async () => {
    // Stopped first (again, whichever hook runs first: stop() is once), then its files go.
    const g = up();
    await g.stop();
    rmSync(g.dataDir, { recursive: true, force: true });
  });

  it('after a job ran: every file 0600, every directory 0700 but exactly the documented 0711 ones; its log files gone once shipped', async () => {
    const g = up();
    const r = await submit(g.url, {
      name: 'prints-a-secret',
      stages: [
        {
          name: 'a',
          secretEnv: { API_KEY: SECRET },
          command: ['sh', '-c', 'echo "key=$API_KEY"; echo "to stderr: $API_KEY" >&2; echo result > "$GANTRY_OUTPUT_DIR/result.txt"'],
        },
      ],
    });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    const job = await until('job ends', () => jobOf(g.url, r.body.id), isTerminal);
    expect(job.state).toBe('succeeded');
    const attemptDir = join(g.dataDir, 'agents', 'cpu-1', 'attempts', job.stages[0].attempts[0].id);
    // Settled (reported) a moment after the server recorded the outcome: then its logs go.
    await until(
      'its log files removed',
      async () => readdirSync(attemptDir),
      (names) => !names.includes('stdout.log') && !names.includes('stderr.log'),
    );

    const entries = walk(g.dataDir);
    // A link, a FIFO or a socket has no expected mode: Gantry makes none, and one is reported.
    // The job has ended: its attempt's directory is settled, closed.
    const expected = (e: Entry) => (e.kind === 'file' ? 0o600 : e.kind === 'dir' ? (PASSAGE.test(e.path) ? 0o711 : 0o700) : null);
    expect(entries.filter((e) => ATTEMPT.test(e.path)).length).toBeGreaterThan(0);
    const wrong = entries
      // The test's own cluster file, written there by startGantryUp before `gantry up` ran: not Gantry's.
      .filter((e) => e.path !== 'cluster.yaml')
      .filter((e) => e.mode !== expected(e))
      .map((e) => `${e.path}: ${e.kind} ${e.mode.toString(8)}`);
    const root = lstatSync(g.dataDir).mode & 0o7777;
    expect({ wrong, root: root.toString(8) }).toEqual({ wrong: [], root: '711' });
    // The walk saw what it should have: the database, the tokens, a blob, the journal, the attempt.
    const paths = new Set(entries.map((e) => e.path));
    for (const p of ['gantry.db', 'admin.token', 'join.token', 'server.log', 'agents/cpu-1/credential', 'agents/cpu-1/attempts.journal'])
      expect(paths, p).toContain(p);
    expect(entries.some((e) => e.path.startsWith('artifacts/blobs/sha256/') && e.kind === 'file')).toBe(true);
    expect(entries.filter((e) => PASSAGE.test(e.path) && e.kind === 'dir').map((e) => e.path)).toEqual(
      expect.arrayContaining(['agents', 'agents/cpu-1', 'agents/cpu-1/attempts']),
    );
    expect(entries.filter((e) => ATTEMPT.test(e.path)).map((e) => e.path)).toContain(relative(g.dataDir, attemptDir));
    // Where the secret is on disk now (docs/security.md): in the database (the stage's definition)
    // and the agent's journal (its assignment), both 0600; not in a log file, the server's log or a blob.
    const holding = entries
      .filter((e) => e.kind === 'file')
      .filter((e) => readFileSync(join(g.dataDir, e.path)).includes(SECRET))
      .map((e) => e.path);
    expect(holding.filter((p) => !['gantry.db', 'gantry.db-wal', 'agents/cpu-1/attempts.journal'].includes(p))).toEqual([]);
    expect(holding).toContain('agents/cpu-1/attempts.journal');
  });
});
