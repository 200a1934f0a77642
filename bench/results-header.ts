/**
 * The lines every results file opens with (STYLE.md: the machine and the commit, so that every
 * figure can be reproduced), and the flag readers of the simulator benches share. Written for
 * bench:gangs; bench/autoscale.ts, fgd.ts and trace-policies.ts still carry their own copies.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';

/** `--name VALUE` from argv, or `def`. */
/**
 * Asked for help (`--help`, `-h`): prints the bench file's opening comment, its usage, and exits,
 * rather than starting a run (which takes minutes and rewrites its results file).
 */
export function usageIfAsked(benchUrl: string): void {
  const args = process.argv.slice(2);
  if (!args.includes('--help') && !args.includes('-h')) return;
  const head = readFileSync(new URL(benchUrl), 'utf8').split('*/')[0]!;
  console.log(head.replace(/^\/\*\*\n/, '').replace(/^ \* ?/gm, ''));
  process.exit(0);
}

export function arg(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? (process.argv[i + 1] ?? def) : def;
}

/** `--name N`, a number ≥ 0, or `def`; anything else is refused, naming the flag. */
export function num(name: string, def: number): number {
  const v = Number(arg(name, String(def)));
  if (!Number.isFinite(v) || v < 0) throw new Error(`--${name} must be a number ≥ 0, got ${arg(name, '')}`);
  return v;
}

/** "**Machine:** …" and "**Commit:** …" bullets for a run from the checkout at `repo`. */
export function machineAndCommit(repo: string): string {
  const git = (...a: string[]) => {
    try {
      return execFileSync('git', a, { cwd: repo, encoding: 'utf8' }).trim();
    } catch {
      return '?';
    }
  };
  const dirty = git('status', '--porcelain', '--', 'src', 'bench', ':!bench/results') !== '';
  const cpu = cpus();
  return [
    `- **Machine:** ${process.platform} ${process.arch}, ${cpu.length} cores (${cpu[0]?.model ?? '?'}), ${(totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}; the figures are deterministic, the wall times noisy.`,
    `- **Commit:** \`${git('rev-parse', '--short', 'HEAD')}\`${dirty ? ' (with uncommitted changes in src/ or bench/)' : ''}.`,
  ].join('\n');
}
