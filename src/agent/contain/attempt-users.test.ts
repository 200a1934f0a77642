import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AttemptUsers, attemptUserPolicy, defaultUserHost, reachablePolicy, userProblem, userReport, type UserHost } from './attempt-users.js';
import { ContainmentOptionError, DEFAULT_CONTAINMENT } from './containment-options.js';
import { UidLocks } from './uid-locks.js';

let dir: string;
let host: UserHost;
let lockDir: string;
/** The uids the fake host has processes of. */
const running = new Set<number>();
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'gantry-users-'));
  lockDir = join(dir, 'run', 'uids');
  host = { agentUid: 0, passwdFile: join(dir, 'passwd'), groupFile: join(dir, 'group'), runsAs: (uid) => running.has(uid) };
  running.clear();
  writeFileSync(
    host.passwdFile,
    [
      'root:x:0:0:root:/root:/bin/bash',
      'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin',
      'alice:x:1000:1000::/home/alice:/bin/sh',
      'svc:x:61185:61185::/:/bin/false',
      'broken line',
      '',
    ].join('\n'),
  );
  writeFileSync(host.groupFile, ['root:x:0:', 'video:x:61187:alice', ''].join('\n'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

const options = (over: Partial<typeof DEFAULT_CONTAINMENT> = {}) => ({ ...DEFAULT_CONTAINMENT, uidRange: [61184, 61190] as const, ...over });
const dynamic = (dataDir = join(dir, 'agent-a')) => new AttemptUsers(attemptUserPolicy(options(), host), dataDir, lockDir, host);

describe('attemptUserPolicy', () => {
  it('a root agent gives each attempt a uid of the range; reports it', () => {
    const p = attemptUserPolicy(options(), host);
    expect(p).toEqual({ kind: 'dynamic', first: 61184, last: 61190 });
    expect(userReport(p)).toBe('dynamic 61184-61190');
    expect(userProblem(p)).toBeNull();
  });

  it('an agent that is not root, or with containment off, runs stages as itself, and says what that means', () => {
    const notRoot = attemptUserPolicy(options(), { ...host, agentUid: 1000 });
    expect(userReport(notRoot)).toBe('agent alice (1000)');
    expect(userProblem(notRoot)).toMatch(/^the agent is not root: stages run as its own user \(alice\) and can read its credential/);
    const off = attemptUserPolicy(options({ mode: 'off' }), host);
    expect(userReport(off)).toBe('agent root (0)');
    expect(userProblem(off)).toBe("containment is off: stages run as the agent's user (root)");
    expect(userReport(attemptUserPolicy(options(), { ...host, agentUid: 4242 }))).toBe('agent uid-4242 (4242)');
  });

  it('--run-as: a user of /etc/passwd by name or uid; anything else is an error naming it', () => {
    expect(userReport(attemptUserPolicy(options({ runAs: 'nobody' }), host))).toBe('run-as nobody (65534)');
    expect(attemptUserPolicy(options({ runAs: '1000' }), host)).toEqual({ kind: 'run-as', user: { uid: 1000, gid: 1000, name: 'alice' } });
    const err = (runAs: string, h = host, mode: 'auto' | 'off' = 'auto') => {
      try {
        attemptUserPolicy(options({ runAs, mode }), h);
      } catch (e) {
        expect(e).toBeInstanceOf(ContainmentOptionError);
        return (e as Error).message;
      }
      return null;
    };
    expect(err('bob')).toBe(`--run-as bob: no such user in ${host.passwdFile} (give a user name or uid listed there)`);
    expect(err('4242')).toMatch(/^--run-as 4242: no such user/);
    expect(err('root')).toMatch(/^--run-as root: that is root, and stages would run with every privilege/);
    expect(err('0')).toMatch(/^--run-as 0: that is root/);
    expect(err('nobody', { ...host, agentUid: 1000 })).toBe('--run-as nobody: only an agent running as root can run stages as another user');
    expect(err('nobody', host, 'off')).toBe('--run-as nobody: containment is off, which switches no user');
  });

  it('a directory others cannot pass leaves stages as the agent, saying which; an explicit --run-as fails', () => {
    const closed = { dir: '/root', mode: 0o40700 };
    const p = reachablePolicy(attemptUserPolicy(options(), host), closed, host);
    expect(userReport(p)).toBe('agent root (0)');
    expect(userProblem(p)).toBe(
      "stages run as the agent's user (root): /root (mode 0700) does not let other users pass through to the attempts' directories; make it 0711",
    );
    expect(() => reachablePolicy(attemptUserPolicy(options({ runAs: 'nobody' }), host), closed, host)).toThrow(/^--run-as nobody: \/root \(mode 0700\)/);
    expect(reachablePolicy(attemptUserPolicy(options(), host), null, host).kind).toBe('dynamic');
  });
});

describe('AttemptUsers', () => {
  it('hands out the lowest uid no attempt holds and no account or group has, gid the same; takes it back when released', () => {
    const users = dynamic();
    // 61185 is svc's, 61187 the video group's.
    expect(users.acquire('att_1')).toEqual({ uid: 61184, gid: 61184, name: null });
    expect(users.acquire('att_2')).toEqual({ uid: 61186, gid: 61186, name: null });
    expect(users.acquire('att_1')?.uid).toBe(61184); // asked again: the same
    expect(users.acquire('att_3')?.uid).toBe(61188);
    users.release('att_1');
    users.release('att_1'); // harmless
    expect(users.of('att_1')).toBeNull();
    expect(users.acquire('att_4')?.uid).toBe(61184);
    expect(users.acquire('att_5')?.uid).toBe(61189);
    expect(users.acquire('att_6')?.uid).toBe(61190);
    expect(() => users.acquire('att_7')).toThrow(/^no free uid in --uid-range 61184-61190: 5 held by this agent's attempts/);
    // An account added while the agent runs is seen at the next acquisition.
    users.release('att_5');
    writeFileSync(host.passwdFile, readFileSync(host.passwdFile, 'utf8') + 'late:x:61189:61189::/:/bin/false\n');
    expect(() => users.acquire('att_8')).toThrow(/no free uid/);
  });

  it('two agents of one host never hold the same uid: each holds a file per uid, only its own removed', () => {
    const a = dynamic(join(dir, 'agent-a'));
    const b = dynamic(join(dir, 'agent-b'));
    expect(a.acquire('att_a1')?.uid).toBe(61184);
    expect(b.acquire('att_b1')?.uid).toBe(61186);
    expect(a.acquire('att_a2')?.uid).toBe(61188);
    a.release('att_a1');
    // Released, 61184 stays a's (for its next attempt): b goes on past it.
    expect(b.acquire('att_b2')?.uid).toBe(61189);
    // The files: root's, private, naming the agent that holds each (for no one attempt: FOR_THE_AGENT).
    const bootDir = join(lockDir, readdirSync(lockDir)[0]!);
    expect((statSync(lockDir).mode & 0o777).toString(8)).toBe('700');
    expect(readdirSync(bootDir).sort()).toEqual(['61184', '61186', '61188', '61189']);
    expect(JSON.parse(readFileSync(join(bootDir, '61184'), 'utf8'))).toEqual({ dataDir: join(dir, 'agent-a'), attemptId: '', pid: process.pid });
    expect(JSON.parse(readFileSync(join(bootDir, '61189'), 'utf8'))).toMatchObject({ dataDir: join(dir, 'agent-b'), attemptId: '' });
    // An agent stopping gives its idle uids back, not those its attempts still run as.
    a.close();
    expect(readdirSync(bootDir).sort()).toEqual(['61186', '61188', '61189']);
    expect(b.acquire('att_b3')?.uid).toBe(61184);
  });

  it('a released uid goes to the agent’s next attempt with no file made, linked or removed; still exclusive against an agent of the previous version', () => {
    const a = dynamic(join(dir, 'agent-a'));
    expect(a.acquire('att_1')?.uid).toBe(61184);
    const bootDir = join(lockDir, readdirSync(lockDir)[0]!);
    const file = join(bootDir, '61184');
    const made = statSync(file).ino;
    a.release('att_1');
    // Still held on disk while idle: the previous version's take (the same file, by link(2)) fails.
    const previous = new UidLocks(lockDir, join(dir, 'agent-old'));
    expect(previous.tryTake(61184, 'att_old')).toBe(false);
    expect(previous.tryTake(61186, 'att_old')).toBe(true);
    mkdirSync(join(dir, 'agent-old', 'attempts', 'att_old'), { recursive: true });
    // Its next attempt gets it back: the same file, never removed and made again.
    expect(a.acquire('att_2')?.uid).toBe(61184);
    expect(statSync(file).ino).toBe(made);
    expect(readdirSync(bootDir).sort()).toEqual(['61184', '61186']);
    // Not reclaimed as an orphan while the agent's attempts/ is there (the rule of either version, with no attempt named).
    mkdirSync(join(dir, 'agent-a', 'attempts'), { recursive: true });
    a.release('att_2');
    expect(dynamic(join(dir, 'agent-next')).forgetOthers()).toEqual([]);
    expect(existsSync(file)).toBe(true);
  });

  it('an idle uid reclaimed since (its agent’s attempts/ removed by hand) or listed since is not handed out again', () => {
    const a = dynamic(join(dir, 'agent-a'));
    expect(a.acquire('att_1')?.uid).toBe(61184);
    expect(a.acquire('att_2')?.uid).toBe(61186);
    a.release('att_1');
    a.release('att_2');
    // attempts/ never made here: both idle uids read as orphans to the next agent to start, which takes the first.
    const next = dynamic(join(dir, 'agent-next'));
    expect(next.forgetOthers()).toEqual([61184, 61186]);
    expect(next.acquire('att_n')?.uid).toBe(61184);
    // An account of 61188's id appears; a's next attempts get neither reclaimed uid nor the listed one.
    writeFileSync(host.passwdFile, readFileSync(host.passwdFile, 'utf8') + 'late:x:61188:61188::/:/bin/false\n');
    expect(a.acquire('att_3')?.uid).toBe(61186);
    expect(a.acquire('att_4')?.uid).toBe(61189);
  });

  it('after a restart: recovered attempts keep their uids, the rest go back', () => {
    const before = dynamic();
    before.acquire('att_running');
    before.acquire('att_done');
    before.acquire('att_owed');
    // Another agent, alive: its attempt's directory is there.
    mkdirSync(join(dir, 'agent-b', 'attempts', 'att_b'), { recursive: true });
    const other = dynamic(join(dir, 'agent-b'));
    expect(other.acquire('att_b')?.uid).toBe(61189);
    // The agent restarts: its attempts' uids are still held (its processes may still run as them).
    const after = dynamic();
    expect(after.acquire('att_new')?.uid).toBe(61190);
    expect(after.adopt('att_running', 61184)).toEqual({ uid: 61184, gid: 61184, name: null });
    expect(after.adopt('att_owed', 61188)?.uid).toBe(61188);
    // Never started as another user (its work/ is still the agent's): nothing to adopt.
    expect(after.adopt('att_never', 0)).toBeNull();
    expect(after.adopt('att_odd', 5000)).toBeNull();
    expect(after.forgetOthers()).toEqual([61186]);
    expect(after.acquire('att_next')?.uid).toBe(61186);
    // Another agent's uid is not taken over.
    expect(() => after.adopt('att_b', 61189)).toThrow(/^uid 61189 of attempt att_b is held by another agent/);
  });

  it('--run-as: one user for every attempt, nothing recorded; the agent itself: no user at all', () => {
    const runAs = new AttemptUsers(attemptUserPolicy(options({ runAs: 'nobody' }), host), join(dir, 'agent-a'), lockDir, host);
    expect(runAs.switching).toBe(true);
    expect(runAs.acquire('att_1')).toEqual({ uid: 65534, gid: 65534, name: 'nobody' });
    expect(runAs.acquire('att_2')).toEqual({ uid: 65534, gid: 65534, name: 'nobody' });
    expect(runAs.adopt('att_3', 65534)?.name).toBe('nobody');
    runAs.release('att_1');
    expect(existsSync(lockDir)).toBe(false);
    const self = new AttemptUsers(attemptUserPolicy(options(), { ...host, agentUid: 1000 }), join(dir, 'agent-a'), lockDir, host);
    expect(self.switching).toBe(false);
    expect(self.acquire('att_1')).toBeNull();
    expect(self.report).toBe('agent alice (1000)');
  });

  it('an agent that is gone for good (its attempt’s directory gone) and left no process: its uids are reclaimed by the next to start', () => {
    const gone = join(dir, 'agent-gone');
    const kept = join(dir, 'agent-kept');
    mkdirSync(join(kept, 'attempts', 'att_k'), { recursive: true });
    const g = dynamic(gone);
    expect(g.acquire('att_g1')?.uid).toBe(61184);
    expect(g.acquire('att_g2')?.uid).toBe(61186);
    expect(dynamic(kept).acquire('att_k')?.uid).toBe(61188);
    // att_g2 still has a process (a stage left running by a killed agent): kept too.
    running.add(61186);
    const next = dynamic(join(dir, 'agent-next'));
    expect(next.forgetOthers()).toEqual([61184]);
    expect(next.acquire('att_n')?.uid).toBe(61184);
    // Another's release, after its uid was reclaimed and taken, does not take it from the new holder.
    g.release('att_g1');
    expect(dynamic(join(dir, 'agent-third')).acquire('att_t')?.uid).toBe(61189);
  });
});

describe('defaultUserHost', () => {
  it('finds processes by any of their uids in /proc', () => {
    const h = defaultUserHost();
    expect(h.runsAs(process.getuid?.() ?? 0)).toBe(true);
    // A uid of the range this file never hands out: nothing runs as it.
    expect(h.runsAs(65519)).toBe(false);
  });
});

describe('UidLocks', () => {
  it('what an earlier boot left is removed whole by the next agent to start', () => {
    const old = new UidLocks(lockDir, join(dir, 'agent-a'), 'boot-before');
    old.init();
    expect(old.tryTake(61184, 'att_1')).toBe(true);
    expect(old.tryTake(61184, 'att_2')).toBe(false);
    mkdirSync(join(lockDir, 'boot-older'));
    const now = new UidLocks(lockDir, join(dir, 'agent-b'), 'boot-now');
    now.init();
    expect(readdirSync(lockDir)).toEqual(['boot-now']);
    expect(now.tryTake(61184, 'att_3')).toBe(true);
    // Only whole files: the copy written aside is gone once linked in.
    expect(readdirSync(join(lockDir, 'boot-now'))).toEqual(['61184']);
  });
});
