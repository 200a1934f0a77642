import { chmodSync, cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ValidationError } from '../spec/validation-error.js';
import { DEFAULT_SHARE_POLICY, SHARE_POLICIES } from '../scheduler/share-policies.js';
import { syntheticTraceDir } from '../../test/support/synthetic-trace.js';
import { ALIBABA_TRACE_RELATIVE_DIR } from './alibaba-trace.js';
import { MAX_SEEDS, parseLists, parsePolicies, parseSeeds, parseSimArgs } from './sim-args.js';

/** The flag and message a ValidationError names, or a failure when none is thrown. */
function problemOf(fn: () => unknown): { path: string; message: string } {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ValidationError);
    return (err as ValidationError).issues[0]!;
  }
  throw new Error('no ValidationError thrown');
}

describe('parseSeeds', () => {
  it('reads ranges, lists and both, in the order given', () => {
    expect(parseSeeds('42-51')).toEqual([42, 43, 44, 45, 46, 47, 48, 49, 50, 51]);
    expect(parseSeeds('42,43')).toEqual([42, 43]);
    expect(parseSeeds('7, 1-3')).toEqual([7, 1, 2, 3]);
    expect(parseSeeds('0')).toEqual([0]);
  });

  it.each([
    ['', /empty item/],
    ['42,', /empty item/],
    ['x', /"x" is not a seed/],
    ['-1', /"-1" is not a seed/],
    ['1.5', /"1.5" is not a seed/],
    ['1-2-3', /not a seed/],
    ['51-42', /empty range \(51 > 42\)/],
    ['42,42', /seed 42 is given twice/],
    ['40-45,44', /seed 44 is given twice/],
    [`1-${MAX_SEEDS + 1}`, new RegExp(`more than ${MAX_SEEDS} seeds`)],
  ])('refuses %j, naming --seeds', (text, why) => {
    const p = problemOf(() => parseSeeds(text));
    expect(p.path).toBe('--seeds');
    expect(p.message).toMatch(why);
  });
});

describe('parsePolicies', () => {
  it(`takes "default" for the default policy (${DEFAULT_SHARE_POLICY}) and every name share-policies.ts exports, each once`, () => {
    expect(parsePolicies('default,best-fit')).toEqual([DEFAULT_SHARE_POLICY, 'best-fit']);
    expect(parsePolicies(`default,${DEFAULT_SHARE_POLICY}`)).toEqual([DEFAULT_SHARE_POLICY]);
    expect(parsePolicies(SHARE_POLICIES.join(','))).toEqual([...SHARE_POLICIES]);
  });

  it('refuses an unknown one, naming --policy and the known ones', () => {
    const p = problemOf(() => parsePolicies('fgd,best_fit'));
    expect(p.path).toBe('--policy');
    expect(p.message).toContain('unknown policy "best_fit"');
    for (const name of SHARE_POLICIES) expect(p.message).toContain(name);
  });
});

describe('parseLists', () => {
  it('takes the pod lists of the trace', () => {
    expect(parseLists('gpuspec33,default')).toEqual(['gpuspec33', 'default']);
  });

  it('refuses an unknown one, naming --lists', () => {
    const p = problemOf(() => parseLists('default,gpuspec34'));
    expect(p).toEqual({ path: '--lists', message: 'unknown pod list "gpuspec34" (known: default, gpuspec33)' });
  });
});

describe('parseSimArgs', () => {
  const made: string[] = [];
  const tmp = () => {
    const d = mkdtempSync(join(tmpdir(), 'gantry-sim-args-'));
    made.push(d);
    return d;
  };
  afterAll(() => {
    for (const d of made) rmSync(d, { recursive: true, force: true });
  });

  it('defaults: the trace beside the cwd, every policy, seeds 42–51, both lists, one process per core', () => {
    const cwd = join(tmp(), 'repo');
    mkdirSync(cwd);
    const trace = join(cwd, ALIBABA_TRACE_RELATIVE_DIR);
    const synthetic = syntheticTraceDir();
    made.push(synthetic);
    cpSync(synthetic, trace, { recursive: true });
    expect(parseSimArgs({}, cwd, 3)).toEqual({
      traceDir: trace,
      policies: [...SHARE_POLICIES],
      seeds: [42, 43, 44, 45, 46, 47, 48, 49, 50, 51],
      lists: ['default', 'gpuspec33'],
      out: null,
      json: false,
      jobs: 3,
    });
  });

  it('without --trace and no trace beside the cwd: says to pass --trace', () => {
    // A cwd one level inside a fresh directory: its ../shared is that directory's, which has none
    // (tmp() itself would look at <tmpdir>/shared, which a machine may have).
    const cwd = join(tmp(), 'cwd');
    mkdirSync(cwd);
    const p = problemOf(() => parseSimArgs({}, cwd, 2));
    expect(p.path).toBe('--trace');
    expect(p.message).toContain(`no trace directory at ${ALIBABA_TRACE_RELATIVE_DIR}`);
    expect(p.message).toContain('pass --trace DIR');
  });

  it('refuses a --trace that is not a directory, or lacks a file the lists need (only those)', () => {
    const d = tmp();
    expect(problemOf(() => parseSimArgs({ trace: join(d, 'nope') }, d, 2))).toEqual({ path: '--trace', message: `${join(d, 'nope')} is not a directory` });
    writeFileSync(join(d, 'openb_node_list_all_node.csv'), 'sn,cpu_milli,memory_mib,gpu,model\n');
    writeFileSync(join(d, 'openb_pod_list_default.csv'), 'x\n');
    expect(problemOf(() => parseSimArgs({ trace: d }, d, 2)).message).toContain('has no openb_pod_list_gpuspec33.csv');
    expect(parseSimArgs({ trace: d, lists: 'default' }, '/', 2).traceDir).toBe(d);
  });

  it('resolves --trace and --out from the cwd; refuses --out on a file, a bad --jobs', () => {
    const d = tmp();
    const trace = syntheticTraceDir();
    made.push(trace);
    chmodSync(d, 0o755);
    const args = parseSimArgs({ trace, out: 'charts', json: true, jobs: '4', seeds: '1,2', policy: 'default' }, d, 2);
    expect(args).toMatchObject({ traceDir: trace, out: join(d, 'charts'), json: true, jobs: 4, seeds: [1, 2], policies: [DEFAULT_SHARE_POLICY] });
    writeFileSync(join(d, 'file'), '');
    expect(problemOf(() => parseSimArgs({ trace, out: 'file' }, d, 2))).toEqual({ path: '--out', message: `${join(d, 'file')} exists and is not a directory` });
    for (const jobs of ['0', 'two', '1.5', '1000']) expect(problemOf(() => parseSimArgs({ trace, jobs }, d, 2)).path).toBe('--jobs');
  });
});
