import { Readable } from 'node:stream';
import { Type } from 'typebox';
import { NotFoundError } from '../domain/errors.js';
import type { ApiApp } from './api-app.js';
import type { ApiContext } from './api-context.js';
import type { Principal } from './auth/principal.js';
import { ownJob as ownJobOf } from './auth/job-visibility.js';
import { rankPrefixer } from './contract/rank-prefix.js';
import { StageParams } from './job-params.js';
import { logChunkView, streamLog } from './log-stream.js';

/** `GET /v1/jobs/{id}/stages/{stage}/logs`: a stage's log as text, pages of JSON, or followed live (log-stream.ts follows it). */
export function stageLogRoute(app: ApiApp, ctx: ApiContext): void {
  const { store } = ctx;
  const ownJob = (p: Principal | undefined, id: string) => ownJobOf(store, p, id);
  app.get(
    '/v1/jobs/:id/stages/:stage/logs',
    {
      // Follow (?follow=1) answers server-sent events; otherwise text or JSON, whatever the Accept.
      sse: { kind: 'manual', heartbeat: true },
      config: { access: 'user' },
      schema: {
        summary: "A stage's stdout and stderr (latest attempt unless `attempt` is given; a gang's rank 0 unless `rank` is given); live with `follow`",
        description:
          'Text streams the whole log. `format=json` returns one page of chunks (`limit`, default 1000); pass the last chunk id as `after` for the next. ' +
          '`follow=1` streams it as server-sent events until the log is complete: `chunk` messages (`id` the chunk id, `data` the chunk as in `format=json`), ' +
          'then one `end` (`data`: `{attempt, state}`), and the stream closes. It waits for a stage that has not run yet; a dropped stream resumes after `Last-Event-ID` (or `after`). ' +
          "A gang stage (docs/gangs.md): `rank=N` reads member N's log, `rank=all` every member's interleaved in the order stored (each JSON chunk has its `rank`; text prefixes each line with `[rank N] `).",
        tags: ['jobs'],
        params: StageParams,
        querystring: Type.Object({
          attempt: Type.Optional(Type.Integer({ minimum: 1 })),
          rank: Type.Optional(Type.String({ pattern: '^(all|[0-9]{1,3})$', description: "a gang's member (default 0), or all" })),
          after: Type.Optional(Type.Integer({ minimum: 0 })),
          limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 5000 })),
          format: Type.Optional(Type.Union([Type.Literal('text'), Type.Literal('json')])),
          follow: Type.Optional(
            Type.Unsafe<'1' | 'true' | '0' | 'false'>({
              type: 'string',
              enum: ['1', 'true', '0', 'false'],
              description: '1 or true: stream as server-sent events until the log is complete',
            }),
          ),
        }),
      },
    },
    async (req, reply) => {
      const { id, stage } = req.params;
      const q = req.query;
      const follow = q.follow === '1' || q.follow === 'true';
      await ownJob(req.principal, id);
      // A stage that has not run, or an attempt it never had, has no log to show: said, not an empty answer.
      const detail = (await store.jobGet({ jobId: id }))?.stages.find((s) => s.name === stage);
      if (!detail) throw new NotFoundError('stage', `${id}/${stage}`);
      // A followed log is a stream held open: it takes one of the token's slots (stream-slots.ts).
      if (follow) ctx.streams.hold(req.principal!.tokenId, reply);
      // Following the stage waits for it to start; an attempt named must be one it has had.
      const rank = q.rank === undefined ? 0 : q.rank === 'all' ? 'all' : Number(q.rank);
      // A rank the stage never has: said, not an empty log (the spec fixes a gang's size).
      const size = detail.definition.resources.machines ?? 1;
      if (rank !== 'all' && rank >= size)
        throw new NotFoundError(
          'log',
          `${id}/${stage}`,
          size === 1
            ? `stage ${stage} of job ${id} is not a gang: its only rank is 0`
            : `stage ${stage} of job ${id} is a gang of ${size}: its ranks are 0 to ${size - 1}`,
        );
      if (follow && q.attempt === undefined) return streamLog(ctx, reply, { jobId: id, stage, rank, ...(q.after !== undefined ? { after: q.after } : {}) });
      if (detail.attempts.length === 0)
        throw new NotFoundError('log', `${id}/${stage}`, `stage ${stage} of job ${id} has no log: it has not run yet (it is ${detail.state})`);
      if (q.attempt !== undefined && !detail.attempts.some((a) => a.number === q.attempt)) {
        const numbers = detail.attempts.map((a) => a.number);
        throw new NotFoundError('log', `${id}/${stage}`, `stage ${stage} of job ${id} has no attempt ${q.attempt}: its attempts are ${numbers.join(', ')}`);
      }
      if (follow) return streamLog(ctx, reply, { jobId: id, stage, attempt: q.attempt, rank, ...(q.after !== undefined ? { after: q.after } : {}) });
      const page = (afterId: number | undefined, limit: number) => store.stageLogs({ jobId: id, stage, attempt: q.attempt, rank, afterId, limit });
      const first = await page(q.after, q.limit ?? 1000);
      if (!first) throw new NotFoundError('stage', `${id}/${stage}`);
      if (q.format === 'json') return { chunks: first.map(logChunkView) };
      // Every member's lines, each said whose (one prefixer over the pages: a line split between two keeps one prefix).
      const prefix = rank === 'all' ? rankPrefixer() : null;
      // Text: streamed page by page, so a large log never sits whole in the server's memory.
      async function* pages() {
        let chunks = first!;
        while (chunks.length) {
          yield chunks.map((c) => (prefix ? prefix(logChunkView(c)) : c.data)).join('');
          chunks = (await page(chunks.at(-1)!.id, 1000)) ?? [];
        }
      }
      return reply.type('text/plain; charset=utf-8').send(Readable.from(pages()));
    },
  );
}
