import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { clientFor, InsecureTransportError, resolveToken } from './client-options.js';

describe('the CLI token', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-cli-token-'));
    writeFileSync(join(dir, 'admin.token'), 'from-the-file\n');
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('comes from --token, else $GANTRY_TOKEN, else the admin token in $GANTRY_DATA_DIR; none is null', () => {
    const env = { GANTRY_TOKEN: 'from-env', GANTRY_DATA_DIR: dir };
    expect(resolveToken({ token: 'from-flag' }, env)).toBe('from-flag');
    expect(resolveToken({}, env)).toBe('from-env');
    expect(resolveToken({}, { GANTRY_DATA_DIR: dir })).toBe('from-the-file');
    expect(resolveToken({}, { GANTRY_DATA_DIR: join(dir, 'nowhere') })).toBeNull();
  });

  it('is never sent in clear to another host: https, or loopback, or the override', () => {
    expect(() => clientFor({ server: 'http://10.0.0.5:7070' }, {})).toThrow(InsecureTransportError);
    expect(() => clientFor({ server: 'http://10.0.0.5:7070' }, {})).toThrow(/--tls-cert.*GANTRY_ALLOW_INSECURE_HTTP=1/);
    for (const server of ['https://gantry.example:7070', 'http://127.0.0.1:7070', 'http://localhost:7070', 'http://[::1]:7070'])
      expect(() => clientFor({ server }, {})).not.toThrow();
    expect(() => clientFor({ server: 'http://10.0.0.5:7070' }, { GANTRY_ALLOW_INSECURE_HTTP: '1' })).not.toThrow();
  });
});
