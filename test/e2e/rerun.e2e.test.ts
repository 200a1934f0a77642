import { readFileSync, readdirSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { api, gantry, gantryUpForSuite, jobOf, until, sharedDir } from '../support/gantry-process.js';

const CLUSTER = `
machines:
  - { name: cpu-1, cpu: 4, memory: 4Gi }
  - { name: gpu-1, cpu: 4, memory: 8Gi, gpus: { type: h100, count: 2 } }
`;

/** The lines a marker file holds: one per time the stage's process ran. */
/**
 * How many times a stage's process ran: each run leaves a file of its own (`mark`), since runs of
 * one stage in two jobs are two attempts with users of their own, and one could not append to a
 * file the other made (0644: the second run's line was lost while it succeeded anyway).
 */
const runs = (dir: string, stage: string) => readdirSync(dir).filter((f) => f.startsWith(`${stage}.run.`)).length;
/** The shell that records a run of `stage` in $MARKERS, failing the stage if it cannot. */
const mark = (stage: string) => `mktemp "$MARKERS/${stage}.run.XXXXXX" > /dev/null || exit 9`;

/** `gantry rerun` end to end (issue 12): the built CLI, `gantry up`, real agents and processes. */
describe('gantry rerun', () => {
  const up = gantryUpForSuite({ cluster: CLUSTER, machines: 2 });
  const cli = (...args: string[]) => gantry([...args, '--server', up().url]);
  const jobCount = async () => (await api(up().url, '/v1/jobs?limit=1000')).body.jobs.length as number;
  const ended = (id: string) =>
    until(
      `${id} ended`,
      () => jobOf(up().url, id),
      (j) => ['succeeded', 'failed', 'canceled'].includes(j.state),
      60_000,
    );
  /** A spec file in a fresh directory, with MARKERS set in every stage to a directory the stages record their runs in. */
  const specFile = (dir: string, name: string, spec: { stages: ({ env?: Record<string, string> } & Record<string, unknown>)[] } & Record<string, unknown>) => {
    const file = join(dir, name);
    writeFileSync(file, stringify({ ...spec, stages: spec.stages.map((s) => ({ ...s, env: { MARKERS: dir, ...s.env } })) }));
    return file;
  };

  it('a 3-stage job whose last stage fails for a missing file, fixed with --spec: only that stage runs again, reading the original outputs', async () => {
    const dir = sharedDir('rerun-e2e-');
    const spec = (config: string) => ({
      name: 'issue-12',
      stages: [
        {
          name: 'prep',
          resources: { cpu: 1, memory: '256Mi' },
          command: ['sh', '-c', `${mark('prep')}; echo rows=42 > "$GANTRY_OUTPUT_DIR/data.txt"`],
        },
        {
          name: 'train',
          needs: ['prep'],
          resources: { cpu: 1, memory: '256Mi', gpu: { count: 1, type: 'h100' } },
          command: [
            'sh',
            '-c',
            `${mark('train')}; sleep 1; { cat "$GANTRY_INPUT_DIR/prep/data.txt"; echo "trained-by=$GANTRY_JOB_ID"; } > "$GANTRY_OUTPUT_DIR/model.bin"`,
          ],
        },
        {
          name: 'eval',
          needs: ['train'],
          retry: { maxAttempts: 1 },
          env: { CONFIG: join(dir, config) },
          command: [
            'sh',
            '-c',
            `${mark('eval')}; test -f "$CONFIG" || { echo "missing $CONFIG" >&2; exit 3; }; cat "$GANTRY_INPUT_DIR/train/model.bin" > "$GANTRY_OUTPUT_DIR/report.txt"`,
          ],
        },
      ],
    });
    writeFileSync(join(dir, 'eval.cfg'), 'threshold=0.5\n');
    const broken = specFile(dir, 'job.yaml', spec('missing.cfg'));
    const fixed = specFile(dir, 'fixed.yaml', spec('eval.cfg'));

    const submitted = await cli('submit', broken, '--wait');
    expect(submitted.code).toBe(1);
    const orig = submitted.stdout.trim();
    const before = await jobOf(up().url, orig);
    expect(before.stages.map((s: { state: string }) => s.state)).toEqual(['succeeded', 'succeeded', 'failed']);
    expect([runs(dir, 'prep'), runs(dir, 'train'), runs(dir, 'eval')]).toEqual([1, 1, 1]);

    // The plan first: what is reused (from which attempt, what it cost), what runs.
    const count = await jobCount();
    const dry = await cli('rerun', orig, '--spec', fixed, '--dry-run');
    expect(dry.code).toBe(0);
    expect(dry.stdout).toMatch(new RegExp(`prep\\s+reused\\s+${orig} \\(${before.stages[0].attempts[0].id}\\)`));
    expect(dry.stdout).toMatch(/train\s+reused\s+\S+ \(att_\w+\)\s+\d\d:\d\d\s+1\s+\d/);
    expect(dry.stdout).toMatch(/eval\s+runs\s+chosen/);
    expect(dry.stdout).toMatch(/saves [\d.e-]+ GPU-hours and \d\d:\d\d of stage run time \(2 stages reused, 1 run again\)/);
    expect(dry.stdout).toContain('dry run: nothing was submitted');
    expect(await jobCount()).toBe(count);

    const rerun = await cli('rerun', orig, '--spec', fixed, '--from', 'eval', '--watch');
    expect(rerun.code, rerun.stderr).toBe(0);
    const id = rerun.stdout.split('\n')[0]!.trim();
    expect(id).toMatch(/^job_/);
    expect(rerun.stderr).toContain(`rerun of ${orig} from eval`);
    const job = await jobOf(up().url, id);
    expect(job.state).toBe('succeeded');
    // The first two stages' processes did not run again: no attempt, no new marker line.
    expect([runs(dir, 'prep'), runs(dir, 'train'), runs(dir, 'eval')]).toEqual([1, 1, 2]);
    expect(
      job.stages.map((s: { name: string; state: string; attempts: unknown[]; reused: unknown }) => [s.name, s.state, s.attempts.length, s.reused !== null]),
    ).toEqual([
      ['prep', 'succeeded', 0, true],
      ['train', 'succeeded', 0, true],
      ['eval', 'succeeded', 1, false],
    ]);
    expect(job.stages[1].reused).toMatchObject({ jobId: orig, attemptId: before.stages[1].attempts[0].id, gpus: 1 });
    expect((await jobOf(up().url, orig)).stages.map((s: { attempts: unknown[] }) => s.attempts.length)).toEqual([1, 1, 1]);
    // The last stage read the original's committed outputs.
    const report = await cli('outputs', id, 'eval', 'report.txt');
    expect(report.stdout).toBe(`rows=42\ntrained-by=${orig}\n`);
    expect((await cli('outputs', id, 'train', 'model.bin')).stdout).toBe(report.stdout);

    // Linked both ways, and shown.
    const status = await cli('status', id);
    expect(status.stdout).toContain(`rerun of: ${orig} (from eval)`);
    expect(status.stdout).toMatch(new RegExp(`train\\s+succeeded\\s+-\\s+-\\s+reused\\s+-\\s+reused from ${orig}`));
    expect((await cli('status', orig)).stdout).toContain(`reruns:   ${id}`);
    expect(JSON.parse((await cli('status', orig, '--json')).stdout).reruns).toEqual([id]);
  }, 120_000);

  it('a fan-in DAG rerun from a middle stage reruns exactly the stages downstream of it', async () => {
    const dir = sharedDir('rerun-fanin-');
    const st = (name: string, needs: string[]) => ({
      name,
      needs,
      resources: { cpu: 0.5, memory: '128Mi' },
      command: [
        'sh',
        '-c',
        `${mark(name)}; { echo "${name}@$GANTRY_JOB_ID"; for n in ${needs.join(' ')}; do cat "$GANTRY_INPUT_DIR/$n/out.txt"; done; } > "$GANTRY_OUTPUT_DIR/out.txt"`,
      ],
    });
    const file = specFile(dir, 'dag.yaml', {
      name: 'fan-in',
      stages: [st('a', []), st('b', ['a']), st('c', ['a']), st('d', ['b', 'c']), st('e', ['d']), st('side', [])],
    });
    const orig = (await cli('submit', file, '--wait')).stdout.trim();
    expect((await jobOf(up().url, orig)).state).toBe('succeeded');
    const rerun = await cli('rerun', orig, '--from', 'b', '--wait');
    expect(rerun.code, rerun.stderr).toBe(0);
    const id = rerun.stdout.trim();
    const job = await jobOf(up().url, id);
    expect(job.stages.map((s: { name: string; attempts: unknown[]; reused: unknown }) => [s.name, s.reused ? 'reused' : `ran ${s.attempts.length}`])).toEqual([
      ['a', 'reused'],
      ['b', 'ran 1'],
      ['c', 'reused'],
      ['d', 'ran 1'],
      ['e', 'ran 1'],
      ['side', 'reused'],
    ]);
    expect(Object.fromEntries(['a', 'b', 'c', 'd', 'e', 'side'].map((s) => [s, runs(dir, s)]))).toEqual({ a: 1, b: 2, c: 1, d: 2, e: 2, side: 1 });
    // d joined the new b with the original's c; both read the original's a.
    expect((await cli('outputs', id, 'd', 'out.txt')).stdout).toBe(`d@${id}\nb@${id}\na@${orig}\nc@${orig}\na@${orig}\n`);
  }, 120_000);

  it('refuses an unknown stage, outputs gone, a job still running and a change to a reused stage, changing nothing', async () => {
    const dir = sharedDir('rerun-refused-');
    const spec = (prep: string) => ({
      name: 'refusals',
      stages: [
        { name: 'prep', resources: { cpu: 0.5, memory: '128Mi' }, command: ['sh', '-c', prep] },
        { name: 'eval', needs: ['prep'], retry: { maxAttempts: 1 }, resources: { cpu: 0.5, memory: '128Mi' }, command: ['false'] },
      ],
    });
    const file = specFile(dir, 'job.yaml', spec('echo kept > "$GANTRY_OUTPUT_DIR/kept.txt"'));
    const orig = (await cli('submit', file, '--wait')).stdout.trim();
    const unchanged = async () => ({
      jobs: await jobCount(),
      events: (await api(up().url, `/v1/jobs/${orig}/events`)).body.events.length,
      job: await jobOf(up().url, orig),
    });
    const was = await unchanged();

    const unknown = await cli('rerun', orig, '--from', 'evl');
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain(`/from/0: job ${orig} has no stage "evl" (did you mean "eval"?)`);

    const changed = specFile(dir, 'changed.yaml', spec('echo other > "$GANTRY_OUTPUT_DIR/kept.txt"'));
    const reusedChange = await cli('rerun', orig, '--spec', changed);
    expect(reusedChange.code).toBe(2);
    expect(reusedChange.stderr).toContain('/spec/stages/0/command: stage prep is reused');
    expect(reusedChange.stderr).toContain('--from prep');

    const notYaml = join(dir, 'bad.yaml');
    writeFileSync(notYaml, 'name: [unclosed\n');
    const bad = await cli('rerun', orig, '--spec', notYaml);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/bad\.yaml:\d+:\d+: /);

    // The reused stage's file is lost from the artifact store.
    const sha = was.job.stages[0].outputs[0].sha256 as string;
    const blob = join(up().dataDir, 'artifacts', 'blobs', 'sha256', sha.slice(0, 2), sha);
    const bytes = readFileSync(blob);
    unlinkSync(blob);
    const gone = await cli('rerun', orig);
    expect(gone.code).toBe(2);
    expect(gone.stderr).toMatch(
      new RegExp(`stage prep's committed outputs in job ${orig} are gone from the artifact store: kept.txt \\(sha256:${sha}\\) missing.*--from prep`),
    );
    writeFileSync(blob, bytes);
    expect(await unchanged()).toEqual(was);

    // Still running: refused; with --cancel-running, canceled and rerun in one step.
    const slow = specFile(dir, 'slow.yaml', { name: 'slow', stages: [{ name: 'wait', resources: { cpu: 0.5, memory: '128Mi' }, command: ['sleep', '60'] }] });
    const running = (await cli('submit', slow)).stdout.trim();
    await until(
      'running',
      () => jobOf(up().url, running),
      (j) => j.state === 'running',
    );
    const jobs = await jobCount();
    const busy = await cli('rerun', running);
    expect(busy.code).toBe(2);
    expect(busy.stderr).toMatch(/is running: a rerun starts from an ended job; .*--cancel-running/);
    expect(await jobCount()).toBe(jobs);
    expect((await jobOf(up().url, running)).state).toBe('running');
    const replaced = await cli('rerun', running, '--cancel-running', '--json');
    expect(replaced.code).toBe(0);
    const r = JSON.parse(replaced.stdout);
    expect(r.plan).toMatchObject({ canceled: true, from: ['wait'] });
    await ended(running);
    expect((await jobOf(up().url, running)).state).toBe('canceled');
    await cli('cancel', r.job.id);
    await ended(r.job.id);
    expect(readdirSync(dir).length).toBeGreaterThan(0);
  }, 120_000);
});
