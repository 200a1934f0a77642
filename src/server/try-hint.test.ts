import { describe, expect, it } from 'vitest';
import { tryHint } from './try-hint.js';

const command = 'npx gantry submit examples/pipeline.yaml --watch    (Ctrl-C stops everything)';

describe('tryHint: the command gantry up suggests works as printed', () => {
  it('needs nothing more on the defaults (port 7070, ./.gantry)', () => {
    expect(tryHint({ url: 'http://127.0.0.1:7070', dataDir: './.gantry', cwd: '/home/me/proj', env: {} })).toEqual([`Try: ${command}`]);
  });

  it('with --port and --data-dir, names the server and where the admin token is', () => {
    expect(tryHint({ url: 'http://127.0.0.1:7171', dataDir: 'state', cwd: '/home/me/proj', env: {} })).toEqual([
      `Try: GANTRY_SERVER=http://127.0.0.1:7171 GANTRY_DATA_DIR=/home/me/proj/state ${command}`,
      '     (or export GANTRY_SERVER GANTRY_DATA_DIR in that shell once: with them every gantry command finds this server, its admin token)',
    ]);
  });

  it('leaves out what the environment already tells the CLI, and quotes a path with a space', () => {
    expect(tryHint({ url: 'http://127.0.0.1:7171', dataDir: '/srv/my data', cwd: '/x', env: { GANTRY_SERVER: 'http://127.0.0.1:7171' } })).toEqual([
      `Try: GANTRY_DATA_DIR='/srv/my data' ${command}`,
      '     (or export GANTRY_DATA_DIR in that shell once: with it every gantry command finds its admin token)',
    ]);
    expect(
      tryHint({ url: 'http://127.0.0.1:7171', dataDir: '/srv/d', cwd: '/x', env: { GANTRY_SERVER: 'http://127.0.0.1:7171', GANTRY_DATA_DIR: '/srv/d' } }),
    ).toEqual([`Try: ${command}`]);
  });

  it('over TLS with a private CA, names the CA too', () => {
    expect(tryHint({ url: 'https://127.0.0.1:7070', dataDir: '.gantry', ca: 'certs/ca.pem', cwd: '/p', env: {} })[0]).toBe(
      `Try: GANTRY_SERVER=https://127.0.0.1:7070 GANTRY_CA=/p/certs/ca.pem ${command}`,
    );
  });
});
