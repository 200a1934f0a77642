import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { REPO } from '../../test/support/gantry-process.js';

/**
 * examples/autoscale/aws-ec2.sh, the example command provider: untested against AWS (no access
 * from here), so what can be checked is checked: its syntax, and what it does with a stand-in `aws`
 * on the PATH that answers as EC2 would (one name with a live instance, one without).
 */
const SCRIPT = join(REPO, 'examples/autoscale/aws-ec2.sh');
// The script needs jq (its header says so); where there is none, only its syntax is checked, and the run says so.
const hasJq = spawnSync('jq', ['--version']).status === 0;
if (!hasJq) console.warn('aws-ec2.sh example: jq not found, its runs against a stand-in aws are skipped');
const dir = mkdtempSync(join(tmpdir(), 'gantry-aws-example-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const FAKE_AWS = `#!/usr/bin/env bash
printf '%s\\n' "aws $*" >> "${dir}/calls"
for a in "$@"; do case "$a" in file://*) cp "\${a#file://}" "${dir}/user-data" ;; esac; done
case "$*" in
  *describe-instances*Values=h100-1\\ *) echo '["i-live"]' ;;
  *describe-instances*) echo '[]' ;;
  *run-instances*) echo '"i-new"' ;;
  *terminate-instances*) echo '{"TerminatingInstances":[]}' ;;
esac
`;

function run(request: unknown): { status: number | null; stdout: string; stderr: string } {
  writeFileSync(join(dir, 'aws'), FAKE_AWS);
  chmodSync(join(dir, 'aws'), 0o755);
  const r = spawnSync(SCRIPT, [], {
    input: JSON.stringify(request),
    env: { ...process.env, PATH: `${dir}:${process.env.PATH}`, GANTRY_EC2_AMI: 'ami-0test' },
    encoding: 'utf8',
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('examples/autoscale/aws-ec2.sh', () => {
  it('is valid bash (bash -n)', () => {
    expect(() => execFileSync('bash', ['-n', SCRIPT], { stdio: 'pipe' })).not.toThrow();
  });

  it.skipIf(!hasJq)('starts only the name with no live instance, tagged, its token in user-data only, and answers JSON alone on stdout', () => {
    const r = run({
      action: 'start',
      pool: 'h100',
      template: { cpu: '32', memory: '256Gi', gpus: { type: 'h100', count: 8, memory: '80Gi' }, region: 'us-east', labels: { disk: 'ssd' } },
      count: 2,
      names: ['h100-1', 'h100-2'],
      server: 'https://gantry.example:7070',
      joinToken: 'gjt_example_secret',
    });
    expect(r.stderr).not.toContain('gjt_example_secret');
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({
      machines: [
        { name: 'h100-1', id: 'i-live' },
        { name: 'h100-2', id: 'i-new' },
      ],
    });
    const calls = readFileSync(join(dir, 'calls'), 'utf8');
    const runs = calls.split('\n').filter((l) => l.includes('run-instances'));
    expect(runs).toHaveLength(1);
    expect(runs[0]).toContain('--instance-type p5.48xlarge');
    expect(runs[0]).toContain('Key=Name,Value=h100-2');
    expect(calls).not.toContain('gjt_example_secret');
    const userData = readFileSync(join(dir, 'user-data'), 'utf8');
    expect(userData).toContain("GANTRY_JOIN_TOKEN=%s\\n' 'gjt_example_secret'");
    expect(userData).toContain("exec gantry 'agent' '--server' 'https://gantry.example:7070' '--name' 'h100-2'");
    expect(() => execFileSync('bash', ['-n', join(dir, 'user-data')], { stdio: 'pipe' })).not.toThrow();
  });

  it.skipIf(!hasJq)('stops by terminating what carries the name, and counts a name with nothing as stopped', () => {
    rmSync(join(dir, 'calls'), { force: true });
    const r = run({ action: 'stop', pool: 'h100', machines: [{ name: 'h100-1', id: 'i-live' }, { name: 'h100-3' }] });
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ stopped: ['h100-1', 'h100-3'] });
    const terminations = readFileSync(join(dir, 'calls'), 'utf8')
      .split('\n')
      .filter((l) => l.includes('terminate-instances'));
    expect(terminations).toEqual(['aws --output json ec2 terminate-instances --instance-ids i-live']);
  });
});
