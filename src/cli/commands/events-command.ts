import type { CommandUnknownOpts } from '@commander-js/extra-typings';
import type { EventView } from '../../api/contract/job-view.js';
import type { CliIo } from '../render/cli-io.js';
import { jobStateOfEvent } from '../../api/contract/event-types.js';
import { isTerminalJobState } from '../../api/contract/states.js';
import { clientFor, withClientOptions, type ClientOptions } from './client-options.js';
import { ExitCode } from './exit-codes.js';
import { reportingErrors } from './report-error.js';
import { runAction } from './run-action.js';
import { unknownFilter } from './unknown-filter.js';

export interface EventsOptions extends ClientOptions {
  follow?: boolean;
  team?: string;
  pool?: string;
}

/** A job's own end: its `job:<terminal state>` event. */
const isJobEnd = (type: string) => isTerminalJobState(jobStateOfEvent(type) ?? '');

/** `gantry events [JOB] [--follow]`: the event log, and live from the event stream. */
export function eventsCommand(program: CommandUnknownOpts): void {
  withClientOptions(
    program
      .command('events')
      .description("What happened: a job's events, or everything live (--follow)")
      .argument('[job]', 'one job (default: every job and machine you may see)')
      .option('--follow', 'keep printing as things happen (server-sent events; with JOB, until it ends)')
      .option('--team <team>', "with --follow and no JOB: one team's jobs")
      .option('--pool <pool>', 'with --follow: stages of one pool (e.g. gpu:h100)'),
  )
    .addHelpText(
      'after',
      `
One line an event: its time, its type (stage:running, attempt:preempted, machine:lost, …), without
JOB its job's id ("-" for a machine's), and what it says. A --team or --pool the server does not
know is refused (exit 2) with the names it knows. --json prints one JSON object a line. With
--follow a dropped connection is opened again from the last event printed, so nothing is missed or
printed twice.
Exit codes: 0 done (or interrupted), 2 unknown team or pool, 4 no such job, 5 server unreachable,
6 token refused, 141 the reader went away (gantry events JOB | head).

Examples:
  $ gantry events JOB
  $ gantry events JOB --follow
  $ gantry events --follow --pool gpu:h100 --json | jq .message`,
    )
    .action(async (...args: unknown[]) => {
      const [job, opts] = args as [string | undefined, EventsOptions];
      await runAction((io) => runEvents(job, opts, io));
    });
}

/** Every event of a job, page after page (the server answers at most 1,000 at a time). */
async function allEvents(client: { events(id: string, after?: number): Promise<EventView[]> }, job: string): Promise<EventView[]> {
  const out: EventView[] = [];
  for (;;) {
    const page = await client.events(job, out.at(-1)?.seq);
    out.push(...page);
    if (page.length === 0) return out;
  }
}

export async function runEvents(job: string | undefined, opts: EventsOptions, io: CliIo): Promise<number> {
  return reportingErrors(io, async () => {
    const client = clientFor(opts);
    // Over every job a stage's or an attempt's line ("stage train running") needs its job's id to
    // mean anything; a machine's event has none ("-"). Ids are "job_" and 20 characters: one width.
    const jobColumn = (e: EventView) => (job === undefined ? `${(e.jobId ?? '-').padEnd(24)} ` : '');
    const print = (e: EventView) =>
      io.stdout.write(opts.json ? `${JSON.stringify(e)}\n` : `${new Date(e.at).toISOString()}  ${e.type.padEnd(22)} ${jobColumn(e)}${e.message}\n`);
    if (!opts.follow) {
      if (job === undefined) {
        io.stderr.write('gantry: events without a JOB needs --follow (the whole log is long; gantry events JOB for one job)\n');
        return ExitCode.usage;
      }
      for (const e of await allEvents(client, job)) print(e);
      return ExitCode.ok;
    }
    const unknown = await unknownFilter(client, {
      ...(opts.team !== undefined ? { team: opts.team } : {}),
      ...(opts.pool !== undefined ? { pool: opts.pool } : {}),
    });
    if (unknown) {
      io.stderr.write(`gantry: ${unknown}\n`);
      return ExitCode.usage;
    }
    // The job's past first (and a 404 for a job that does not exist), then live from its last.
    let after: number | undefined;
    if (job !== undefined) {
      const past = await allEvents(client, job);
      for (const e of past) print(e);
      if (past.some((e) => isJobEnd(e.type))) return ExitCode.ok;
      after = past.at(-1)?.seq ?? 0;
    }
    const stop = new AbortController();
    io.signal?.addEventListener('abort', () => stop.abort(), { once: true });
    await client.followEvents(
      { ...(job ? { job } : {}), ...(opts.team ? { team: opts.team } : {}), ...(opts.pool ? { pool: opts.pool } : {}) },
      {
        signal: stop.signal,
        ...(after !== undefined ? { lastEventId: after } : {}),
        onDrop: (why) => io.stderr.write(`gantry: event stream dropped (${why}); reconnecting\n`),
        onEvent: (e) => {
          print(e);
          return !(job !== undefined && isJobEnd(e.type));
        },
      },
    );
    return ExitCode.ok;
  });
}
