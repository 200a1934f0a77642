import { type Command, Option } from '@commander-js/extra-typings';
import { runAgentCommand } from './run-agent-cli.js';

export function agentCommand(program: Command): void {
  program
    .command('agent')
    .description('Run an agent: register this machine with a Gantry server and run the stages placed on it')
    .option(
      '--server <url[,url…]>',
      'the Gantry API; several replicas comma-separated: on a failure to reach one, the next is used',
      process.env.GANTRY_SERVER ?? 'http://127.0.0.1:7070',
    )
    .option(
      '--token <token>',
      "a join token (gantry token create --kind join). Every user of the machine can read a command line (ps): prefer --token-file or $GANTRY_JOIN_TOKEN. Needed once: the machine's own credential, kept in --data-dir, is used from then on",
    )
    .option('--token-file <file>', 'read the join token from this file (the way to give it: unlike --token, it is not in the command line)')
    .option('--ca <file>', "the CA that signed the server's certificate, for a private one (PEM); default $GANTRY_CA")
    .option('--name <name>', 'machine name (default: host name); the same name after a restart is the same machine')
    .option('--data-dir <dir>', "the agent's own state: attempts' directories, exit statuses not yet reported")
    .option(
      '--checkpoint-dir <dir>',
      'where preemptible stages keep GANTRY_CHECKPOINT_DIR across their attempts (default: checkpoints/ in --data-dir; $GANTRY_CHECKPOINT_ROOT); a directory agents share lets a stage resume on another machine',
    )
    .option('--cpu <n>', 'CPUs to offer (default: detected)')
    .option('--memory <q>', 'memory to offer, e.g. 16Gi (default: detected)')
    .option('--gpus <type:n[:memory]>', "declare GPUs, e.g. h100:4, or h100:4:80Gi with each one's memory (shown as declared); default: found by nvidia-smi")
    .option('--region <r>', 'region of this machine')
    .option('--label <k=v>', 'a label (repeatable)', (v: string, acc: string[]) => [...acc, v], [] as string[])
    .option(
      '--containment <mode>',
      'auto: contain each attempt in cgroups and run it as a user of its own, with what this host offers, saying what is missing; require: refuse to start unless memory, CPU, pids and the kill are enforced; off: neither (docs/containment.md); default $GANTRY_CONTAINMENT or auto',
    )
    .option('--require-containment', 'the same as --containment require')
    .option('--uid-range <first-last>', "as root: the uids attempts run as, one each while it runs (default 61184-65519, systemd's DynamicUser range)")
    .option('--run-as <user>', 'as root: run every attempt as this existing user instead of a uid of --uid-range')
    .option('--pids-max <n>', "an attempt's limit of processes and threads when its stage sets no limits.pids (default 4096)")
    .option(
      '--sandbox',
      'also run each command under bubblewrap: read-only root, private /tmp, /dev with only its GPUs, no network unless the stage says network: true',
    )
    .option(
      '--gpu-sharing <mode>',
      'how stages given a share of a GPU are bounded: mps (the NVIDIA MPS daemon runs here: each gets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT from its share) or time-slicing (nothing bounds them; reported as such); default $GANTRY_GPU_SHARING or time-slicing (docs/machines.md)',
    )
    .option(
      '--advertise-addr <addr>',
      "where other machines reach this one (a host name or IP of the cluster network): gangs whose rank 0 runs here get it as MASTER_ADDR; default $GANTRY_ADVERTISE_ADDR or the host's name (docs/gangs.md)",
    )
    .option(
      '--gang-ports <first-last>',
      "ports kept for gangs: the server reserves each gang's MASTER_PORT among them when its rank 0 runs here, one per gang; keep other services off them (a rank 0 whose port another process holds is not started: it ends spawn-failed, saying so); default $GANTRY_GANG_PORTS or 29500-29599",
    )
    .option(
      '--reports-in-flight <n>',
      "reports (acknowledgements and outcomes, batched) sent before the first is answered, 1 to 8; an attempt's items still go in their order (docs/agent.md: more measured slower on PostgreSQL); default $GANTRY_REPORTS_IN_FLIGHT or 1",
    )
    .option('--json', 'log as JSON lines ({t, agent, msg}) on stderr')
    .option('--verbose', 'log every step of every attempt (started, exited), not one line per attempt (also GANTRY_LOG_LEVEL=debug)')
    .addOption(new Option('--exit-with-parent', 'stop when standard input closes (used by gantry up)').hideHelp())
    .addHelpText(
      'after',
      '\nStopping: SIGTERM stops the agent and leaves its running stages running; started again (same --name and\n' +
        '--data-dir) within the lease, it re-attaches to them and they finish in their first attempt.\n' +
        'SIGINT (Ctrl-C) stops it for good: it drains its machine (no new work) and exits once its stages have\n' +
        'finished; a second SIGINT stops them at once, requeued elsewhere without using a retry.\n' +
        '\nJoining: the first start needs a join token (an admin makes one: gantry token create --kind join); the machine\n' +
        'then gets its own credential, kept in --data-dir, and later starts need no token. Off this host, the server\n' +
        'must speak HTTPS (--ca for a private CA).\n' +
        '\nExample:\n  gantry agent --server https://10.0.0.5:7070 --ca ca.pem --token-file /etc/gantry/join.token --name gpu-7 --region us-east --label nvlink=true \\\n' +
        '    --advertise-addr 10.1.0.7 --gang-ports 29500-29599\n',
    )
    .action(async (flags) => {
      await runAgentCommand(flags);
    });
}
