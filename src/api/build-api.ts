import sseModule, { type fastifySSE } from '@fastify/sse';
import swagger from '@fastify/swagger';
import { Ajv } from 'ajv';
import Fastify, { LogController, type FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { ApiContext } from './api-context.js';
import { agentRoutes } from './agent-routes.js';
import { installErrorHandler } from './error-handler.js';
import { jobRoutes } from './job-routes.js';
import { rerunRoutes } from './rerun-routes.js';
import { artifactRoutes } from './artifact-routes.js';
import { machineRoutes } from './machine-routes.js';
import { auditRoutes, tokenRoutes } from './token-routes.js';
import { signInRoute } from './sign-in-route.js';
import { teamRoutes } from './team-routes.js';
import { eventRoutes } from './event-routes.js';
import { poolRoutes } from './pool-routes.js';
import { autoscaleRoutes } from './autoscale-routes.js';
import { dashboardRoutes } from './dashboard-routes.js';
import { installAuthentication } from './auth/authenticate.js';
import { RateLimiter } from './auth/rate-limiter.js';
import { installAuditOfRefusals } from './auth/audit-entry.js';

import { API_VERSION } from './contract/api-version.js';

/**
 * The HTTP API: the external routes for users and the internal ones for agents, one Fastify
 * instance, one route schema per route (validation, serialisation and the OpenAPI document).
 */
export async function buildApi(ctx: ApiContext, opts: { logger?: boolean | object } = {}): Promise<FastifyInstance> {
  const app = Fastify({
    ...(ctx.config.tls ? { https: { cert: ctx.config.tls.cert, key: ctx.config.tls.key } } : {}),
    logger: opts.logger ?? false,
    // Two lines per request at info would cost more than the request itself under load (agents
    // report many times a second); a line per request is kept at debug (hook below).
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: ctx.config.bodyLimitBytes,
    // Long-polls are held for a heartbeat interval; keep-alive connections outlive them.
    keepAliveTimeout: 60_000,
  }).withTypeProvider<TypeBoxTypeProvider>();
  // Query strings and path parameters arrive as text and need coercing ("limit=10" is a number);
  // JSON bodies must not be coerced, or a `null` would silently become "" or 0.
  const options = { removeAdditional: false, useDefaults: true, allErrors: true, strict: false } as const;
  const coercing = new Ajv({ ...options, coerceTypes: 'array' });
  const exact = new Ajv({ ...options, coerceTypes: false });
  app.setValidatorCompiler(({ schema, httpPart }) => (httpPart === 'body' ? exact : coercing).compile(schema));
  await app.register(swagger, {
    openapi: {
      info: { title: 'Gantry API', version: API_VERSION, description: 'Multi-stage jobs on GPU and CPU clusters.' },
      tags: [
        { name: 'jobs', description: 'Submit, watch, cancel and rerun jobs' },
        { name: 'artifacts', description: 'Stage outputs: collection and the size budget (admin)' },
        { name: 'machines', description: 'The cluster' },
        { name: 'agent', description: 'Internal: the protocol agents speak' },
        { name: 'tokens', description: 'Who may do what (admin)' },
      ],
    },
  });
  // Server-sent events (GET /v1/events), with a keep-alive comment every 15 s through proxies.
  // (The package's default export, loaded from CommonJS, is its module object: the plugin itself,
  // wrapped so that its decorations reach every route; its named export is the unwrapped one.)
  await app.register(sseModule as unknown as typeof fastifySSE, { heartbeatInterval: 15_000 });
  installErrorHandler(app);
  // No API answer is to be kept by a browser or a proxy: they carry jobs, logs, tokens' metadata.
  // The dashboard's files set their own caching (dashboard-routes.ts), which this leaves alone.
  app.addHook('onSend', async (_req, reply, payload) => {
    if (!reply.hasHeader('cache-control')) void reply.header('cache-control', 'no-store');
    return payload;
  });
  const { rateLimitPerSecond: people, agentRateLimitPerSecond: agents } = ctx.config;
  const limiter = new RateLimiter((kind) => (kind === 'machine' ? { perSecond: agents, burst: 5 * agents } : { perSecond: people, burst: 5 * people }));
  installAuthentication(app, { cache: ctx.tokens, now: () => ctx.clock.now(), limiter });
  installAuditOfRefusals(app, ctx.store, () => ctx.clock.now());
  // Only where debug lines are written: a hook costs every request something even when its line is dropped.
  const log = app.log as { isLevelEnabled?: (level: string) => boolean };
  if (log.isLevelEnabled?.('debug') ?? true) {
    app.addHook('onResponse', async (req, reply) => {
      req.log.debug({ method: req.method, url: req.url, status: reply.statusCode, ms: Math.round(reply.elapsedTime) }, 'request');
    });
  }
  // Open: a load balancer's probe carries no token, and the API's description is no secret.
  app.get('/healthz', { schema: { hide: true }, config: { access: ctx.config.openHealth ? 'open' : 'user' } }, async () => ({
    ok: true,
    version: API_VERSION,
    replica: ctx.replica.id,
    leader: ctx.replica.leader(),
  }));
  // Prometheus: a scraper sends a token too (authorization: credentials in its scrape config), or
  // GANTRY_METRICS_OPEN=1 opens it as the health check is (docs/metrics.md).
  const metrics = ctx.metrics;
  if (metrics) {
    app.get('/metrics', { schema: { hide: true }, config: { access: process.env.GANTRY_METRICS_OPEN === '1' ? 'open' : 'user' } }, async (_req, reply) =>
      reply.type('text/plain; version=0.0.4; charset=utf-8').send(await metrics.text()),
    );
  }
  app.get('/openapi.json', { schema: { hide: true }, config: { access: 'open' } }, async () => app.swagger());
  jobRoutes(app, ctx);
  rerunRoutes(app, ctx);
  artifactRoutes(app, ctx);
  machineRoutes(app, ctx);
  agentRoutes(app, ctx);
  tokenRoutes(app, ctx);
  signInRoute(app, ctx);
  teamRoutes(app, ctx);
  eventRoutes(app, ctx);
  poolRoutes(app, ctx);
  autoscaleRoutes(app, ctx);
  if (ctx.dashboard) dashboardRoutes(app, ctx.dashboard);
  auditRoutes(app, ctx);
  return app;
}
