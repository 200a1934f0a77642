import { describe, expect, it } from 'vitest';
import { api, gantry, gantryUpForSuite, until } from '../support/gantry-process.js';

/** Progress from inside a stage (issue 11): what it writes to GANTRY_PROGRESS_FILE reaches the API and `gantry status`. */
describe('stage progress', () => {
  const up = gantryUpForSuite({ cluster: 'machines:\n  - { name: cpu-1, cpu: 2, memory: 2Gi }\n', machines: 1 });

  it('a running stage that writes progress shows it in its attempt and as a bar in gantry status', async () => {
    const job = await api(up().url, '/v1/jobs', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        name: 'progress',
        stages: [{ name: 'train', command: ['sh', '-c', 'echo \'{"progress": 0.6, "message": "epoch 6/10"}\' >> "$GANTRY_PROGRESS_FILE"; sleep 8'] }],
      }),
    });
    const id = job.body.id as string;
    const seen = await until(
      'progress reported',
      () => api(up().url, `/v1/jobs/${id}`),
      (r) => r.body.stages[0].attempts[0]?.progress?.fraction === 0.6,
      20_000,
    );
    expect(seen.body.stages[0].attempts[0].progress.message).toBe('epoch 6/10');
    const status = await gantry(['status', id, '--server', up().url]);
    expect(status.stdout).toContain('[######····] 60% epoch 6/10');
    await api(up().url, `/v1/jobs/${id}/cancel`, { method: 'POST' });
  }, 40_000);
});
