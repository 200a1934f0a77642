import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SandboxArgvError, sandboxArgv, type SandboxAttempt } from './sandbox-argv.js';

// The argv alone, on any host: what it does when run is sandbox.test.ts's (root and bwrap).
describe('sandboxArgv', () => {
  let root = '';
  let devDir = '';
  /** A path under this test's directory. */
  const at = (p: string) => join(root, p);
  beforeAll(() => {
    root = realpathSync(mkdtempSync(join(tmpdir(), 'gantry-sandbox-argv-')));
    for (const d of ['d/a1/work', 'd/a1/output', 'd/a1/input', 'd/out', 'ckpt/job/train', 'p/q', 'w', 'w-out', 'in']) mkdirSync(at(d), { recursive: true });
    symlinkSync(at('ckpt/job'), at('ckpt-link'));
    // sandboxArgv only looks at which device files exist; plain files stand in for the nodes here.
    devDir = at('dev');
    mkdirSync(devDir);
    mkdirSync(join(devDir, 'nvidia-caps'));
    mkdirSync(join(devDir, 'infiniband'));
    for (const f of [
      'nvidia0',
      'nvidia1',
      'nvidia3',
      'nvidiactl',
      'nvidia-uvm',
      'nvidia-caps/nvidia-cap2',
      'nvidia-caps/nvidia-cap1',
      'nvidia-caps/nvidia-cap12',
      'nvidia-caps/nvidia-cap13',
    ])
      writeFileSync(join(devDir, f), '');
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  const attempt = (over: Partial<SandboxAttempt> = {}): SandboxAttempt => ({
    tool: { bwrap: '/usr/bin/bwrap', disableUserns: true },
    gpuIndices: [1],
    // A MIG device of GPU 1 whose capability files are cap12 and cap13 (mig-minors: gpu1/gi…).
    nvidiaCaps: [13, 12],
    dirs: {
      work: at('d/a1/work'),
      output: at('d/a1/output'),
      input: at('d/a1/input'),
      checkpoint: at('ckpt/job/train'),
      progressFile: at('d/a1/progress.jsonl'),
    },
    network: false,
    devDir,
    ...over,
  });

  it('isolates everything by default, binds its GPU and the control files that exist, and its own directories once each', () => {
    expect(sandboxArgv(attempt())).toEqual([
      '/usr/bin/bwrap',
      ...['--unshare-user', '--disable-userns', '--unshare-pid', '--unshare-ipc', '--unshare-net', '--cap-drop', 'ALL'],
      ...['--ro-bind', '/', '/', '--proc', '/proc', '--dev', '/dev', '--tmpfs', '/tmp', '--tmpfs', '/run'],
      ...['--dev-bind', join(devDir, 'nvidia1'), '/dev/nvidia1'],
      ...['--dev-bind', join(devDir, 'nvidiactl'), '/dev/nvidiactl'],
      ...['--dev-bind', join(devDir, 'nvidia-uvm'), '/dev/nvidia-uvm'],
      ...['--dev-bind', join(devDir, 'nvidia-caps/nvidia-cap12'), '/dev/nvidia-caps/nvidia-cap12'],
      ...['--dev-bind', join(devDir, 'nvidia-caps/nvidia-cap13'), '/dev/nvidia-caps/nvidia-cap13'],
      // The progress file's directory is the attempt's: work, output and input are bound with it.
      ...['--bind', at('ckpt/job/train'), at('ckpt/job/train'), '--bind', at('d/a1'), at('d/a1')],
      ...['--chdir', at('d/a1/work'), '--'],
    ]);
  });

  it('with the network: no network namespace, the host /run, and the RDMA devices', () => {
    const argv = sandboxArgv(attempt({ network: true }));
    expect(argv).not.toContain('--unshare-net');
    expect(argv.join(' ')).not.toContain('--tmpfs /run');
    expect(argv.join(' ')).toContain(`--dev-bind ${join(devDir, 'infiniband')} /dev/infiniband`);
  });

  it('binds each GPU once, in order, and none that this host has no device file for (a GPU declared with --gpus)', () => {
    const gpus = (a: string[]) => a.filter((x) => /^\/dev\/nvidia\d+$/.test(x));
    expect(gpus(sandboxArgv(attempt({ gpuIndices: [3, 0, 3, 7] })))).toEqual(['/dev/nvidia0', '/dev/nvidia3']);
    expect(gpus(sandboxArgv(attempt({ gpuIndices: [] })))).toEqual([]);
    // A host without NVIDIA's files at all: only bwrap's own /dev.
    expect(sandboxArgv(attempt({ devDir: join(devDir, 'none') }))).not.toContain('--dev-bind');
  });

  it("binds a MIG attempt's capability files only, a whole-GPU attempt's none, and every one where its device's are unknown", () => {
    const caps = (a: string[]) => a.filter((x) => x.startsWith('/dev/nvidia-caps/'));
    expect(caps(sandboxArgv(attempt()))).toEqual(['/dev/nvidia-caps/nvidia-cap12', '/dev/nvidia-caps/nvidia-cap13']);
    expect(caps(sandboxArgv(attempt({ nvidiaCaps: [] })))).toEqual([]);
    expect(caps(sandboxArgv(attempt({ nvidiaCaps: undefined })))).toEqual([]);
    // One the host has no file for (not made by nvidia-modprobe yet) is not bound.
    expect(caps(sandboxArgv(attempt({ nvidiaCaps: [12, 99] })))).toEqual(['/dev/nvidia-caps/nvidia-cap12']);
    expect(caps(sandboxArgv(attempt({ nvidiaCaps: 'all' })))).toEqual(['1', '12', '13', '2'].map((m) => `/dev/nvidia-caps/nvidia-cap${m}`));
    expect(() => sandboxArgv(attempt({ nvidiaCaps: [-1] }))).toThrow(/nvidiaCaps holds -1/);
  });

  it('binds a parent before what is inside it, and what is inside it not at all; a progress file elsewhere by its directory', () => {
    const binds = (a: string[]) => a.flatMap((x, i) => (x === '--bind' ? [a[i + 1]] : []));
    const dirs = { work: at('d/a1/work'), output: at('d/out'), input: at('d/a1/input'), checkpoint: at('d'), progressFile: at('p/q/progress.jsonl') };
    expect(binds(sandboxArgv(attempt({ dirs })))).toEqual([at('d'), at('p/q')]);
    const apart = { work: `${at('w')}/`, output: at('w-out'), input: at('w/../in'), checkpoint: null, progressFile: null };
    expect(binds(sandboxArgv(attempt({ dirs: apart })))).toEqual([at('in'), at('w'), at('w-out')]);
  });

  it('binds a directory reached through a symbolic link where it really is (bwrap cannot mount onto a link)', () => {
    const argv = sandboxArgv(attempt({ dirs: { ...attempt().dirs, checkpoint: at('ckpt-link/train') } }));
    expect(argv.join(' ')).toContain(`--bind ${at('ckpt/job/train')} ${at('ckpt/job/train')}`);
    expect(argv).not.toContain(at('ckpt-link/train'));
  });

  it('leaves out --disable-userns for a bwrap older than 0.8.0, which does not know it', () => {
    expect(sandboxArgv(attempt({ tool: { bwrap: '/opt/bwrap', disableUserns: false } }))).not.toContain('--disable-userns');
  });

  it('refuses a relative or missing directory, or a GPU index that is not one, naming it', () => {
    expect(() => sandboxArgv(attempt({ dirs: { ...attempt().dirs, checkpoint: at('ckpt/gone') } }))).toThrow(
      new SandboxArgvError(`sandbox: checkpoint "${at('ckpt/gone')}": no such directory`),
    );
    expect(() => sandboxArgv(attempt({ dirs: { ...attempt().dirs, output: 'out' } }))).toThrow(
      new SandboxArgvError('sandbox: output "out" is not an absolute path'),
    );
    expect(() => sandboxArgv(attempt({ dirs: { ...attempt().dirs, progressFile: 'p.jsonl' } }))).toThrow(/the progress file "p.jsonl"/);
    expect(() => sandboxArgv(attempt({ gpuIndices: [0, -1] }))).toThrow(
      new SandboxArgvError('sandbox: gpuIndices holds -1, not a GPU index (a whole number from 0)'),
    );
    expect(() => sandboxArgv(attempt({ gpuIndices: [1.5] }))).toThrow(SandboxArgvError);
  });
});
