import type { ApiApp } from './api-app.js';
import { Type } from 'typebox';
import { NotFoundError } from '../domain/errors.js';
import { ValidationError } from '../spec/validation-error.js';
import { TokenKind } from '../domain/token-kind.js';
import type { TokenRecord } from '../store/records.js';
import type { ApiContext } from './api-context.js';
import { newTokenId, newTokenSecret, tokenHash } from './auth/token-secret.js';
import { auditBy } from './auth/audit-entry.js';
import { ErrorBody } from './contract/job-view.js';
import { TokenCreated, TokenCreateRequest, TokenView } from './contract/token-view.js';
import { AuditView } from './contract/audit-view.js';
import { WhoAmIView } from './contract/whoami-view.js';

const tags = ['tokens'];
const errors = { 400: ErrorBody, 401: ErrorBody, 403: ErrorBody, 404: ErrorBody };
const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

export function tokenView(t: TokenRecord): TokenView {
  return {
    id: t.id,
    kind: t.kind,
    team: t.team,
    machineId: t.machineId,
    name: t.name,
    createdAt: iso(t.createdAt)!,
    expiresAt: iso(t.expiresAt),
    revokedAt: iso(t.revokedAt),
  };
}

/** Admin's: make, list and revoke tokens (docs/security.md); and anyone's: which token am I. */
export function tokenRoutes(app: ApiApp, ctx: ApiContext): void {
  const { store, clock } = ctx;

  app.get(
    '/v1/whoami',
    {
      config: { access: 'user' },
      schema: {
        summary: 'The token this request came with: its kind, team and name (the dashboard signs in with it)',
        tags,
        response: { 200: WhoAmIView, 401: ErrorBody, 403: ErrorBody },
      },
    },
    async (req) => {
      const p = req.principal!;
      return { tokenId: p.tokenId, kind: p.kind as 'admin' | 'team', team: p.team, name: p.name };
    },
  );

  app.post(
    '/v1/tokens',
    {
      config: { access: 'admin', audit: 'token.create' },
      schema: {
        summary: 'Make a token: admin, team (for one team) or join (for agents joining); the token is in the answer, once',
        tags,
        body: TokenCreateRequest,
        response: { 201: TokenCreated, ...errors },
      },
    },
    async (req, reply) => {
      const body = req.body;
      if (body.kind === TokenKind.team && !body.team) throw new ValidationError([{ path: '/team', message: 'a team token needs its team' }]);
      if (body.kind !== TokenKind.team && body.team) throw new ValidationError([{ path: '/team', message: `a ${body.kind} token is for no team` }]);
      const now = clock.now();
      const token = newTokenSecret(body.kind);
      const rec = await store.tokenCreate({
        id: newTokenId(now),
        kind: body.kind,
        team: body.team ?? null,
        name: body.name,
        hash: tokenHash(token),
        expiresAt: body.expiresInDays === undefined ? null : now + Math.round(body.expiresInDays * 86_400_000),
        now,
        audit: auditBy(req, 'token.create'),
      });
      req.log.info({ tokenId: rec.id, kind: rec.kind, team: rec.team, by: req.principal?.tokenId }, 'token created');
      return reply.status(201).send({ token, info: tokenView(rec) });
    },
  );

  app.get(
    '/v1/tokens',
    {
      config: { access: 'admin' },
      schema: {
        summary: 'Tokens (never the tokens themselves); revoked ones with `all=true`',
        tags,
        querystring: Type.Object({ all: Type.Optional(Type.Boolean()) }),
        response: { 200: Type.Object({ tokens: Type.Array(TokenView) }), ...errors },
      },
    },
    async (req) => {
      const q = req.query;
      return { tokens: (await store.tokenList({ includeRevoked: q.all === true })).map(tokenView) };
    },
  );

  app.delete(
    '/v1/tokens/:id',
    {
      config: { access: 'admin', audit: 'token.revoke' },
      schema: {
        summary: 'Revoke a token: refused from the next request on (at once on this server)',
        tags,
        params: Type.Object({ id: Type.String({ maxLength: 100 }) }),
        response: { 200: Type.Object({ changed: Type.Boolean(), token: TokenView }), ...errors },
      },
    },
    async (req) => {
      const { id } = req.params;
      const r = await store.tokenRevoke({ id, now: clock.now(), audit: auditBy(req, 'token.revoke') });
      if (!r) throw new NotFoundError('token', id);
      ctx.tokens.forget({ tokenId: id });
      req.log.info({ tokenId: id, changed: r.changed, by: req.principal?.tokenId }, 'token revoked');
      return { changed: r.changed, token: tokenView(r.token) };
    },
  );
}

/** Admin's: the audit log, oldest first, a page at a time (`after` the last seq seen). */
export function auditRoutes(app: ApiApp, ctx: ApiContext): void {
  app.get(
    '/v1/audit',
    {
      config: { access: 'admin' },
      schema: {
        summary: 'The audit log: every change a person asked for, who, when and how it went (oldest first)',
        tags,
        querystring: Type.Object({
          after: Type.Optional(Type.Integer({ minimum: 0 })),
          since: Type.Optional(Type.String({ maxLength: 64, description: 'from this time on (an ISO time)' })),
          limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 5000, default: 1000 })),
        }),
        response: { 200: Type.Object({ entries: Type.Array(AuditView) }), ...errors },
      },
    },
    async (req) => {
      const q = req.query;
      const since = q.since === undefined ? undefined : Date.parse(q.since);
      if (since !== undefined && Number.isNaN(since)) throw new ValidationError([{ path: 'querystring/since', message: `${q.since} is not a time` }]);
      const rows = await ctx.store.auditList({
        ...(q.after !== undefined ? { afterSeq: q.after } : {}),
        ...(since !== undefined ? { since } : {}),
        limit: q.limit ?? 1000,
      });
      return { entries: rows.map((r) => ({ ...r, at: new Date(r.at).toISOString(), lastAt: new Date(r.lastAt).toISOString() })) };
    },
  );
}
