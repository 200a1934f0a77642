/**
 * What to tell a person about something thrown: an Error's message (not its stack, nor its name
 * twice), anything else as text, since a rejection can carry any value.
 */
export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
