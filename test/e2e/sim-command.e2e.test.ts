import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_SHARE_POLICY, SHARE_POLICIES } from '../../src/scheduler/share-policies.js';
import { CLI, gantry, REPO } from '../support/gantry-process.js';
import { syntheticTraceDir } from '../support/synthetic-trace.js';
import { allElements, parseXml } from '../support/xml-tree.js';

/**
 * `gantry sim` as an operator runs it: the built CLI on a small trace in the trace's format
 * (test/support/synthetic-trace.ts), so it runs without ../shared. The figures themselves are
 * src/sim/share-experiment.test.ts's; this is the command around them.
 */
const trace = syntheticTraceDir();
const out = mkdtempSync(join(tmpdir(), 'gantry-sim-out-'));
afterAll(() => {
  rmSync(trace, { recursive: true, force: true });
  rmSync(out, { recursive: true, force: true });
});

describe('gantry sim', () => {
  it('prints the table per pod list, progress on stderr, and writes the JSON and a chart per list with --out', async () => {
    const r = await gantry(['sim', '--trace', trace, '--policy', 'default,best-fit', '--seeds', '42-44', '--jobs', '2', '--out', out]);
    expect(r.stderr).toContain('gantry sim: default fgd: 3 seeds done');
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("openb_pod_list_default.csv: unallocated GPU % at an arrived workload of x % of the cluster's GPUs (mean of seeds 42–44");
    expect(r.stdout).toContain('openb_pod_list_gpuspec33.csv: unallocated GPU %');
    expect(r.stdout).toMatch(/fgd \(default\) ~ paper FGD( +\d+\.\d\d){5}\n/);
    expect(r.stdout).toMatch(/best-fit ~ paper BestFit( +\d+\.\d\d){5}\n/);
    expect(r.stdout).toContain('24 GPU machines, 192 GPUs; 4 policy × list runs of 3 seeds');
    expect(r.stdout).toContain(`written: ${join(out, 'sim.json')}, ${join(out, 'sim-default.svg')}, ${join(out, 'sim-gpuspec33.svg')}`);

    const json = JSON.parse(readFileSync(join(out, 'sim.json'), 'utf8'));
    expect(json.runs.map((x: { list: string; policy: string }) => `${x.list} ${x.policy}`)).toEqual([
      'default fgd',
      'default best-fit',
      'gpuspec33 fgd',
      'gpuspec33 best-fit',
    ]);
    for (const list of ['default', 'gpuspec33']) {
      const svg = parseXml(readFileSync(join(out, `sim-${list}.svg`), 'utf8'));
      expect(svg.name).toBe('svg');
      expect(
        allElements(svg)
          .filter((e) => e.attrs.class === 'series')
          .map((e) => e.attrs['data-policy']),
      ).toEqual(['fgd', 'best-fit']);
    }
    // The table's figures are the JSON's.
    const fgd = json.runs[0].unallocated.map((u: number) => u.toFixed(2)).join(' +');
    expect(r.stdout).toMatch(new RegExp(`fgd \\(default\\) ~ paper FGD +${fgd}\\n`));
  });

  it('on a terminal, redraws one progress line and clears it before the table', async () => {
    // `script` gives the CLI a terminal (stderr included); its output is the terminal's.
    const r = await new Promise<{ code: number | null; out: string }>((resolve) => {
      const cmd = `${process.execPath} ${CLI} sim --trace ${trace} --lists default --policy best-fit --seeds 1-4 --jobs 1`;
      const p = spawn('script', ['-qec', cmd, '/dev/null'], { cwd: REPO, env: { ...process.env, NO_COLOR: '1' } });
      let out = '';
      p.stdout.on('data', (d) => (out += d));
      p.on('close', (code) => resolve({ code, out }));
    });
    expect(r.code).toBe(0);
    const clear = '\r\u001b[2K';
    expect(r.out).toContain(`${clear}gantry sim [########################] 4/4 replays · default best-fit seed 4`);
    // The last redraw is cleared, and the table starts on the cleared line; no plain progress lines.
    expect(r.out).toContain(`${clear}openb_pod_list_default.csv: unallocated GPU %`);
    expect(r.out).not.toContain('seeds done');
  });

  it('--json prints the figures alone on stdout, the same as in-process (--jobs 1)', async () => {
    const r = await gantry(['sim', '--trace', trace, '--policy', 'packing', '--seeds', '7', '--lists', 'gpuspec33', '--json', '--jobs', '1']);
    expect(r.code).toBe(0);
    const json = JSON.parse(r.stdout);
    expect(json).toMatchObject({ seeds: [7], policies: ['packing'], machines: 24, gpus: 192, processes: 0 });
    expect(json.lists.map((l: { list: string }) => l.list)).toEqual(['gpuspec33']);
    expect(json.runs[0].perSeed[0].curve).toHaveLength(81);
    expect(r.stderr).toContain('gantry sim: gpuspec33 packing: 1 seed done');
  });

  it.each([
    [['--policy', 'fgd,worst-fit'], '--policy: unknown policy "worst-fit"'],
    [['--lists', 'nope'], '--lists: unknown pod list "nope" (known: default, gpuspec33)'],
    [['--seeds', '51-42'], '--seeds: "51-42" is an empty range (51 > 42)'],
    [['--seeds', 'x'], '--seeds: "x" is not a seed'],
    [['--jobs', '0'], '--jobs: "0" is not a number of processes'],
  ])('exits 2 on %j, naming the flag, before any replay', async (args, message) => {
    const r = await gantry(['sim', '--trace', trace, ...args]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`gantry: ${message}`);
    expect(r.stdout).toBe('');
  });

  it('exits 2 on a trace directory that is missing, lacks a file, or holds a malformed one', async () => {
    const missing = await gantry(['sim', '--trace', join(out, 'nowhere')]);
    expect([missing.code, missing.stderr.trim()]).toEqual([2, `gantry: --trace: ${join(out, 'nowhere')} is not a directory`]);
    const partial = await gantry(['sim', '--trace', out]);
    expect(partial.code).toBe(2);
    expect(partial.stderr).toContain(`--trace: ${out} has no openb_node_list_all_node.csv`);
    const bad = syntheticTraceDir();
    try {
      writeFileSync(join(bad, 'openb_pod_list_default.csv'), 'name,cpu_milli\npod-1,x\n');
      const r = await gantry(['sim', '--trace', bad, '--lists', 'default']);
      expect(r.code).toBe(2);
      expect(r.stderr).toContain(`--trace: ${join(bad, 'openb_pod_list_default.csv')}: pod list: missing column "memory_mib"`);
    } finally {
      rmSync(bad, { recursive: true, force: true });
    }
  });

  it('exits 2 on an unknown option; --help lists the policies and the exit codes', async () => {
    const r = await gantry(['sim', '--polcy', 'fgd']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("unknown option '--polcy'");
    const help = await gantry(['sim', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('Exit codes: 0 done, 1 a replay failed');
    expect(help.stdout).toContain('2 a bad flag or trace');
    // Every policy share-policies.ts exports, as it exports them: a new one appears by itself.
    expect(help.stdout).toContain(`Policies: default (= ${DEFAULT_SHARE_POLICY}), ${SHARE_POLICIES.join(', ')}.`);
    const top = await gantry(['--help']);
    expect(top.stdout).toMatch(/\n {2}sim \[options\] +Replay the Alibaba GPU trace/);
  });

  it('without --trace reads ../shared/traces/alibaba-gpu-2023 from the cwd, and says to pass --trace when it is not there', async () => {
    // gantry() runs in the repository: the real trace is there when ../shared is.
    const shared = join(REPO, '../shared/traces/alibaba-gpu-2023');
    const r = await gantry(['sim', '--policy', 'best-fit', '--seeds', '42', '--lists', 'default', '--jobs', '1', '--json']);
    if (existsSync(join(shared, 'openb_node_list_all_node.csv'))) {
      expect(r.code).toBe(0);
      expect(JSON.parse(r.stdout)).toMatchObject({ trace: shared, machines: 1213, gpus: 6212 });
    } else {
      expect(r.code).toBe(2);
      expect(r.stderr).toContain('--trace: no trace directory at ../shared/traces/alibaba-gpu-2023');
      expect(r.stderr).toContain('pass --trace DIR');
    }
  });
});
