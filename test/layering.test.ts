import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO } from './support/gantry-process.js';

/**
 * The layering of src/ (AGENTS.md, "Layers"): which folder may import which. Every import counts,
 * type-only and dynamic ones too, in .ts and .tsx files (the dashboard's components); tests
 * (*.test.ts) may cross layers to set a scene and are not scanned. A layer imports its own files and the layers listed for it, nothing else.
 */
const LAYERS: Record<string, readonly string[]> = {
  // The wire: what the CLI, the dashboard and the SDK read. It imports nothing of Gantry's, so a
  // client can take it without the server (and a browser bundle without Node).
  contract: [],
  // The job spec language (reading files, sweeps, quantities, path-named problems): shared by the
  // CLI and the API, below both.
  spec: [],
  // Small helpers every layer but the contract and the spec may use (backoff, sleep, error text):
  // pure or nearly, no package, nothing Node-only, so the dashboard's browser bundle takes them too.
  lib: [],
  domain: ['spec', 'lib'],
  // The topics and their payloads are the store's as much as the bus's: declared once, in domain/topic.ts.
  bus: ['domain', 'lib'],
  scheduler: ['domain', 'spec', 'lib'],
  advancer: ['domain', 'spec', 'lib'],
  // The autoscaler's rows and verbs are its contract (autoscale/autoscale-row.ts), which Store extends.
  store: ['domain', 'spec', 'scheduler', 'advancer', 'autoscale', 'lib'],
  reconciler: ['store', 'domain', 'spec', 'scheduler', 'advancer', 'bus', 'lib'],
  // Stage outputs on disk, and their collection against the store's references (docs/rerun.md).
  artifacts: ['store', 'domain', 'spec', 'lib'],
  // The autoscaler's rows, pools and words (issue 30): what GET /v1/autoscale, machines and explain show.
  api: ['contract', 'spec', 'domain', 'store', 'artifacts', 'scheduler', 'advancer', 'bus', 'autoscale', 'lib'],
  agent: ['contract', 'spec', 'domain', 'lib'],
  // Autoscaling decisions (issue 30): pure, over the scheduler's snapshot and its planPlacements.
  autoscale: ['domain', 'spec', 'scheduler', 'lib'],
  sim: ['domain', 'spec', 'scheduler', 'autoscale', 'lib'],
  // The composition root (config → store, bus, loops, API; `gantry server`, `up`, `migrate`) may use
  // every layer but the CLI's.
  server: ['api', 'contract', 'spec', 'domain', 'store', 'artifacts', 'scheduler', 'advancer', 'reconciler', 'bus', 'agent', 'autoscale', 'lib'],
  cli: ['contract', 'spec', 'lib'],
};

/** A layer not listed above (a dashboard, an SDK) is a client: the wire, the spec and the helpers only. */
const CLIENT: readonly string[] = ['contract', 'spec', 'lib'];

/** Packages the contract may use: a browser bundle takes it as it is. */
const CONTRACT_PACKAGES = ['typebox'];

/** Single arrows allowed against the rule, each with its reason. */
const EXCEPTIONS: Record<string, string> = {
  // One `gantry` binary carries the client and the processes: main registers the commands that
  // start a server or an agent, which live with what they start, and loads them only when asked
  // (lazily, so a client command never loads the server, and `gantry agent` only the agent).
  'cli/main.ts -> server/up-command.ts': 'the binary registers `gantry up`',
  'cli/main.ts -> server/server-command.ts': 'the binary registers `gantry server`',
  'cli/main.ts -> server/migrate-command.ts': 'the binary registers `gantry migrate`',
  'cli/main.ts -> agent/agent-command.ts': 'the binary registers `gantry agent`',
  // `gantry sim` replays a trace with the pure planner in this process: no server to ask.
  'cli/main.ts -> sim/sim-command.ts': 'the binary registers `gantry sim`',
};

const SRC = join(REPO, 'src');

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    if (statSync(p).isDirectory()) return sources(p);
    return /\.tsx?$/.test(p) && !/\.test\.tsx?$/.test(p) ? [p] : [];
  });
}

/** `api/contract/x.ts` is in layer contract; `store/kysely/y.ts` in store. */
function layerOf(file: string): string {
  const parts = relative(SRC, file).split('/');
  return parts[0] === 'api' && parts[1] === 'contract' ? 'contract' : parts.length === 1 ? '(src)' : parts[0]!;
}

const IMPORTS = [
  /\b(?:import|export)\s[^;'"]*?\bfrom\s*['"]([^'"]+)['"]/g, // import … from, export … from, import type
  /\bimport\s*\(\s*['"]([^'"]+)['"]\s*\)/g, // import('…'), also in type positions
  /^\s*import\s+['"]([^'"]+)['"]/gm, // import '…' for its effects
];

function specifiers(text: string): string[] {
  return IMPORTS.flatMap((re) => [...text.matchAll(re)].map((m) => m[1]!));
}

interface Arrow {
  from: string;
  to: string;
  key: string;
}

function arrows(): { layer: Arrow[]; packages: Arrow[] } {
  const layer: Arrow[] = [];
  const packages: Arrow[] = [];
  for (const file of sources(SRC)) {
    const from = relative(SRC, file);
    for (const spec of specifiers(readFileSync(file, 'utf8'))) {
      if (!spec.startsWith('.')) {
        if (layerOf(file) === 'contract' || layerOf(file) === 'lib') packages.push({ from, to: spec, key: `${from} -> ${spec}` });
        continue;
      }
      // The dashboard imports without an extension (Vite resolves it); the rest name the .js.
      const target = normalize(join(dirname(file), spec)).replace(/\.js$/, '.ts');
      const a = layerOf(file);
      const b = layerOf(target);
      if (a === b) continue;
      const to = relative(SRC, target);
      layer.push({ from, to, key: `${from} -> ${to}` });
    }
  }
  return { layer, packages };
}

describe('layering of src/', () => {
  const found = arrows();

  it('finds the imports it checks (the scan itself works)', () => {
    // Known arrows, one per kind of import the scan must see: static, type-only, dynamic, and one
    // from a dashboard component (.tsx).
    const keys = new Set(found.layer.map((a) => a.key));
    expect(keys).toContain('cli/main.ts -> agent/agent-command.ts');
    expect(keys).toContain('cli/main.ts -> server/server-command.ts');
    expect(keys).toContain('api/api-context.ts -> store/store.ts');
    expect(keys).toContain('web/pages/job-page.tsx -> api/contract/job-view');
  });

  it('each layer imports only the layers below it', () => {
    const wrong = found.layer
      .filter((a) => !EXCEPTIONS[a.key])
      .filter((a) => !(LAYERS[layerOf(join(SRC, a.from))] ?? CLIENT).includes(layerOf(join(SRC, a.to))))
      .map(
        (a) => `${a.key}  (${layerOf(join(SRC, a.from))} may import ${(LAYERS[layerOf(join(SRC, a.from))] ?? CLIENT).join(', ') || 'nothing outside itself'})`,
      );
    expect(wrong).toEqual([]);
  });

  it('the contract uses no package but typebox (a browser takes it as it is)', () => {
    const wrong = found.packages
      .filter((a) => layerOf(join(SRC, a.from)) === 'contract')
      .filter((a) => !CONTRACT_PACKAGES.some((p) => a.to === p || a.to.startsWith(`${p}/`)))
      .map((a) => a.key);
    expect(wrong).toEqual([]);
  });

  it('the helpers (lib/) use no package, not even node: (the dashboard bundles them)', () => {
    expect(found.packages.filter((a) => layerOf(join(SRC, a.from)) === 'lib').map((a) => a.key)).toEqual([]);
  });

  it('every exception is still needed (a stale one would hide a new arrow)', () => {
    const keys = new Set(found.layer.map((a) => a.key));
    expect(Object.keys(EXCEPTIONS).filter((k) => !keys.has(k))).toEqual([]);
  });
});
