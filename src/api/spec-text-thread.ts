/**
 * The thread that reads large YAML spec and batch texts for the API (off-loop-spec-text.ts), so
 * that the seconds a megabyte of YAML costs the parser are not seconds the event loop is held.
 * The same functions as on the loop (the same bounds, the same messages); a ValidationError's
 * issues travel back as data.
 */
import { parentPort } from 'node:worker_threads';
import { parseJobBatchText, parseJobSpecText } from '../spec/job-spec-text.js';
import { ValidationError } from '../spec/validation-error.js';
import type { SpecTextReply, SpecTextRequest } from './off-loop-spec-text.js';

parentPort?.on('message', (m: SpecTextRequest) => {
  let reply: SpecTextReply;
  try {
    reply = { id: m.id, value: m.kind === 'spec' ? parseJobSpecText(m.text) : parseJobBatchText(m.text) };
  } catch (e) {
    reply = e instanceof ValidationError ? { id: m.id, issues: e.issues } : { id: m.id, error: e instanceof Error ? e.message : String(e) };
  }
  parentPort!.postMessage(reply);
});
