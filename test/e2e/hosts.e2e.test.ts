import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes, randomInt } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FAST_TIMINGS } from '../faults/fault-harness.js';
import { CLI, REPO, until } from '../support/gantry-process.js';

/**
 * Agents on other hosts, for real: a server and three agents, each in a network namespace of its
 * own with its own address, joined by a bridge in a fifth namespace, all made here and torn down
 * after. The test itself reaches the server through a sixth link from its own namespace. TLS
 * with a certificate for the server's address, and join tokens, as off-host agents use them.
 *
 * One agent's link is cut while its stage runs: the server finds the machine lost and runs the
 * stage elsewhere. When the link comes back, that agent is told to kill its stale attempt, and its
 * late report of it is refused.
 */
function cannotRun(): string | null {
  if (process.platform !== 'linux') return 'network namespaces are Linux only';
  if (process.getuid?.() !== 0) return 'creating network namespaces needs root';
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
  } catch {
    return 'no openssl to make a certificate with';
  }
  const probe = `gprobe${randomBytes(3).toString('hex')}`;
  try {
    execFileSync('ip', ['netns', 'add', probe], { stdio: 'ignore' });
    execFileSync('ip', ['netns', 'del', probe], { stdio: 'ignore' });
    return null;
  } catch {
    return 'cannot create network namespaces here (ip netns add failed)';
  }
}
const why = cannotRun();
if (why) console.warn(`hosts.e2e.test.ts skipped: ${why}`);

const id = randomBytes(2).toString('hex');
const net = `10.${randomInt(100, 250)}.${randomInt(0, 250)}`;
const SWITCH = `gsw${id}`;
const hosts = { server: `gsrv${id}`, a1: `ga1${id}`, a2: `ga2${id}`, a3: `ga3${id}` } as const;
const address = { server: `${net}.1`, a1: `${net}.11`, a2: `${net}.12`, a3: `${net}.13`, test: `${net}.254` };
const PORT = 7443;

const ip = (...args: string[]) => execFileSync('ip', args, { stdio: 'pipe' });
/** The bridge end of a host's link (in the switch namespace): setting it down cuts the host off. */
const switchEnd = (host: string) => `s-${host}`.slice(0, 15);

function buildNetwork(): void {
  ip('netns', 'add', SWITCH);
  ip('-n', SWITCH, 'link', 'add', 'br0', 'type', 'bridge');
  ip('-n', SWITCH, 'link', 'set', 'br0', 'up');
  for (const [role, ns] of Object.entries(hosts)) {
    ip('netns', 'add', ns);
    ip('-n', ns, 'link', 'set', 'lo', 'up');
    ip('link', 'add', `h-${ns}`.slice(0, 15), 'netns', ns, 'type', 'veth', 'peer', 'name', switchEnd(ns), 'netns', SWITCH);
    ip('-n', ns, 'link', 'set', `h-${ns}`.slice(0, 15), 'name', 'eth0');
    ip('-n', ns, 'addr', 'add', `${address[role as keyof typeof hosts]}/24`, 'dev', 'eth0');
    ip('-n', ns, 'link', 'set', 'eth0', 'up');
    ip('-n', SWITCH, 'link', 'set', switchEnd(ns), 'master', 'br0');
    ip('-n', SWITCH, 'link', 'set', switchEnd(ns), 'up');
  }
  // The test's own way in: one veth from this namespace to the bridge.
  ip('link', 'add', `gt${id}`, 'type', 'veth', 'peer', 'name', `s-gt${id}`, 'netns', SWITCH);
  ip('addr', 'add', `${address.test}/24`, 'dev', `gt${id}`);
  ip('link', 'set', `gt${id}`, 'up');
  ip('-n', SWITCH, 'link', 'set', `s-gt${id}`, 'master', 'br0');
  ip('-n', SWITCH, 'link', 'set', `s-gt${id}`, 'up');
}

function tearDownNetwork(): void {
  for (const args of [['link', 'del', `gt${id}`], ...[SWITCH, ...Object.values(hosts)].map((ns) => ['netns', 'del', ns])]) {
    try {
      ip(...args);
    } catch {
      // already gone
    }
  }
}

describe.skipIf(!!why)('agents on other hosts (network namespaces)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'gantry-hosts-'));
  const procs: ChildProcess[] = [];
  const url = `https://${address.server}:${PORT}`;
  const ca = join(dir, 'cert.pem');
  let token = '';

  /** Runs the built CLI inside a namespace, its output to a file of its own. */
  const inHost = (ns: string, name: string, args: string[], env: Record<string, string> = {}) => {
    const fd = openSync(join(dir, `${name}.log`), 'a');
    const p = spawn('ip', ['netns', 'exec', ns, process.execPath, CLI, ...args], {
      cwd: REPO,
      env: { ...process.env, ...FAST_TIMINGS, ...env },
      stdio: ['ignore', fd, fd],
    });
    closeSync(fd);
    procs.push(p);
    return p;
  };
  const log = (name: string) => readFileSync(join(dir, `${name}.log`), 'utf8');
  const call = async (path: string, init: { method?: string; body?: unknown } = {}) => {
    // The test's CA for this server only; node:https through the CLI's own client would do too.
    const { request } = await import('node:https');
    return new Promise<{ status: number; body: any }>((resolve, reject) => {
      const req = request(
        url + path,
        { method: init.method ?? 'GET', ca: readFileSync(ca), headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' } },
        (res) => {
          let text = '';
          res.on('data', (d) => (text += d));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : null }));
        },
      );
      req.on('error', reject);
      req.end(init.body === undefined ? undefined : JSON.stringify(init.body));
    });
  };

  beforeAll(() => {
    buildNetwork();
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-keyout',
        join(dir, 'key.pem'),
        '-out',
        ca,
        '-days',
        '1',
        '-subj',
        '/CN=gantry-test',
        '-addext',
        `subjectAltName=IP:${address.server}`,
      ],
      { stdio: 'ignore' },
    );
  });
  afterAll(async () => {
    for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    // ip netns exec runs the program as its child: kill what is left of it in each namespace.
    for (const ns of Object.values(hosts)) {
      try {
        const pids = execFileSync('ip', ['netns', 'pids', ns], { encoding: 'utf8' }).split('\n').filter(Boolean);
        for (const pid of pids) process.kill(Number(pid), 'SIGKILL');
      } catch {
        // namespace gone
      }
    }
    await new Promise((r) => setTimeout(r, 200));
    tearDownNetwork();
    rmSync(dir, { recursive: true, force: true });
  });

  it('a cut link: the stage runs elsewhere; when the link returns, the old agent is told to kill its copy and its late report is refused', async () => {
    inHost(hosts.server, 'server', [
      'server',
      '--host',
      address.server,
      '--port',
      String(PORT),
      '--data-dir',
      join(dir, 'server'),
      '--tls-cert',
      ca,
      '--tls-key',
      join(dir, 'key.pem'),
    ]);
    const tokenFile = join(dir, 'server', 'admin.token');
    const readToken = async () => {
      try {
        return readFileSync(tokenFile, 'utf8').trim();
      } catch {
        return '';
      }
    };
    token = await until('server up', readToken, (t) => t.length > 0, 30_000).catch(() => {
      throw new Error(`server did not start:\n${log('server')}`);
    });
    await until(
      'server answers from another namespace',
      () =>
        call('/healthz').then(
          (r) => r.status,
          () => 0,
        ),
      (s) => s === 200,
      30_000,
    );
    const join_ = await call('/v1/tokens', { method: 'POST', body: { kind: 'join', name: 'hosts test' } });
    expect(join_.status).toBe(201);
    for (const a of ['a1', 'a2', 'a3'] as const) {
      inHost(hosts[a], a, ['agent', '--server', url, '--ca', ca, '--name', a, '--data-dir', join(dir, a), '--cpu', '1', '--memory', '1Gi'], {
        GANTRY_JOIN_TOKEN: join_.body.token,
      });
    }
    await until(
      'three machines ready',
      () => call('/v1/machines').then((r) => r.body.machines.filter((m: { health: string }) => m.health === 'ready').length),
      (n) => n === 3,
      30_000,
    );

    const marks = join(dir, 'marks');
    const job = await call('/v1/jobs', {
      method: 'POST',
      body: {
        name: 'cut',
        stages: [
          { name: 'long', command: ['sh', '-c', `sleep 15; echo "$GANTRY_MACHINE $GANTRY_ATTEMPT" >> ${marks}`], resources: { cpu: 1, memory: '64Mi' } },
        ],
      },
    });
    expect(job.status).toBe(201);
    const jobOf = () => call(`/v1/jobs/${job.body.id}`).then((r) => r.body);
    const first = await until('running', jobOf, (j) => j.stages[0].attempts[0]?.state === 'running', 30_000);
    const victim = first.stages[0].attempts[0].machine as 'a1' | 'a2' | 'a3';

    // Cut the victim's link at the switch.
    ip('-n', SWITCH, 'link', 'set', switchEnd(hosts[victim]), 'down');
    const moved = await until(
      'the stage runs elsewhere',
      jobOf,
      (j) => j.stages[0].attempts.length === 2 && j.stages[0].attempts[1].state === 'running',
      30_000,
    );
    expect(moved.stages[0].attempts[0].state).toBe('lost');
    const rescuer = moved.stages[0].attempts[1].machine;
    expect(rescuer).not.toBe(victim);

    // The link comes back while the stale copy still runs.
    ip('-n', SWITCH, 'link', 'set', switchEnd(hosts[victim]), 'up');
    const done = await until('the job ends', jobOf, (j) => ['succeeded', 'failed', 'canceled'].includes(j.state), 60_000);
    expect(done.state).toBe('succeeded');
    expect(done.stages[0].attempts.map((a: { state: string }) => a.state)).toEqual(['lost', 'succeeded']);
    // The old agent was told to kill its copy, and what it said of it afterwards was refused.
    const stale = first.stages[0].attempts[0].id as string;
    await until(
      'the victim killed its stale copy',
      async () => log(victim),
      (l) => l.split('\n').some((line) => line.includes('killing attempt') && line.includes(stale)),
      30_000,
    );
    await until(
      'its late report refused',
      async () => log('server'),
      (l) => l.split('\n').some((line) => line.includes('stale report refused') && line.includes(stale)),
      30_000,
    );
    // Only the rescuer's copy got to its end.
    const lines = readFileSync(marks, 'utf8').trim().split('\n');
    expect(lines).toEqual([`${rescuer} 2`]);
  }, 120_000);
});
