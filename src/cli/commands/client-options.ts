import type { Command, OptionValues } from '@commander-js/extra-typings';

export const DEFAULT_SERVER = 'http://127.0.0.1:7070';

/** The options every client command takes. */
export interface ClientOptions {
  server: string;
  json?: boolean;
}

/** Adds `--server` and `--json`; the default server comes from GANTRY_SERVER when set. */
export function withClientOptions<A extends unknown[], O extends OptionValues, G extends OptionValues>(cmd: Command<A, O, G>) {
  return cmd
    .option('--server <url>', 'Gantry server URL; $GANTRY_SERVER sets the default', process.env.GANTRY_SERVER ?? DEFAULT_SERVER)
    .option('--json', 'print machine-readable JSON instead of text');
}
