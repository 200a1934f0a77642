import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { parsePools } from '../../src/autoscale/pool-template.js';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { gpuMachine } from '../../src/store/conformance/fixtures.js';
import { browserMissing, launchBrowser, leftBehind, type RunningBrowser } from '../support/browser.js';
import { REPO } from '../support/gantry-process.js';
import { registerMachine } from '../support/tokens.js';

const missing = browserMissing();
const DASHBOARD = join(REPO, 'dist', 'web');
const SLOW = 30_000;

/**
 * The pools page's Autoscaling section (issue 30) in a real browser, against a control plane in
 * this process with pools configured (ServerConfig.pools) and machine rows made by the store's
 * verbs: no provider, no autoscaler loop; what is drawn is what GET /v1/autoscale says. A new
 * decision shows without a reload (the autoscale:* event marks it stale); a waiting stage's
 * panel says the autoscaler's word on it. Needs the built dashboard (npm run build, as `npm test`
 * does first).
 */
describe.skipIf(missing !== null || !existsSync(join(DASHBOARD, 'index.html')))('dashboard: autoscaling on the pools page', () => {
  let cp: ControlPlane;
  let url: string;
  let dir: string;
  let browser: RunningBrowser;
  let page: Page;
  let problems: string[];
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'gantry-dash-autoscale-'));
    const pools = parsePools([
      {
        name: 'h100',
        template: { cpu: 32, memory: '256Gi', gpus: { type: 'h100', count: 8 } },
        autoscale: { provider: 'local', min: 0, max: 4, idleSeconds: 300, bootTimeoutSeconds: 600 },
      },
    ]);
    cp = await createControlPlane(defaultServerConfig({ dataDir: dir, host: '127.0.0.1', port: 0, dashboardDir: DASHBOARD, pools }));
    // The API and the relay that carries events to the page's stream, no more: no scheduler and no
    // autoscaler acts on the rows this test makes (a provider would start h100-1 for real).
    url = (await cp.app.listen({ host: '127.0.0.1', port: 0 })).replace('[::1]', '127.0.0.1');
    cp.loops.relay.start();
    const now = Date.now();
    await cp.store.autoscaleStart({
      pool: 'h100',
      heldFor: [['stage-a'], []],
      reason: '1 stage waits for 8 h100 GPUs: starting 2 machines of template h100',
      now,
    });
    await cp.store.autoscaleRequested({ name: 'h100-2', now });
    await registerMachine(cp.store, gpuMachine('h100-2', 8));
    browser = await launchBrowser();
    ({ page, problems } = await browser.page());
  });
  afterAll(async () => {
    await browser?.close();
    await cp?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('shows each pool’s desired / current / starting, its machines with their lifecycle, and the decisions', async () => {
    await page.goto(`${url}/#signin=${cp.signInCodes.issue()}`);
    await page.getByRole('heading', { name: 'Jobs' }).waitFor({ timeout: SLOW });
    await page.getByRole('link', { name: 'Pools' }).click();
    await page.getByRole('heading', { name: 'Autoscaling' }).waitFor({ timeout: SLOW });
    const card = page.locator('[data-autoscale-pool="h100"]');
    await card.waitFor();
    expect(await card.getByTestId('autoscale-desired').innerText()).toBe('2');
    expect(await card.getByTestId('autoscale-current').innerText()).toBe('1');
    expect(await card.getByTestId('autoscale-starting').innerText()).toBe('1');
    expect(await card.locator('header').innerText()).toContain('local · min 0 · max 4');
    expect(await card.locator('[data-machine="h100-1"] .badge').innerText()).toBe('provisioning');
    expect(await card.locator('[data-machine="h100-1"]').innerText()).toContain('held for 1 stage');
    expect(await card.locator('[data-machine="h100-2"] .badge').innerText()).toBe('ready');
    const decisions = page.locator('ul.decisions li');
    expect(await decisions.first().innerText()).toMatch(/^joined /);
    expect(await decisions.last().innerText()).toContain('starting 2 machines of template h100');

    // A decision made now shows without a reload: its event marks the section stale.
    await cp.store.autoscaleDrain({ name: 'h100-2', reason: 'idle 300 s: draining to release it', now: Date.now() });
    await card.locator('[data-machine="h100-2"] .badge', { hasText: 'draining' }).waitFor({ timeout: SLOW });
    await page.locator('ul.decisions li[data-decision="autoscale:drain"]').waitFor();
    expect(await card.getByTestId('autoscale-current').innerText()).toBe('0');
    expect(problems.filter((p) => !leftBehind(p))).toEqual([]);
  });

  it("a waiting stage's panel says the autoscaler's reason for starting no machine", async () => {
    const admin = `Bearer ${await page.evaluate(() => window.sessionStorage.getItem('gantry.token'))}`;
    const r = await cp.app.inject({
      method: 'POST',
      url: '/v1/jobs',
      headers: { authorization: admin, 'content-type': 'application/json' },
      payload: JSON.stringify({
        name: 'a100-wait',
        stages: [{ name: 'train', resources: { cpu: 4, memory: '8Gi', gpu: { count: 1, type: 'a100' } }, command: ['true'] }],
      }),
    });
    expect(r.statusCode).toBe(201);
    const job = r.json().id as string;
    const stageId = (await cp.store.jobGet({ jobId: job }))!.stages[0]!.id;
    await cp.store.autoscaleWaitsPut({ waits: [{ stageId, kind: 'gpu-type', reason: 'no template has a100 GPUs', pool: null }], now: Date.now() });
    await page.goto(`${url}/jobs/${job}`);
    await page.locator('.autoscale-word', { hasText: 'Autoscaler: no template has a100 GPUs' }).waitFor({ timeout: SLOW });
    expect(problems.filter((p) => !leftBehind(p))).toEqual([]);
  });
});
