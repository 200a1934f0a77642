import { UnauthenticatedError } from '../domain/errors.js';
import type { ApiApp } from './api-app.js';
import type { ApiContext } from './api-context.js';
import { SIGN_IN_SESSION_MS } from './auth/sign-in-codes.js';
import { newTokenId, newTokenSecret, tokenHash } from './auth/token-secret.js';
import { ErrorBody } from './contract/job-view.js';
import { SignInRequest, SignInView } from './contract/sign-in-view.js';

/**
 * `POST /v1/sign-in`: a one-time sign-in code (the link `gantry up` prints) exchanged for the
 * dashboard's session, an admin token that expires in 12 hours. Open (the code is the
 * credential), and the code does nothing else: no other route takes it (docs/security.md).
 */
export function signInRoute(app: ApiApp, ctx: ApiContext): void {
  app.post(
    '/v1/sign-in',
    {
      config: { access: 'open', audit: 'dashboard.sign-in' },
      schema: {
        summary: "Exchange a one-time sign-in code (gantry up's dashboard link) for a session: an admin token that expires in 12 hours",
        tags: ['tokens'],
        body: SignInRequest,
        response: { 201: SignInView, 400: ErrorBody, 401: ErrorBody },
      },
    },
    async (req, reply) => {
      if (!ctx.signInCodes.take(req.body.code)) {
        req.log.warn({ ip: req.ip }, 'sign-in code refused (401): unknown, used or expired');
        throw new UnauthenticatedError(
          'this sign-in code is not valid: a code signs in once, within 15 minutes of the start that printed it; sign in with a token, or start gantry up again for a new link',
        );
      }
      const now = ctx.clock.now();
      const token = newTokenSecret('admin');
      const name = 'dashboard session (sign-in link)';
      const rec = await ctx.store.tokenCreate({
        id: newTokenId(now),
        kind: 'admin',
        team: null,
        name,
        hash: tokenHash(token),
        expiresAt: now + SIGN_IN_SESSION_MS,
        now,
        // Nobody's token asked: the code did, which only the holder of the server's terminal saw.
        audit: { tokenId: null, actor: `a sign-in code (from ${req.ip})`, action: 'dashboard.sign-in', target: null },
      });
      req.log.info({ tokenId: rec.id, ip: req.ip }, 'signed in with a sign-in code');
      return reply.status(201).send({
        token,
        expiresAt: new Date(rec.expiresAt!).toISOString(),
        who: { tokenId: rec.id, kind: 'admin' as const, team: null, name },
      });
    },
  );
}
