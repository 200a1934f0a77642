import { PassThrough, Readable } from 'node:stream';
import { Type } from 'typebox';
import { NotFoundError } from '../domain/errors.js';
import { overRoom } from '../domain/output-limits.js';
import { ValidationError } from '../spec/validation-error.js';
import { ArtifactStore } from '../artifacts/artifact-store.js';
import type { ApiApp } from './api-app.js';
import type { ApiContext } from './api-context.js';

/** An attempt's file: the wildcard is its path. No length limit: an unknown attempt is answered as it always was. */
const AttemptFileParams = Type.Object({
  id: Type.String(),
  '*': Type.String({ description: "the file's path under the attempt's outputs (the rest of the URL)" }),
});
const tags = ['agent'];

/**
 * An attempt's files: its outputs uploaded one by one, streamed to the artifact store (committed
 * later, with its outcome: missing-outputs.ts), and the committed outputs of the attempts upstream
 * of it, downloaded (docs/rerun.md).
 */
export function agentOutputRoutes(app: ApiApp, ctx: ApiContext): void {
  const { store, clock } = ctx;
  app.put(
    '/v1/agent/attempts/:id/outputs/*',
    {
      config: { access: 'machine' },
      schema: {
        summary: "Upload one output file into the attempt's own location (header x-gantry-token, body application/octet-stream)",
        tags,
        params: AttemptFileParams,
      },
      // Files are streamed to disk, never buffered, so no body limit here: the output limits bound
      // them as they stream (below). That is only safe for the raw stream, so any other content
      // type is refused before its parser could buffer it.
      bodyLimit: Number.MAX_SAFE_INTEGER,
      onRequest: async (req) => {
        if (!String(req.headers['content-type'] ?? '').startsWith('application/octet-stream')) {
          throw Object.assign(new Error(`content-type ${req.headers['content-type'] ?? '(none)'} is not accepted here; send application/octet-stream`), {
            statusCode: 415,
            code: 'unsupported_media_type',
          });
        }
      },
    },
    async (req, reply) => {
      const params = req.params;
      const token = Number(req.headers['x-gantry-token']);
      if (!Number.isInteger(token)) throw new ValidationError([{ path: 'header x-gantry-token', message: 'required, an integer' }]);
      const rel = ArtifactStore.checkPath(params['*']);
      const machineId = req.principal!.machineId!;
      const policy = ctx.config.outputs;
      // What the output limits leave this file (docs/security.md, "Output limits"): a length
      // declared over it is refused before a byte is read; a body without one is counted as it
      // streams and cut off at the first byte past it. The agent checks the stage's limits before it
      // sends anything: what is refused here is a rogue agent's, or over the team's bound (which
      // the agent does not know).
      const room = await store.outputUploadRoom({ attemptId: params.id, token, machineId, path: rel, policy });
      const declared = req.headers['content-length'] === undefined ? null : Number(req.headers['content-length']);
      if (declared !== null && declared > room.bytes) throw overRoom(room, rel, declared);
      // Into the content-addressed store, then recorded as this attempt's (fenced again, and the
      // limits checked again: the attempt may have been superseded, or another upload recorded,
      // while the file streamed); docs/rerun.md.
      const { blob, size } = await ctx.artifacts.putBlob(detached(uploadStream(req.body)), Math.max(room.bytes, 0), () => overRoom(room, rel, null));
      await store.outputUploaded({ attemptId: params.id, token, machineId, path: rel, blob, size, now: clock.now(), policy });
      return reply.status(204).send();
    },
  );

  app.get(
    '/v1/agent/artifacts/:id/*',
    {
      config: { access: 'machine' },
      schema: {
        summary: 'Download a committed output file of an upstream attempt: only an input of a stage placed on this machine and active (else 404)',
        tags,
        params: AttemptFileParams,
      },
    },
    async (req, reply) => {
      const params = req.params;
      const rel = ArtifactStore.checkPath(params['*']);
      // A machine reads only the inputs of the stages placed on it now (issue 28: any machine
      // credential read any output by attempt id). Anything else is not found, as if it did not
      // exist: a machine learns nothing of other jobs' attempts; the refusal is logged.
      const p = req.principal!;
      if (!(await store.machineReadsOutput({ machineId: p.machineId!, attemptId: params.id }))) {
        req.log.warn(
          { machineId: p.machineId, tokenId: p.tokenId, attemptId: params.id, path: rel },
          'machine download refused: not an input of a stage placed on that machine',
        );
        throw new NotFoundError('artifact', `${params.id}/${rel}`);
      }
      // Only outputs a stage committed are readable, never a failed or superseded attempt's
      // uploads; found through any manifest that names them, a rerun's reused stage's included,
      // so an upstream that was reused reads the same as one that ran (docs/rerun.md).
      const c = await store.committedBlob({ attemptId: params.id, path: rel });
      if (!c) throw new NotFoundError('artifact', `${params.id}/${rel}`);
      return reply.type('application/octet-stream').send(await ctx.artifacts.read(c.blob, `${params.id}/${rel}`));
    },
  );

  app.addContentTypeParser('application/octet-stream', (_req, payload, done) => done(null, payload));
}

/**
 * An upload's body: the request's own stream, as the octet-stream parser above passes it on (the
 * route's onRequest refuses any other content type), so the file goes to disk unbuffered.
 */
function uploadStream(body: unknown): Readable {
  if (!(body instanceof Readable)) throw new Error('an output upload arrived without its stream (the octet-stream parser passes the request on)');
  return body;
}

/**
 * The body as a stream of its own, so that an upload refused part-way (over its output limits)
 * destroys this one and not the request's: the connection stays up for the 413, then closes
 * (error-handler.ts) rather than taking the rest in. The request's failure still reaches it.
 */
function detached(req: Readable): Readable {
  const body = new PassThrough();
  req.on('error', (err) => body.destroy(err));
  req.on('close', () => {
    if (!req.readableEnded) body.destroy(new Error('the upload was cut short'));
  });
  return req.pipe(body);
}
