/**
 * Stages as users of their own (docs/containment.md, "The unprivileged user"), through real agents
 * (root) against a real control plane, laid out as `gantry up` lays them out: the server's data
 * directory (0711) holds its admin token (0600) and its agents' directories, `agents/<name>/`. A
 * stage runs as a uid of the range (not 0, no capabilities, no new privileges), cannot read the
 * agent's credential, the admin token or another running attempt's work/; two at once get two
 * uids; `--run-as` runs them as that user; an output that is a link to the credential is not
 * uploaded, and the progress file cannot be made one. Needs root (it switches users), and says so
 * when it skips.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { AttemptView, JobView } from '../../src/api/contract/job-view.js';
import { Agent } from '../../src/agent/agent.js';
import type { DetectedMachine } from '../../src/agent/machine/machine-detect.js';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { adminTokenFile, ensureTokenFile } from '../../src/server/token-file.js';
import { bearer, makeToken } from '../support/tokens.js';

const root = process.getuid?.() === 0;
const why = root ? '' : 'not root: an agent that is not root runs stages as itself';
if (why) console.warn(`unprivileged-stages.test.ts skipped: ${why}`);

const RANGE: [number, number] = [61184 + 700, 61184 + 739];

let serverDir: string;
let shared: string;
let lockDir: string;
let cp: ControlPlane;
let admin: string;
let join_: string;
const agents: Agent[] = [];
const lines: string[] = [];

beforeAll(async () => {
  if (why) return;
  serverDir = mkdtempSync(join(tmpdir(), 'gantry-users-'));
  // As `gantry up` leaves it (docs/containment.md): others pass through to the agents' attempts.
  chmodSync(serverDir, 0o711);
  // Where the test's stages meet (world-writable, sticky, as /tmp).
  shared = mkdtempSync(join(tmpdir(), 'gantry-users-shared-'));
  chmodSync(shared, 0o1777);
  lockDir = mkdtempSync(join(tmpdir(), 'gantry-users-locks-'));
  cp = await createControlPlane(defaultServerConfig({ dataDir: serverDir, port: 0, heartbeatMs: 300, rateLimitPerSecond: 0 }));
  admin = (await ensureTokenFile(cp.store, adminTokenFile(serverDir), 'admin', 'admin (test)', Date.now())).token;
  join_ = await makeToken(cp.store, 'join');
  await cp.start();
});

afterEach(async () => {
  if (why) return;
  // Whatever a failed test left waiting (a stage left running by a stopped agent included) ends now.
  for (const f of ['done', 'restart-go']) writeFileSync(join(shared, f), '');
  for (const a of agents.splice(0)) await a.stop({ killRunning: true });
  for (const f of readdirSync(shared)) rmSync(join(shared, f), { force: true });
});

afterAll(async () => {
  if (why) return;
  await cp.stop();
  for (const d of [serverDir, shared, lockDir]) rmSync(d, { recursive: true, force: true });
});

async function startAgent(name: string, containment: Record<string, unknown> = {}): Promise<Agent> {
  const machine: DetectedMachine = { name, cpuMillis: 4000, memoryBytes: 4 * 2 ** 30, gpus: [], gpusDeclared: false, region: null, labels: { host: name } };
  const agent = new Agent({
    joinToken: join_,
    serverUrl: cp.url,
    dataDir: join(serverDir, 'agents', name),
    machine,
    log: (l) => lines.push(l),
    stopDeliverMs: 300,
    containment: { uidRange: RANGE, uidLockDir: lockDir, ...containment },
  });
  agents.push(agent);
  await agent.start();
  return agent;
}

async function submit(spec: unknown): Promise<string> {
  const r = await cp.app.inject({
    method: 'POST',
    url: '/v1/jobs',
    headers: { ...bearer(admin), 'content-type': 'application/json' },
    payload: JSON.stringify(spec),
  });
  expect(r.statusCode, r.body).toBe(201);
  return r.json<{ id: string }>().id;
}

async function finished(jobId: string, ms = 30_000): Promise<JobView> {
  const deadline = Date.now() + ms;
  for (;;) {
    const job = (await cp.app.inject({ method: 'GET', url: `/v1/jobs/${jobId}`, headers: bearer(admin) })).json<JobView>();
    if (['succeeded', 'failed', 'canceled'].includes(job.state)) return job;
    if (Date.now() > deadline) throw new Error(`job ${jobId} still ${job.state} after ${ms} ms; agent said:\n${lines.join('\n')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The agent settles an attempt (closes its directory, gives its uid back) just after the server has its outcome. */
async function eventually(what: string, cond: () => boolean): Promise<void> {
  for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 25));
  expect(cond(), what).toBe(true);
}

const attemptOf = (job: JobView, stage: string): AttemptView => job.stages.find((s) => s.name === stage)!.attempts.at(-1)!;
const attemptDir = (machine: string, a: AttemptView) => join(serverDir, 'agents', machine, 'attempts', a.id);
/** What the stage printed, as the server stored it (the agent removes its files once shipped). */
const stdoutOf = async (job: JobView, stage: string) => {
  const r = await cp.app.inject({ method: 'GET', url: `/v1/jobs/${job.id}/stages/${stage}/logs`, headers: bearer(admin) });
  expect(r.statusCode, r.body).toBe(200);
  return r.body;
};
/** On machine `host` only: the machines of earlier tests stay registered (their leases run out later). */
const stage = (host: string, name: string, script: string, env: Record<string, string> = {}) => ({
  name,
  command: ['sh', '-c', script],
  env,
  resources: { cpu: 1, memory: '64Mi' },
  placement: { labels: { host } },
  retry: { maxAttempts: 1 },
});

describe.skipIf(why !== '')('stages of a root agent', () => {
  it('run as uids of their own, without privileges, and cannot read the agent’s, the server’s or each other’s files', async () => {
    const agent = await startAgent('users-a');
    const cred = join(serverDir, 'agents', 'users-a', 'credential');
    expect(existsSync(cred)).toBe(true);
    const env = { CRED: cred, ADMIN: adminTokenFile(serverDir), SHARED: shared };
    const holder = [
      'echo "holder-secret" > mine.txt',
      'id -u > "$SHARED/holder-uid"',
      'echo "$PWD" > "$SHARED/holder-work.tmp" && mv "$SHARED/holder-work.tmp" "$SHARED/holder-work"',
      'while [ ! -e "$SHARED/done" ]; do sleep 0.05; done',
    ].join('\n');
    const prober = [
      'echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"',
      'grep -E "^(CapEff|NoNewPrivs)" /proc/self/status',
      'echo "home=$HOME user=$USER pwd=$PWD"',
      'cat "$CRED" 2>&1 | sed "s/^/cred: /"',
      'cat "$ADMIN" 2>&1 | sed "s/^/admin: /"',
      'while [ ! -s "$SHARED/holder-work" ]; do sleep 0.05; done',
      'other=$(cat "$SHARED/holder-work")',
      'ls "$other" 2>&1 | sed "s/^/other-list: /"',
      'cat "$other/mine.txt" 2>&1 | sed "s/^/other-file: /"',
      'touch "$SHARED/done"',
    ].join('\n');
    const job = await finished(await submit({ name: 'users', stages: [stage('users-a', 'holder', holder, env), stage('users-a', 'prober', prober, env)] }));
    expect(job.state, JSON.stringify(job.stages.map((s) => s.attempts))).toBe('succeeded');
    const p = attemptOf(job, 'prober');
    const out = await stdoutOf(job, 'prober');
    const uid = Number(/^uid=(\d+) gid=(\d+) groups=(\d+)$/m.exec(out)?.[1]);
    expect(uid).toBeGreaterThanOrEqual(RANGE[0]);
    expect(uid).toBeLessThanOrEqual(RANGE[1]);
    expect(out).toContain(`uid=${uid} gid=${uid} groups=${uid}\n`);
    expect(out).toContain('CapEff:\t0000000000000000');
    expect(out).toContain('NoNewPrivs:\t1');
    const work = join(attemptDir('users-a', p), 'work');
    expect(out).toContain(`home=${work} user=gantry-${uid} pwd=${work}\n`);
    expect(out).toMatch(/^cred: cat: .*credential: Permission denied$/m);
    expect(out).toMatch(/^admin: cat: .*admin\.token: Permission denied$/m);
    expect(out).toMatch(/^other-list: ls: cannot open directory .*: Permission denied$/m);
    expect(out).toMatch(/^other-file: cat: .*mine\.txt: Permission denied$/m);
    expect(out).not.toContain('holder-secret');
    expect(out).not.toContain(admin);
    // Two attempts at once: two uids.
    const holderUid = Number(readFileSync(join(shared, 'holder-uid'), 'utf8'));
    expect(holderUid).toBeGreaterThanOrEqual(RANGE[0]);
    expect(holderUid).not.toBe(uid);
    // What each left: its work/ its own, its directory closed now that it is settled, its uid
    // released to the agent (held for its next attempts, naming none), given back when it stops.
    const h = attemptOf(job, 'holder');
    const locks = join(lockDir, readdirSync(lockDir)[0]!);
    const holders = () => readdirSync(locks).map((f) => JSON.parse(readFileSync(join(locks, f), 'utf8')) as { attemptId: string; dataDir: string });
    await eventually('both uids released to the agent', () => holders().length === 2 && holders().every((x) => x.attemptId === ''));
    expect(holders().map((x) => x.dataDir)).toEqual([join(serverDir, 'agents', 'users-a'), join(serverDir, 'agents', 'users-a')]);
    expect(statSync(join(attemptDir('users-a', h), 'work')).uid).toBe(holderUid);
    expect(statSync(attemptDir('users-a', h)).mode & 0o777).toBe(0o700);
    expect(statSync(join(serverDir, 'agents', 'users-a', 'attempts')).mode & 0o777).toBe(0o711);
    await agent.stop();
    expect(readdirSync(locks)).toEqual([]);
  });

  it('an output that is a link to the credential is refused, naming it; the progress file cannot be made one', async () => {
    await startAgent('users-b');
    const cred = join(serverDir, 'agents', 'users-b', 'credential');
    const script = [
      'ln -sf "$CRED" "$GANTRY_PROGRESS_FILE" 2>&1 | sed "s/^/progress-link: /"',
      'echo \'{"progress": 0.5, "message": "halfway"}\' >> "$GANTRY_PROGRESS_FILE"',
      'sleep 2.5',
      'echo fine > "$GANTRY_OUTPUT_DIR/fine.txt"',
      'ln -s "$CRED" "$GANTRY_OUTPUT_DIR/cred"',
    ].join('\n');
    const job = await finished(await submit({ name: 'links', stages: [stage('users-b', 'leak', script, { CRED: cred })] }));
    const a = attemptOf(job, 'leak');
    expect(a.endKind).toBe('outputs-failed');
    expect(a.reason).toBe(
      `output upload failed: output "cred" is a symbolic link (to "${cred}"): only regular files the stage wrote are uploaded (copy a file into GANTRY_OUTPUT_DIR rather than link to it) (the process exited 0)`,
    );
    // Refused before any upload: not even the file beside it went.
    expect(a.outputs ?? []).toEqual([]);
    const artifacts = join(serverDir, 'artifacts');
    const stored = existsSync(artifacts) ? execFileSync('find', [artifacts, '-type', 'f'], { encoding: 'utf8' }) : '';
    for (const f of stored.split('\n').filter(Boolean)) expect(readFileSync(f, 'utf8')).not.toContain(readFileSync(cred, 'utf8').trim());
    // The progress file is the agent's to name: the stage writes it, cannot swap it for a link.
    expect(await stdoutOf(job, 'leak')).toMatch(/^progress-link: ln: .*Permission denied$/m);
    expect(a.progress).toMatchObject({ fraction: 0.5, message: 'halfway' });
  });

  it('--run-as runs every stage as that user', async () => {
    await startAgent('users-c', { runAs: 'nobody' });
    const job = await finished(await submit({ name: 'run-as', stages: [stage('users-c', 'who', 'echo "$(id -u) $(id -g) $USER $HOME"; touch "$HOME/mine"')] }));
    expect(job.state).toBe('succeeded');
    const a = attemptOf(job, 'who');
    const nobody = readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('nobody:'))!
      .split(':');
    expect(await stdoutOf(job, 'who')).toBe(`${nobody[2]} ${nobody[3]} nobody ${join(attemptDir('users-c', a), 'work')}\n`);
    expect(statSync(join(attemptDir('users-c', a), 'work', 'mine')).uid).toBe(Number(nobody[2]));
  });

  it('a stage still running when its agent restarts keeps its uid; the rest of the previous run’s go back', async () => {
    const first = await startAgent('users-d');
    const script = ['id -u > "$SHARED/restart-uid"', 'while [ ! -e "$SHARED/restart-go" ]; do sleep 0.05; done', 'id -u'].join('\n');
    const jobId = await submit({ name: 'restart', stages: [stage('users-d', 'long', script, { SHARED: shared })] });
    const uidFile = join(shared, 'restart-uid');
    // The shell creates the file (`>`) before `id -u` writes to it: wait for the whole line, not
    // the file (an empty read is Number('') = 0; fresh-clone CI, once).
    const written = () => existsSync(uidFile) && readFileSync(uidFile, 'utf8').endsWith('\n');
    for (let i = 0; i < 300 && !written(); i++) await new Promise((r) => setTimeout(r, 50));
    const uid = Number(readFileSync(uidFile, 'utf8'));
    const locks = join(lockDir, readdirSync(lockDir)[0]!);
    expect(readdirSync(locks)).toContain(String(uid));
    await first.stop({ killRunning: false });
    agents.splice(agents.indexOf(first), 1);
    // And one of this agent's from a run that died without giving it back.
    const stale = RANGE[1];
    execFileSync('sh', [
      '-c',
      `printf '%s' '${JSON.stringify({ dataDir: join(serverDir, 'agents', 'users-d'), attemptId: 'att_gone', pid: 1 })}' > ${join(locks, String(stale))}`,
    ]);
    await startAgent('users-d');
    expect(readdirSync(locks).sort()).toEqual([String(uid)]);
    execFileSync('touch', [join(shared, 'restart-go')]);
    const job = await finished(jobId);
    expect(job.state).toBe('succeeded');
    expect(await stdoutOf(job, 'long')).toBe(`${uid}\n`);
    await eventually('its uid given back once settled', () => readdirSync(locks).length === 0);
  });
});
