import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import type { MachineChange } from '../../api/contract/job-view.js';
import type { MachineAction } from '../client/gantry-client.js';
import type { CliIo } from '../render/cli-io.js';
import { renderMachineDetail } from '../render/machine-detail.js';
import { attemptCount, waitDrained } from '../render/wait-drained.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { positiveInt } from './positive-int.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';

export interface MachineActionOptions extends ClientOptions {
  /** drain: wait until drained. */
  wait?: boolean;
  /** drain: stop what runs there at once (requeued, no budget used). */
  now?: boolean;
  /** Poll interval in ms while waiting (default 1000). */
  interval?: number;
}

const EXIT_CODES = 'Exit codes: 0 done (or already so), 2 refused (the message says why), 4 no such machine, 5 server unreachable.';

const actions: { action: MachineAction; description: string; help: string }[] = [
  {
    action: 'cordon',
    description: 'Cordon a machine: no new work is placed there; what runs there goes on',
    help: `
The cordon lasts until \`gantry machine uncordon\`, whatever happens meanwhile: the agent restarting,
the machine being lost and coming back. A cordoned machine that stops heartbeating is still found
lost, and its stages run elsewhere. Cordoning a cordoned or draining machine changes nothing.
Stages that could only run there wait, with the reason "… 1 cordoned".
${EXIT_CODES}

Examples:
  $ gantry machine cordon gpu-3
  $ gantry machines --json | jq -r '.machines[] | select(.region == "eu-west") | .name' | xargs -n1 gantry machine cordon`,
  },
  {
    action: 'uncordon',
    description: 'Put a cordoned or draining machine back in service',
    help: `
Uncordoning a machine in service changes nothing.
${EXIT_CODES}

Examples:
  $ gantry machine uncordon gpu-3`,
  },
  {
    action: 'drain',
    description: 'Drain a machine: no new work; running stages finish; then it is drained',
    help: `
Nothing running is stopped: the machine shows "draining" in \`gantry machines\` until no attempt
holds resources there, then "drained". Then it is safe to stop its agent, and \`gantry machine
remove\` forgets it. \`gantry machine uncordon\` puts it back in service at any time.
--now stops what runs there at once instead: each running stage goes back to the queue (its
attempt "lost", with a reason saying it was stopped, charged to neither its retries nor its
infrastructure budget) and its agent kills it on its next heartbeat (TERM, the grace, KILL).
--wait waits until it is drained, with a progress line; Ctrl-C stops waiting (the drain goes on).
--json prints {changed, machine}; with --wait, once drained.

Exit codes: 0 draining (with --wait: drained), 1 it stopped draining while waited for (uncordoned),
2 refused, 4 no such machine (or removed while waited for), 5 server unreachable, 130 stopped waiting.

Examples:
  $ gantry machine drain gpu-3 --wait && ssh gpu-3 sudo systemctl stop gantry-agent && gantry machine remove gpu-3
  $ gantry machine drain gpu-3 --now --wait     # the host is going down now: requeue its stages`,
  },
  {
    action: 'remove',
    description: 'Remove (forget) a lost machine, or a cordoned or drained one with nothing running',
    help: `
The machine leaves \`gantry machines\` and the scheduler's capacity; jobs keep naming it in their
attempts (\`gantry status JOB\`). A machine in service, or one where attempts still hold resources,
is refused, with the reason. Stop its agent first: an agent still running there registers the
machine again (by name), back in service, as a new kubelet or Nomad client would.
${EXIT_CODES}

Examples:
  $ gantry machine remove gpu-3`,
  },
];

export function machineCommand(program: CommandUnknownOpts): void {
  const group = program
    .command('machine')
    .description('Show a machine in full, or take it out of service and back: show, cordon, uncordon, drain, remove')
    .addHelpText('after', `\nEach takes a machine's name (or id). \`gantry machines\` lists them.`);
  withClientOptions(
    group
      .command('show')
      .description('Show a machine in full: capacity, what runs there, and what its agent enforces')
      .argument('<name>', 'machine name or id'),
  )
    .addHelpText(
      'after',
      `
"containment" is what the machine's agent enforces on every stage it runs, as it said when it
registered (docs/containment.md): the mechanism (cgroup-v2, cgroup-v1, cgroup-hybrid or none),
whether memory, CPU, pids and devices are limited, how all of an attempt's processes are killed,
who stages run as, the sandbox, and the problems it found (why something is not enforced).
--json prints the machine as GET /v1/machines/NAME answers it, the whole report in "containment".
Exit codes: 0 shown, 4 no such machine, 5 server unreachable.

Examples:
  $ gantry machine show gpu-3
  $ gantry machine show gpu-3 --json | jq .containment.problems`,
    )
    .action(async (name, opts) => {
      await runAction((io) => runMachineShow(name, opts, io));
    });
  for (const a of actions) {
    const cmd = withClientOptions(group.command(a.action).description(a.description).argument('<name>', 'machine name or id'));
    if (a.action === 'drain') {
      cmd
        .option('--wait', 'wait until the machine is drained, showing progress')
        .option('--now', 'stop what runs there at once: its stages go back to the queue, no retry or budget used')
        .option('--interval <ms>', 'poll interval while waiting', positiveInt);
    }
    cmd.addHelpText('after', a.help).action(async (name, opts) => {
      const options = opts as MachineActionOptions;
      await runAction((io) => runMachineAction(a.action, name, options, io), { interruptible: Boolean(options.wait) });
    });
  }
}

export async function runMachineShow(ref: string, opts: ClientOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const m = await clientFor(opts).machine(ref);
    if (opts.json) io.stdout.write(`${JSON.stringify(m, null, 2)}\n`);
    else io.stdout.write(`${renderMachineDetail(m, (io.now ?? Date.now)(), { color: io.color })}\n`);
    return ExitCode.ok;
  });
}

export async function runMachineAction(action: MachineAction, ref: string, opts: MachineActionOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const client = clientFor(opts);
    let r = await client.machineAction(ref, action, { now: opts.now === true });
    if (action === 'drain' && opts.wait) {
      if (!opts.json) io.stdout.write(`${describe(action, r)}\n`);
      const w = await waitDrained(client, r.machine, { io, interval: opts.interval, quiet: opts.json });
      r = { ...r, machine: w.machine };
      if (opts.json) io.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
      if (w.interrupted) {
        io.stderr.write(`stopped waiting; ${w.machine.name} is still ${w.machine.scheduling}\n`);
        return ExitCode.interrupted;
      }
      if (w.machine.scheduling !== 'drained') {
        io.stderr.write(`gantry: ${w.machine.name} is no longer draining (now ${w.machine.scheduling})\n`);
        return ExitCode.failed;
      }
      if (!opts.json) io.stdout.write(`${w.machine.name} is drained: nothing runs there\n`);
      return ExitCode.ok;
    }
    if (opts.json) io.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
    else io.stdout.write(`${describe(action, r)}\n`);
    if (action === 'remove' && r.machine.health === 'ready') {
      io.stderr.write(`note: ${r.machine.name} was heartbeating; if its agent still runs, it registers the machine again, back in service\n`);
    }
    return ExitCode.ok;
  });
}

/** One line saying what happened, or that nothing needed to. */
function describe(action: MachineAction, r: MachineChange): string {
  const m = r.machine;
  const running = m.allocated.attempts === 0 ? 'nothing runs there' : `${attemptCount(m.allocated.attempts)} there go on`;
  switch (action) {
    case 'cordon':
      if (r.changed) return `cordoned ${m.name}: no new work is placed there; ${running}`;
      return m.scheduling === 'cordoned' ? `${m.name} was already cordoned` : `${m.name} is ${m.scheduling}: it already takes no new work`;
    case 'uncordon':
      if (!r.changed) return `${m.name} was already in service`;
      return `uncordoned ${m.name}: back in service${m.health === 'ready' ? '' : ` (but ${m.health}: nothing is placed there until it heartbeats)`}`;
    case 'drain': {
      const left = `${attemptCount(m.allocated.attempts)} still there${r.stopped ? ` (${attemptCount(r.stopped)} stopped, back in the queue; its agent kills them)` : ''}`;
      if (m.scheduling === 'drained') return r.changed ? `drained ${m.name}: nothing runs there` : `${m.name} was already drained`;
      return r.changed ? `draining ${m.name}: no new work; ${left}` : `${m.name} was already draining: ${left}`;
    }
    case 'remove':
      return `removed ${m.name} (it was ${m.health}); jobs that ran there still name it`;
  }
}
