import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findSandbox, userNamespacesBlocked } from './find-sandbox.js';
import { sandboxBase } from './sandbox-argv.js';

// With a stand-in bwrap, on any host; the real one, as uid 61184, is sandbox.test.ts's.
describe('findSandbox', () => {
  let dir = '';
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-find-sandbox-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  /** A bwrap of `version` that records its arguments, then says `stderr` and exits `status`. */
  function fakeBwrap(name: string, version: string, status: number, stderr = ''): string {
    const bin = join(dir, name);
    mkdirSync(bin);
    writeFileSync(
      join(bin, 'bwrap'),
      `#!/bin/sh\nif [ "$1" = --version ]; then echo "bubblewrap ${version}"; exit 0; fi\nprintf '%s\\n' "$@" > "${bin}/args"\n${stderr ? `echo '${stderr}' >&2\n` : ''}exit ${status}\n`,
    );
    chmodSync(join(bin, 'bwrap'), 0o755);
    return bin;
  }

  /** A /proc/sys with these values. */
  function procSys(name: string, values: Record<string, string>): string {
    const root = join(dir, name);
    for (const [p, v] of Object.entries(values)) {
      mkdirSync(join(root, p, '..'), { recursive: true });
      writeFileSync(join(root, p), `${v}\n`);
    }
    return root;
  }

  it('says how to install bubblewrap when there is none', () => {
    expect(findSandbox({ user: null, pathVar: join(dir, 'nothing-here') })).toEqual({
      problem: 'bubblewrap is not installed (no bwrap in PATH): apt install bubblewrap',
    });
  });

  it('finds one that works, probing it with the namespaces and mounts attempts get, and knows whether it has --disable-userns', () => {
    const old = fakeBwrap('works-0.6', '0.6.1', 0);
    expect(findSandbox({ user: null, pathVar: old })).toEqual({ bwrap: join(old, 'bwrap'), disableUserns: false });
    const tool = { bwrap: join(old, 'bwrap'), disableUserns: false };
    expect(readFileSync(join(old, 'args'), 'utf8').trimEnd().split('\n')).toEqual([...sandboxBase(tool, false).slice(1), '--chdir', '/', '--', 'true']);

    const recent = fakeBwrap('works-0.8', '0.8.0', 0);
    expect(findSandbox({ user: null, pathVar: recent })).toEqual({ bwrap: join(recent, 'bwrap'), disableUserns: true });
    expect(readFileSync(join(recent, 'args'), 'utf8')).toContain('--disable-userns\n');
  });

  it("says why one that is installed does not work: bwrap's words, and the sysctl that switched user namespaces off", () => {
    const bin = fakeBwrap(
      'refused',
      '0.8.0',
      1,
      'bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces.',
    );
    const found = findSandbox({ user: null, pathVar: bin, procSys: procSys('sys-userns-0', { 'user/max_user_namespaces': '0' }) });
    expect(found).toEqual({
      problem:
        `bwrap (${bin}/bwrap) does not work here as this agent's user: bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces.` +
        '; user namespaces are off: user.max_user_namespaces is 0 (sysctl -w user.max_user_namespaces=15000)',
    });
    // Nothing blocks them: bwrap's words alone.
    expect(findSandbox({ user: null, pathVar: bin, procSys: procSys('sys-open', { 'user/max_user_namespaces': '63000' }) })).toEqual({
      problem: `bwrap (${bin}/bwrap) does not work here as this agent's user: bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces.`,
    });
    const silent = fakeBwrap('silent', '0.8.0', 7);
    expect(findSandbox({ user: null, pathVar: silent, procSys: procSys('sys-none', {}) })).toEqual({
      problem: `bwrap (${silent}/bwrap) does not work here as this agent's user: exit status 7`,
    });
  });

  it('needs setpriv to try it as the attempts’ user', () => {
    const bin = fakeBwrap('no-setpriv', '0.8.0', 0);
    expect(findSandbox({ user: { uid: 61184, gid: 61184 }, pathVar: bin })).toEqual({
      problem: 'setpriv is not installed (util-linux): needed to try bwrap as uid 61184',
    });
  });

  it('names each sysctl that keeps unprivileged users from user namespaces, and how to allow them', () => {
    expect(userNamespacesBlocked(procSys('debian-10', { 'kernel/unprivileged_userns_clone': '0', 'user/max_user_namespaces': '63000' }))).toBe(
      'kernel.unprivileged_userns_clone is 0 (sysctl -w kernel.unprivileged_userns_clone=1)',
    );
    expect(
      userNamespacesBlocked(procSys('ubuntu-24', { 'kernel/apparmor_restrict_unprivileged_userns': '1', 'kernel/unprivileged_userns_clone': '1' })),
    ).toMatch(
      /^kernel\.apparmor_restrict_unprivileged_userns is 1 \(give bwrap an AppArmor profile with "userns," or sysctl -w kernel\.apparmor_restrict_unprivileged_userns=0\)$/,
    );
    expect(userNamespacesBlocked(procSys('open', { 'kernel/apparmor_restrict_unprivileged_userns': '0', 'user/max_user_namespaces': '100' }))).toBeNull();
  });
});
