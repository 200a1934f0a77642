import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    // Removes the agents' cgroup subtrees this run leaves behind (agents killed hard: cgroup-leftovers.ts).
    // Compiles the C launcher where the agent run from src/ looks for it (c-launcher-build.ts).
    globalSetup: ['test/support/cgroup-leftovers.ts', 'test/support/c-launcher-build.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // End-to-end tests start real servers and agents; two cores cannot run many at once.
    fileParallelism: true,
    maxWorkers: 2,
  },
});
