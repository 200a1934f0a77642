import { readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { api, gantryUpForSuite, jobOf, submit, until, sharedDir } from '../support/gantry-process.js';
import { browserMissing, launchBrowser, leftBehind, type RunningBrowser } from '../support/browser.js';
import { hybridReport } from '../support/containment-report.js';

const missing = browserMissing();
const SLOW = 30_000;

/**
 * The dashboard in a real browser (Debian's Chromium through playwright-core) against a real
 * `gantry up`: signed in by the link `gantry up` prints, it shows jobs submitted through the API
 * as they run, without a reload; draws a job's graph and a stage's output; cancels a running job;
 * reruns a failed one from a stage after showing the plan (or the server's refusal); and shows the
 * pools and machines as the API reads them.
 */
describe.skipIf(missing !== null)('dashboard in a browser', () => {
  const up = gantryUpForSuite({
    cluster: 'machines:\n  - { name: cpu-1, cpu: 4, memory: 4Gi }\n  - { name: gpu-1, cpu: 4, memory: 4Gi, gpus: { count: 2, type: h100 } }\n',
    machines: 2,
    // Small log caps: only the stage that prints past them (log cut) is cut.
    env: { GANTRY_POOL_SAMPLE_MS: '500', GANTRY_LOG_HEAD_BYTES: '64Ki', GANTRY_LOG_TAIL_BYTES: '16Ki' },
  });
  let browser: RunningBrowser;
  let page: Page;
  let problems: string[];
  beforeAll(async () => {
    browser = await launchBrowser();
    ({ page, problems } = await browser.page());
  });
  afterAll(async () => {
    await browser?.close();
  });
  const url = () => up().url;
  const badge = (scope: string, state: string) => page.locator(`${scope} .badge`, { hasText: state });
  /** The failed job the rerun test reran (its first stage's output is reused). */
  let failedJob = '';
  /** Takes the server's refusals of reruns of `job` out of `problems`: expected, and there must be some. */
  const refusalsExpected = (job: string) => {
    const expected = (p: string) => p === `409 POST /v1/jobs/${job}/rerun`;
    expect(problems.filter(expected).length).toBeGreaterThan(0);
    problems.splice(0, problems.length, ...problems.filter((p) => !expected(p)));
  };

  it("gantry up's link signs in as the admin once, with a one-time code that leaves the address at once", async () => {
    const link = /dashboard: (http:\/\/\S+)/.exec(up().output())?.[1];
    expect(link).toMatch(/\/#signin=gantry_signin_/);
    await page.goto(link!);
    await page.getByRole('heading', { name: 'Jobs' }).waitFor();
    expect(page.url()).toBe(`${url()}/jobs`);
    // A session of its own, not the server's admin token: an admin token that expires.
    const session = await page.evaluate(() => window.sessionStorage.getItem('gantry.token'));
    expect(session).toMatch(/^gantry_admin_/);
    expect(session).not.toBe(up().token);
    await page.getByText('admin ·').waitFor();
    await page.getByText('No jobs yet.').waitFor();
    await page.locator('[data-live="live"]').waitFor();
  });

  it('a job submitted through the API appears and moves to succeeded on the page, without a reload', async () => {
    let navigations = 0;
    page.on('framenavigated', (f) => f === page.mainFrame() && navigations++);
    await page.evaluate(() => Object.assign(window, { stayed: 'here' }));
    const job = (
      await submit(url(), {
        name: 'browser-ok',
        stages: [
          { name: 'prep', command: ['sh', '-c', 'echo hello from prep; echo to stderr >&2'] },
          { name: 'train', needs: ['prep'], command: ['sh', '-c', 'sleep 1; echo trained'] },
          { name: 'eval', needs: ['train'], command: ['sh', '-c', 'echo evaluated'] },
        ],
      })
    ).body;
    const row = `tr[data-job="${job.id}"]`;
    await page.locator(row).waitFor({ timeout: SLOW });
    await badge(row, 'succeeded').waitFor({ timeout: SLOW });
    expect(await page.locator(row).innerText()).toContain('3/3');
    expect(await page.evaluate(() => (window as unknown as { stayed?: string }).stayed)).toBe('here');
    expect(navigations).toBe(0);
  });

  it("the job page draws the graph with each stage's state and shows a stage's output", async () => {
    await page.getByRole('link', { name: 'browser-ok' }).click();
    await page.locator('g.dag-node[data-stage="eval"][data-state="succeeded"]').waitFor();
    expect(await page.locator('g.dag-node').count()).toBe(3);
    expect(await page.locator('path.dag-edge').count()).toBe(2);
    // Picked from the graph, with the keyboard.
    await page.locator('g.dag-node[data-stage="prep"]').focus();
    await page.keyboard.press('Enter');
    await page.locator('[data-stage-panel="prep"]').waitFor();
    const log = page.getByTestId('stage-log');
    await log.getByText('hello from prep').waitFor();
    await log.locator('.log-stderr', { hasText: 'to stderr' }).waitFor();
    expect(page.url()).toContain('?stage=prep');
    await page.locator('[data-stage-row="train"] button').click();
    await page.getByTestId('stage-log').getByText('trained').waitFor();
  });

  it('follows the output of a running stage, and cancels the job from the page after asking', async () => {
    const job = (await submit(url(), { name: 'browser-cancel', stages: [{ name: 'long', command: ['sh', '-c', 'echo started; sleep 300'] }] })).body;
    await page.goto(`${url()}/jobs/${job.id}`);
    await page.locator('g.dag-node[data-stage="long"][data-state="running"]').waitFor({ timeout: SLOW });
    await page.getByTestId('stage-log').getByText('started').waitFor({ timeout: SLOW });
    await page.getByText('following…').waitFor();
    await page.getByRole('button', { name: 'Cancel job' }).click();
    const dialog = page.getByRole('dialog');
    await dialog.getByText('Its running stage is stopped').waitFor();
    // The safe choice has the focus: Escape or "Keep it" leaves the job alone.
    await dialog.getByRole('button', { name: 'Keep it' }).click();
    await dialog.waitFor({ state: 'hidden' });
    expect((await jobOf(url(), job.id)).state).toBe('running');
    await page.getByRole('button', { name: 'Cancel job' }).click();
    await dialog.getByRole('button', { name: 'Cancel the job' }).click();
    await badge('h1', 'canceled').waitFor({ timeout: SLOW });
    expect((await jobOf(url(), job.id)).state).toBe('canceled');
    await page.locator('g.dag-node[data-stage="long"][data-state="canceled"]').waitFor();
    // Its process goes; the log then says it is whole.
    await page.locator('.logs-state', { hasText: 'complete' }).waitFor({ timeout: SLOW });
  });

  it('reruns a failed job from its failed stage: the plan first, then the new job, its first stage reused, linked both ways', async () => {
    // The second stage fails until the marker exists: the rerun, made after it does, succeeds, reading the reused stage's output.
    const marker = join(sharedDir('gantry-rerun-'), 'fixed');
    const job = (
      await submit(url(), {
        name: 'browser-rerun',
        retry: { maxAttempts: 1 },
        stages: [
          { name: 'make', command: ['sh', '-c', 'echo rows=42 > "$GANTRY_OUTPUT_DIR/data.txt"'] },
          {
            name: 'check',
            needs: ['make'],
            command: ['sh', '-c', `cat "$GANTRY_INPUT_DIR/make/data.txt"; test -f ${marker} || { echo "not fixed yet" >&2; exit 3; }`],
          },
        ],
      })
    ).body;
    await until(
      'browser-rerun to fail',
      () => jobOf(url(), job.id),
      (j) => j.state === 'failed',
      SLOW,
    );
    failedJob = job.id;
    writeFileSync(marker, '');
    await page.goto(`${url()}/jobs/${job.id}`);
    await page.locator('g.dag-node[data-stage="check"][data-state="failed"]').click();
    const panel = page.locator('[data-stage-panel="check"]');
    await panel.getByRole('button', { name: 'Rerun from here' }).click();
    const dialog = page.getByRole('dialog');
    await dialog.getByRole('heading', { name: 'Rerun browser-rerun from check?' }).waitFor();
    const plan = dialog.getByTestId('rerun-plan');
    await plan.waitFor({ timeout: SLOW });
    const reused = plan.locator('tr[data-plan-stage="make"][data-plan="reused"]');
    expect(await reused.innerText()).toMatch(new RegExp(`${job.id}[\\s\\S]*1 file, 8 B`));
    expect(await plan.locator('tr[data-plan-stage="check"][data-plan="runs"]').innerText()).toContain('chosen');
    await plan.getByText(/Saves 0\.0 GPU-hours and .* of stage run time: 1 stage reused, 1 runs again\./).waitFor();
    // Nothing is made until it is confirmed; a double click makes one job (the dialog's Idempotency-Key).
    await dialog.getByRole('button', { name: 'Rerun from check' }).dblclick();
    await page.waitForURL((u) => u.pathname.startsWith('/jobs/') && !u.pathname.endsWith(job.id) && u.searchParams.get('stage') === 'check', { timeout: SLOW });
    const rerunId = decodeURIComponent(new URL(page.url()).pathname.split('/').pop()!);
    await page.getByTestId('rerun-of').getByRole('link', { name: job.id }).waitFor();
    expect(await page.getByTestId('rerun-of').innerText()).toBe(`rerun of ${job.id} from check`);
    const make = page.locator(`g.dag-node[data-stage="make"][data-state="succeeded"][data-reused="${job.id}"]`);
    await make.locator('.dag-reused').waitFor();
    await badge('h1', 'succeeded').waitFor({ timeout: SLOW });
    await page.getByTestId('stage-log').getByText('rows=42').waitFor({ timeout: SLOW });
    // The reused stage's panel: the badge, and a link to the job whose attempt ran it.
    await make.click();
    const makePanel = page.locator('[data-stage-panel="make"]');
    await makePanel.locator('h2 .badge-reused').waitFor();
    await makePanel.getByTestId('reused-from').getByRole('link', { name: job.id }).waitFor();
    const made = await jobOf(url(), rerunId);
    expect(made.rerunOf).toBe(job.id);
    expect(made.stages.find((s: { name: string }) => s.name === 'make').reused.jobId).toBe(job.id);
    const named = (await api(url(), '/v1/jobs?name=browser-rerun')).body.jobs.filter((j: { name: string }) => j.name === 'browser-rerun');
    expect(named.map((j: { id: string }) => j.id).sort()).toEqual([job.id, rerunId].sort());
    // And back: the original says what reran it.
    await makePanel.getByTestId('reused-from').getByRole('link', { name: job.id }).click();
    await page.getByTestId('rerun-as').getByRole('link', { name: rerunId }).waitFor();
    // The jobs list says which job a rerun reran, with a link to it.
    await page.goto(`${url()}/jobs?name=browser-rerun`);
    const row = page.locator(`tr[data-job="${rerunId}"] .rerun-of`);
    await row.getByRole('link', { name: job.id }).waitFor({ timeout: SLOW });
    expect(await row.innerText()).toBe(`rerun of ${job.id}`);
    expect(await page.locator(`tr[data-job="${job.id}"] .rerun-of`).count()).toBe(0);
  });

  it('a running job offers no plain rerun (the server refuses one), but "Cancel and rerun from here", its box ticked; unticked, the refusal; closing changes nothing', async () => {
    const job = (
      await submit(url(), {
        name: 'browser-rerun-running',
        stages: [
          { name: 'quick', command: ['sh', '-c', 'echo done > "$GANTRY_OUTPUT_DIR/out.txt"'] },
          { name: 'slow', needs: ['quick'], command: ['sh', '-c', 'echo started; sleep 300'] },
        ],
      })
    ).body;
    await page.goto(`${url()}/jobs/${job.id}?stage=slow`);
    await page.locator('g.dag-node[data-stage="slow"][data-state="running"]').waitFor({ timeout: SLOW });
    const panel = page.locator('[data-stage-panel="slow"]');
    await panel.getByRole('button', { name: 'Cancel and rerun from here' }).click();
    expect(await panel.getByRole('button', { name: 'Rerun from here', exact: true }).count()).toBe(0);
    // Named by its own title, though the page holds the cancel dialog too.
    const dialog = page.getByRole('dialog', { name: 'Rerun browser-rerun-running from slow?' });
    const cancelFirst = dialog.getByLabel('Cancel this job first');
    expect(await cancelFirst.isChecked()).toBe(true);
    const plan = dialog.getByTestId('rerun-plan');
    await plan.locator('tr[data-plan-stage="quick"][data-plan="reused"]').waitFor({ timeout: SLOW });
    await plan.locator('tr[data-plan-stage="slow"][data-plan="runs"]').waitFor();
    expect(await dialog.getByRole('button', { name: 'Cancel it and rerun from slow' }).isEnabled()).toBe(true);
    // Unticked, it is the plain rerun the button no longer offers: the server's refusal, in its words.
    await cancelFirst.uncheck();
    const refused = dialog.getByTestId('rerun-refused');
    await refused.getByText(`The server refuses: job ${job.id} is running: a rerun starts from an ended job`).waitFor({ timeout: SLOW });
    expect(await dialog.getByRole('button', { name: 'Rerun from slow' }).isDisabled()).toBe(true);
    await dialog.getByRole('button', { name: 'Not now' }).click();
    await dialog.waitFor({ state: 'hidden' });
    const still = await jobOf(url(), job.id);
    expect(still.state).toBe('running');
    expect(still.reruns ?? []).toEqual([]);
    await api(url(), `/v1/jobs/${job.id}/cancel`, { method: 'POST' });
    // The plan asked for here, and read again as the job changed.
    refusalsExpected(job.id);
  });

  it('a rerun whose reused outputs are gone from the artifact store is refused, naming the file; Escape closes the dialog', async () => {
    const job = await jobOf(url(), failedJob);
    const sha = job.stages.find((s: { name: string }) => s.name === 'make').outputs[0].sha256 as string;
    const blob = join(up().dataDir, 'artifacts', 'blobs', 'sha256', sha.slice(0, 2), sha);
    const bytes = readFileSync(blob);
    unlinkSync(blob);
    try {
      await page.goto(`${url()}/jobs/${failedJob}?stage=check`);
      await page.locator('[data-stage-panel="check"]').getByRole('button', { name: 'Rerun from here' }).click();
      const dialog = page.getByRole('dialog');
      await dialog
        .getByTestId('rerun-refused')
        .getByText(`stage make's committed outputs in job ${failedJob} are gone from the artifact store: data.txt (sha256:${sha}) missing`)
        .waitFor({ timeout: SLOW });
      expect(await dialog.getByRole('button', { name: 'Rerun from check' }).isDisabled()).toBe(true);
      await page.keyboard.press('Escape');
      await dialog.waitFor({ state: 'hidden' });
    } finally {
      writeFileSync(blob, bytes);
    }
    refusalsExpected(failedJob);
  });

  it('the pools page: queue depth, oldest wait and why a GPU stage waits, and the pools over time', async () => {
    const job = (await submit(url(), { name: 'wants-tpu', stages: [{ name: 'fit', resources: { gpu: { count: 1, type: 'tpu9' } }, command: ['true'] }] })).body;
    await page.getByRole('link', { name: 'Pools' }).click();
    const pool = page.locator('article[data-pool="gpu:tpu9"]');
    await pool.getByTestId('queued').getByText('1', { exact: true }).waitFor({ timeout: SLOW });
    await pool
      .locator('li[data-reason="gpu-type"]')
      .getByText(/lack 1 tpu9 GPU/)
      .waitFor();
    await page.locator('article[data-pool="gpu:h100"]').getByText('0 / 2').waitFor();
    await page.locator('article[data-pool="cpu"]').waitFor();
    expect(await page.locator('figure.chart').count()).toBe(4);
    await page.locator('figure.chart', { hasText: 'Stages queued' }).locator('.chart-legend li', { hasText: 'gpu:tpu9' }).waitFor();
    // It leaves the queue when canceled: the page follows.
    await api(url(), `/v1/jobs/${job.id}/cancel`, { method: 'POST' });
    await page.locator('article[data-pool="gpu:tpu9"]').waitFor({ state: 'detached', timeout: SLOW });
    // Gone from the pools, gone from the charts' legends (no line of a pool that is not there).
    await page.locator('.chart-legend li', { hasText: 'gpu:tpu9' }).first().waitFor({ state: 'detached', timeout: SLOW });
  });

  it('the machines page: health, scheduling, capacity, and what runs where', async () => {
    const job = (
      await submit(url(), { name: 'on-gpu', stages: [{ name: 'train', resources: { gpu: { count: 1, type: 'h100' } }, command: ['sleep', '300'] }] })
    ).body;
    await page.getByRole('link', { name: 'Machines' }).click();
    const gpu = page.locator('tr[data-machine="gpu-1"]');
    await gpu.getByRole('link', { name: 'on-gpu/train' }).waitFor({ timeout: SLOW });
    await gpu.locator('.badge', { hasText: 'ready' }).waitFor();
    await gpu.locator('.badge', { hasText: 'eligible' }).waitFor();
    await gpu.locator('.gpu.busy').waitFor();
    await page.locator('tr[data-machine="cpu-1"]').getByText('idle').waitFor();
    await api(url(), `/v1/jobs/${job.id}/cancel`, { method: 'POST' });
    await gpu.getByText('idle').waitFor({ timeout: SLOW });
  });

  it("containment: the machines page shows what each agent enforces and its problems; the job page an attempt's peak memory", async () => {
    // A machine played through the agent routes (the admin token may join), as an agent of protocol 3 would speak.
    const post = (path: string, body: unknown, token?: string) =>
      api(url(), path, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
        body: JSON.stringify(body),
      });
    const problem = hybridReport.problems[0]!;
    const reg = await post('/v1/agent/register', {
      name: 'fake-1',
      cpuMillis: 2000,
      memoryBytes: 2 ** 30,
      gpus: [],
      gpusDeclared: false,
      region: null,
      labels: { fake: 'yes' },
      agent: {
        version: 'test',
        host: 'fake',
        pid: 1,
        containment: hybridReport,
      },
    });
    expect(reg.status).toBe(200);
    const machine = { id: reg.body.machineId as string, credential: reg.body.credential as string };
    try {
      await page.getByRole('link', { name: 'Machines' }).click();
      const row = page.locator('tr[data-machine="fake-1"]');
      const cell = row.locator('td[data-containment="cgroup-hybrid"]');
      await cell.waitFor({ timeout: SLOW });
      expect(await cell.locator('.contain-item.on').allTextContents()).toEqual(['mem', 'cpu', 'pids']);
      expect(await cell.locator('.contain-item:not(.on)').allTextContents()).toEqual(['dev']);
      expect(await cell.locator('.contain').getAttribute('title')).toContain('user: dynamic 61184-65519');
      await cell.getByText('1 problem').click();
      await cell.getByText(problem).waitFor();
      // Every machine has the cell, whether its agent reported or not.
      expect(await page.locator('tr[data-machine="cpu-1"] td[data-containment]').count()).toBe(1);

      // A stage only it can run, killed by its memory limit: its outcome carries what it used.
      const job = (
        await submit(url(), {
          name: 'oom',
          stages: [{ name: 'fit', resources: { memory: '64Mi' }, placement: { labels: { fake: 'yes' } }, retry: { maxAttempts: 1 }, command: ['true'] }],
        })
      ).body;
      const assigned = await until(
        'the stage is assigned to fake-1',
        () => post(`/v1/agent/machines/${machine.id}/heartbeat`, { running: [], waitMs: 500 }, machine.credential),
        (r) => r.status === 200 && r.body.assignments.length > 0,
        SLOW,
      );
      const a = assigned.body.assignments[0];
      expect(a.limits).toMatchObject({ requestMemoryBytes: 64 * 2 ** 20, memoryBytes: null, network: false });
      expect((await post(`/v1/agent/attempts/${a.attemptId}/start`, { token: a.token, pid: 4242 }, machine.credential)).status).toBe(200);
      const done = await post(
        `/v1/agent/attempts/${a.attemptId}/complete`,
        {
          token: a.token,
          exitCode: null,
          signal: 'SIGKILL',
          reason: null,
          end: { kind: 'oom-killed', detail: 'killed by its memory limit at a peak of 64 MiB: raise resources.memory' },
          outputs: [],
          usage: { memoryPeakBytes: 64 * 2 ** 20, cpuSeconds: 0.5 },
        },
        machine.credential,
      );
      expect(done.status).toBe(200);
      await page.goto(`${url()}/jobs/${job.id}?stage=fit`);
      const peak = page.locator('[data-stage-panel="fit"] td[data-peak-memory]');
      await peak.waitFor({ timeout: SLOW });
      expect(await peak.textContent()).toBe('64 MiB');
      expect(await peak.getAttribute('class')).toContain('oom');
      expect(await peak.getAttribute('title')).toBe('100% of the 64 MiB requested');
      await page.locator('[data-stage-panel="fit"]').getByText('0.5 s').waitFor();
    } finally {
      // Out of the way of the tests after: it heartbeats no more.
      await post('/v1/machines/fake-1/cordon', {});
      await api(url(), '/v1/machines/fake-1', { method: 'DELETE' });
    }
  });

  it("a log cut past its head's cap says so above the log, whose end (the error) is there", async () => {
    const job = (
      await submit(url(), {
        name: 'loud',
        stages: [
          { name: 'spam', retry: { maxAttempts: 1 }, command: ['sh', '-c', "seq 1 60000 | sed 's/^/line /'; echo 'error: the real cause' >&2; exit 3"] },
        ],
      })
    ).body;
    await until(
      'the job fails',
      () => jobOf(url(), job.id),
      (j) => j.state === 'failed',
      SLOW,
    );
    await page.goto(`${url()}/jobs/${job.id}?stage=spam`);
    const note = page.getByTestId('log-cut');
    await note.waitFor({ timeout: SLOW });
    expect(await note.textContent()).toMatch(/^Log cut: [\d.]+ KiB dropped between its head and its end/);
    const log = page.getByTestId('stage-log');
    await log.getByText('cut here').waitFor();
    await log.locator('.log-stderr', { hasText: 'error: the real cause' }).waitFor();
  });

  it('says when the event stream cannot be opened, tries again by itself, and is live once it can', async () => {
    const refuse = (route: import('playwright-core').Route) => route.abort('connectionreset');
    await page.route('**/v1/events*', refuse);
    await page.reload();
    await page.locator('[data-live="reconnecting"]', { hasText: /Reconnecting/ }).waitFor({ timeout: SLOW });
    expect(await page.locator('[data-live]').getAttribute('title')).toMatch(/cannot reach the server/);
    await page.unroute('**/v1/events*', refuse);
    await page.locator('[data-live="live"]').waitFor({ timeout: SLOW });
  });

  it('unknown pages and jobs say so', async () => {
    await page.goto(`${url()}/nowhere`);
    await page.getByRole('heading', { name: 'Nothing here' }).waitFor();
    await page.goto(`${url()}/jobs/job_nope`);
    await page.getByText('No job job_nope.').waitFor();
    // The API's 404 for the job (read again when the event stream opens): expected here, and only here.
    const expected = (p: string) => p === '404 GET /v1/jobs/job_nope';
    expect(problems.filter(expected).length).toBeGreaterThan(0);
    problems.splice(0, problems.length, ...problems.filter((p) => !expected(p)));
  });

  it('sign-in: without a token the page asks for one; a bad token is refused; a team token sees its team only', async () => {
    const made = await api(url(), '/v1/tokens', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ kind: 'team', team: 'vision', name: 'vision board' }),
    });
    const teamToken = made.body.token as string;
    const mine = await fetch(`${url()}/v1/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${teamToken}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'vision-only', stages: [{ name: 'a', command: ['true'] }] }),
    }).then((r) => r.json());
    await until(
      'the vision job to end',
      () => jobOf(url(), mine.id),
      (j) => j.state === 'succeeded',
    );
    const fresh = await browser.page();
    const p = fresh.page;
    await p.goto(`${url()}/jobs?state=succeeded`);
    await p.waitForURL(/\/signin\?next=/);
    await p.getByLabel('Token').fill('gantry_admin_notatokenatall');
    await p.getByRole('button', { name: 'Sign in' }).click();
    await p.getByText('the token is not known to this server').waitFor();
    await p.getByLabel('Token').fill(teamToken);
    await p.getByRole('button', { name: 'Sign in' }).click();
    await p.locator(`tr[data-job="${mine.id}"]`).waitFor();
    expect(p.url()).toBe(`${url()}/jobs?state=succeeded`);
    expect(await p.locator('tr[data-job]').count()).toBe(1);
    await p.getByText('team vision · vision board').waitFor();
    await fresh.context.close();
    // The redirect to sign-in can cut short a request the first page had begun (its icon, on a
    // loaded machine): left behind, not a problem.
    expect(fresh.problems.filter((q) => !leftBehind(q))).toEqual(['401 GET /v1/whoami']);
  });

  it('at 420 px wide: no page scrolls sideways, the header stays two rows, the graph and tables scroll in their boxes, a cut box says all in its title, and no rerun is offered that the server would refuse', async () => {
    const job = (
      await submit(url(), {
        name: 'narrow-window-llm-eval-suite',
        stages: [
          { name: 'prepare-data', command: ['true'] },
          { name: 'eval-mmlu', needs: ['prepare-data'], command: ['sleep', '300'] },
          { name: 'eval-hellaswag', needs: ['prepare-data'], command: ['sleep', '300'] },
          { name: 'eval-truthfulqa-long-name', needs: ['prepare-data'], command: ['sleep', '300'] },
          { name: 'report', needs: ['eval-mmlu', 'eval-hellaswag', 'eval-truthfulqa-long-name'], command: ['true'] },
        ],
      })
    ).body;
    await page.setViewportSize({ width: 420, height: 800 });
    try {
      /** What a phone's reader would see go wrong: the page wider than the window, a header of many rows. */
      const layout = () =>
        page.evaluate(() => ({
          overflow: document.documentElement.scrollWidth - window.innerWidth,
          header: document.querySelector('.topbar')!.getBoundingClientRect().height,
          boxes: [...document.querySelectorAll('.dag-scroll, .table-wrap')].map((e) => Math.round(e.getBoundingClientRect().right)),
        }));
      // Running by the API first, with the job's stages and their attempts in the message if it is
      // not (CI timed out once on the page alone and could not say whether the cluster or the page
      // was slow); then the page must show it.
      await until(
        'eval-mmlu to run',
        () => jobOf(url(), job.id),
        (j: { stages: { name: string; state: string }[] }) => j.stages.some((s) => s.name === 'eval-mmlu' && s.state === 'running'),
        2 * SLOW,
      );
      await page.goto(`${url()}/jobs/${job.id}?stage=eval-mmlu`);
      await page.locator('g.dag-node[data-stage="eval-mmlu"][data-state="running"]').waitFor({ timeout: SLOW });
      const onJob = await layout();
      expect(onJob.overflow).toBe(0);
      expect(onJob.header).toBeGreaterThan(40);
      expect(onJob.header).toBeLessThanOrEqual(100);
      expect(onJob.boxes.length).toBeGreaterThan(0);
      for (const right of onJob.boxes) expect(right).toBeLessThanOrEqual(420);
      // The graph is wider than the window: it scrolls inside its box, not the page.
      expect(await page.locator('.dag-scroll').evaluate((e) => e.scrollWidth > e.clientWidth)).toBe(true);
      // The box of a stage that needs three is cut; its title has every one.
      expect(await page.locator('g.dag-node[data-stage="report"] > title').textContent()).toContain(
        'needs eval-mmlu, eval-hellaswag, eval-truthfulqa-long-name',
      );
      // A running job: no plain rerun anywhere (the server refuses one); from eval-mmlu not even a
      // cancel and rerun, which would reuse eval-hellaswag, canceled by it.
      const panel = page.locator('[data-stage-panel="eval-mmlu"]');
      await panel.waitFor();
      expect(await page.getByRole('button', { name: 'Rerun from here', exact: true }).count()).toBe(0);
      expect(await panel.getByRole('button', { name: /rerun/i }).count()).toBe(0);
      for (const path of ['/jobs', '/pools', '/machines']) {
        await page.goto(`${url()}${path}`);
        await page.locator('main.page h1').first().waitFor();
        const l = await layout();
        expect({ path, overflow: l.overflow }).toEqual({ path, overflow: 0 });
        expect(l.header).toBeLessThanOrEqual(100);
      }
      // The sign-in page (a fresh browser, no token): its example commands wrap inside the card.
      const fresh = await browser.page();
      try {
        await fresh.page.setViewportSize({ width: 420, height: 800 });
        await fresh.page.goto(`${url()}/signin`);
        await fresh.page.getByRole('button', { name: 'Sign in' }).waitFor();
        const signin = await fresh.page.evaluate(() => ({
          overflow: document.documentElement.scrollWidth - window.innerWidth,
          card: document.querySelector('.signin-card')!.getBoundingClientRect().right,
          cut: [...document.querySelectorAll('.signin-help code.block')].filter((c) => c.scrollWidth > c.clientWidth).length,
        }));
        expect(signin).toEqual({ overflow: 0, card: expect.any(Number) as number, cut: 0 });
        expect(signin.card).toBeLessThanOrEqual(420);
      } finally {
        await fresh.context.close();
      }
    } finally {
      await page.setViewportSize({ width: 1366, height: 850 });
      await api(url(), `/v1/jobs/${job.id}/cancel`, { method: 'POST' });
    }
  });

  it('ran without an error in the page (no script or style blocked by its policy)', () => {
    // Requests a page left behind when it went (a reload, a navigation) are aborted, and the event
    // streams the test cut off are reset; the unknown job's page reads it again when its event
    // stream opens, which on a loaded machine can answer its expected 404 after that test moved
    // on: nothing else may have failed.
    const benign = (p: string) => leftBehind(p) || p === 'failed GET /v1/events: net::ERR_CONNECTION_RESET' || p === '404 GET /v1/jobs/job_nope';
    expect(problems.filter((p) => !benign(p))).toEqual([]);
  });
});
