import { type ChildProcess, spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import type { Command } from '@commander-js/extra-typings';
import { discoverGpus } from '../agent/machine/gpu-discovery.js';
import { type ClusterFile, type ClusterMachine, defaultCluster, parseClusterFile } from './cluster-file.js';
import { serverConfigFrom, serverLogFile, startServer } from './server-command.js';
import { PRIVATE_UMASK } from '../lib/private-mode.js';
import { tryHint } from './try-hint.js';
import { agentCommandLine } from './agent-command-line.js';

function describe(m: ClusterMachine): string {
  const gpus = m.gpus === 'detect' ? ', real GPUs' : m.gpus ? `, ${m.gpus.count}x ${m.gpus.type} (declared)` : '';
  return `${m.name} (${m.cpu ?? 'all'} CPU, ${m.memory ?? 'all'} memory${gpus}${m.region ? `, ${m.region}` : ''})`;
}

/**
 * `gantry up`: the control plane in this process, and one `gantry agent` child process per
 * machine of the cluster, speaking HTTP to the API like an agent on another host would. An agent
 * that dies is started again with the same data directory, so it reports what it finished.
 */
export function upCommand(program: Command): void {
  program
    .command('up')
    .description('Run everything on this machine: the control plane plus local agents for a CPU and a GPU cluster')
    .option('--data-dir <dir>', 'database, artifacts, agent state and logs', './.gantry')
    .option('--port <n>', 'API port', '7070')
    .option('--host <addr>', 'address to listen on', '127.0.0.1')
    .option('--cluster <file>', 'YAML file listing the machines to stand in for (default: cpu-1 and gpu-1)')
    .option('--tls-cert <file>', 'serve HTTPS with this certificate (PEM; its names must include 127.0.0.1 for the local agents); default $GANTRY_TLS_CERT')
    .option('--tls-key <file>', 'its private key (PEM); default $GANTRY_TLS_KEY')
    .option('--ca <file>', 'the CA the local agents trust for it (default: the certificate itself, if self-signed); default $GANTRY_CA')
    .option('--json', 'print the address, the dashboard link, data directory and machines as one JSON line once up')
    .addHelpText(
      'after',
      '\nThe web dashboard is served at the same address (/); the link printed once up signs you in as\nthe admin: it carries a one-time code (in the #fragment, which no request carries) that signs in\nonce, within 15 minutes, for a session of 12 hours; afterwards sign in with a token. docs/dashboard.md\n\nExamples:\n  gantry up\n  gantry up --cluster examples/cluster.yaml --port 7171\n\nThen: gantry submit examples/pipeline.yaml --watch\n',
    )
    .action(async (flags) => {
      // Whatever the umask it was started with, what it and its agents make is their user's only.
      process.umask(PRIVATE_UMASK);
      const config = serverConfigFrom(flags);
      let cluster: ClusterFile;
      if (flags.cluster) cluster = parseClusterFile(flags.cluster);
      else cluster = defaultCluster(((await discoverGpus()) ?? []).length > 0);
      const cp = await startServer(config, { logFile: serverLogFile(config.dataDir), holdsAgents: true });
      // The local agents join as remote ones do, with a join token; each then speaks with its machine's own credential.
      const { ensureTokenFile, joinTokenFile, adminTokenFile } = await import('./token-file.js');
      const joining = await ensureTokenFile(cp.store, joinTokenFile(config.dataDir), 'join', "join (gantry up's local agents)", Date.now());
      const ca = flags.ca ?? process.env.GANTRY_CA ?? (config.tls ? (flags.tlsCert ?? process.env.GANTRY_TLS_CERT) : undefined);
      const agentEnv = { ...process.env, GANTRY_JOIN_TOKEN: joining.token, ...(ca ? { GANTRY_CA: resolve(ca) } : {}) };
      const children = new Map<string, ChildProcess>();
      let stopping = false;
      const startAgent = (m: ClusterMachine) => {
        const dir = resolve(join(config.dataDir, 'agents', m.name));
        const agent = agentCommandLine(m, cp.url, dir);
        const child = spawn(agent.command, agent.args, {
          stdio: ['pipe', 'inherit', 'inherit'],
          env: agentEnv,
        });
        children.set(m.name, child);
        child.on('exit', (code, signal) => {
          children.delete(m.name);
          if (stopping) return;
          process.stderr.write(`gantry up: agent ${m.name} exited (${signal ?? `code ${code}`}); restarting it in 1 s\n`);
          setTimeout(() => !stopping && startAgent(m), 1000);
        });
      };
      for (const m of cluster.machines) startAgent(m);
      // The dashboard's sign-in link carries a one-time code, not a token: it signs in once, within
      // 15 minutes, for a session that expires (docs/security.md), so a link left in a terminal's
      // scrollback or a CI log is worth nothing later. It rides in the fragment, which the browser
      // keeps to itself (no request, no log carries it); the page wipes it from the address.
      await ensureTokenFile(cp.store, adminTokenFile(config.dataDir), 'admin', 'admin (made by the server at its first start)', Date.now());
      const dashboard = cp.dashboard.problem ? null : `${cp.url}/#signin=${cp.signInCodes.issue()}`;
      const banner = flags.json
        ? [
            JSON.stringify({
              url: cp.url,
              dashboard,
              dataDir: resolve(config.dataDir),
              adminTokenFile: resolve(adminTokenFile(config.dataDir)),
              machines: cluster.machines,
            }),
          ]
        : [
            `Gantry is up at ${cp.url}`,
            dashboard ? `  dashboard: ${dashboard}  (signs you in as admin, once, within 15 minutes)` : `  dashboard: not available: ${cp.dashboard.problem}`,
            `  data:     ${resolve(config.dataDir)} (server log: ${serverLogFile(config.dataDir)})`,
            `  machines: ${cluster.machines.map(describe).join(', ')}`,
            `  API docs: ${cp.url}/openapi.json`,
            `  tokens:   admin ${resolve(adminTokenFile(config.dataDir))} (the CLI reads it from here), join ${resolve(joinTokenFile(config.dataDir))}`,
            ...tryHint({ url: cp.url, dataDir: config.dataDir, ...(ca ? { ca } : {}), cwd: process.cwd(), env: process.env }),
          ];
      process.stdout.write(banner.join('\n') + '\n');
      const stop = async () => {
        if (stopping) return;
        stopping = true;
        const exits = [...children.values()].map((c) => new Promise((r) => c.once('exit', r)));
        // Its agents (--exit-with-parent) kill their stages on any signal. SIGTERM, not SIGINT: on
        // Ctrl-C the terminal has sent them SIGINT already, and the same signal twice exits at once.
        for (const c of children.values()) c.kill('SIGTERM');
        await Promise.race([Promise.all(exits), new Promise((r) => setTimeout(r, config.killGraceMs + 2000))]);
        await cp.stop();
        process.exit(0);
      };
      process.once('SIGINT', () => void stop());
      process.once('SIGTERM', () => void stop());
    });
}
