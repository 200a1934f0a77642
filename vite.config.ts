import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

/**
 * The dashboard (src/web), built into dist/web, which the server serves at `/` (docs/dashboard.md).
 * `npm run dev:web` serves it with hot reload and sends the API's paths to a running Gantry
 * (GANTRY_SERVER, default http://127.0.0.1:7070).
 */
const api = process.env.GANTRY_SERVER ?? 'http://127.0.0.1:7070';

export default defineConfig({
  root: 'src/web',
  base: '/',
  plugins: [react()],
  build: { outDir: '../../dist/web', emptyOutDir: true, chunkSizeWarningLimit: 1024 },
  server: { proxy: { '/v1': api, '/metrics': api, '/healthz': api } },
});
