import { existsSync } from 'node:fs';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';

/**
 * Debian's Chromium, driven by playwright-core (`npx playwright install` cannot download browsers
 * here): `apt-get install -y chromium`, as .ci/run does. GANTRY_CHROMIUM names another binary.
 */
export const CHROMIUM = process.env.GANTRY_CHROMIUM ?? '/usr/bin/chromium';

/** Why browser tests must skip here, or null when they can run. Throws where services are required (CI). */
export function browserMissing(): string | null {
  if (existsSync(CHROMIUM)) return null;
  const message = `browser tests skipped: no Chromium at ${CHROMIUM} (apt-get install -y chromium, or set GANTRY_CHROMIUM)`;
  if (process.env.GANTRY_REQUIRE_SERVICES === '1') throw new Error(`${message} (GANTRY_REQUIRE_SERVICES=1: they must run here)`);
  console.warn(message);
  return message;
}

export interface RunningBrowser {
  browser: Browser;
  /** A fresh context (its own storage, no cookies), at a laptop's size. */
  page(): Promise<{ context: BrowserContext; page: Page; problems: string[] }>;
  close(): Promise<void>;
}

/**
 * Headless Chromium with a fresh profile (playwright makes a temporary one for each launch), no network of its own (no updates, sync or QUIC). Each
 * page records what went wrong in it, `problems`: uncaught errors, console errors (a blocked
 * script or style), refused and failed requests, so a test can say the page ran clean.
 */
export async function launchBrowser(): Promise<RunningBrowser> {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--disable-dev-shm-usage',
    ],
  });
  return {
    browser,
    async page() {
      const context = await browser.newContext({ viewport: { width: 1366, height: 850 } });
      const page = await context.newPage();
      const problems: string[] = [];
      page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
      // A refused request as its status and address (the console's line for it names neither).
      page.on('response', (r) => {
        if (r.status() >= 400) problems.push(`${r.status()} ${r.request().method()} ${new URL(r.url()).pathname}`);
      });
      page.on('requestfailed', (r) => problems.push(`failed ${r.method()} ${new URL(r.url()).pathname}: ${r.failure()?.errorText ?? '?'}`));
      page.on('console', (m) => {
        if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) problems.push(`console: ${m.text()}`);
      });
      return { context, page, problems };
    },
    async close() {
      await browser.close();
    },
  };
}

/** A request a page left behind when it went (a reload, a navigation): aborted by the browser, not a problem. */
export const leftBehind = (problem: string): boolean => /^failed GET \S+: net::ERR_ABORTED$/.test(problem);
