import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { parsePools } from '../../src/autoscale/pool-template.js';
import { createControlPlane, type ControlPlane } from '../../src/server/control-plane.js';
import { defaultServerConfig } from '../../src/server/server-config.js';
import { gpuMachine } from '../../src/store/conformance/fixtures.js';
import { browserMissing, launchBrowser, type RunningBrowser } from '../support/browser.js';
import { REPO } from '../support/gantry-process.js';
import { registerMachine } from '../support/tokens.js';

const missing = browserMissing();
const DASHBOARD = join(REPO, 'dist', 'web');
const SLOW = 30_000;

/**
 * The pools page's Autoscaling section (issue 30) in a real browser, against a control plane in
 * this process with pools configured (ServerConfig.pools) and machine rows made by the store's
 * verbs: no provider, no autoscaler loop; what is drawn is what GET /v1/autoscale says. A new
 * decision shows without a reload (the autoscale:* event marks it stale). Needs the built
 * dashboard (npm run build, as `npm test` does first).
 */
describe.skipIf(missing !== null || !existsSync(join(DASHBOARD, 'index.html')))('dashboard: autoscaling on the pools page', () => {
  let cp: ControlPlane;
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
    await cp.start();
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
    await page.goto(`${cp.url}/#signin=${cp.signInCodes.issue()}`);
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
    expect(problems).toEqual([]);
  });
});
