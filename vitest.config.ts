import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // End-to-end tests start real servers and agents; two cores cannot run many at once.
    fileParallelism: true,
    maxWorkers: 2,
  },
});
