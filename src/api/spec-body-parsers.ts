import type { SpecBounds } from '../spec/spec-limits.js';
import { jsonTextBounds } from '../spec/json-text-bounds.js';
import { ValidationError } from '../spec/validation-error.js';
import type { ApiApp } from './api-app.js';

declare module 'fastify' {
  interface FastifyContextConfig {
    /**
     * A route that takes a job spec (submit, batch, rerun): its JSON body is checked against these
     * bounds before it is parsed (docs/security.md, "Specs"); YAML text is checked where it is read.
     */
    specBounds?: SpecBounds;
  }
}

/**
 * The body parsers of the spec routes. YAML specs arrive as text (read by the route, within its
 * bounds). JSON bodies of a route with `config.specBounds` are scanned first, in linear time, so
 * that a body nested a million deep or holding millions of values is refused (400, naming the
 * bound and its line) before JSON.parse builds it; other routes' bodies parse as before.
 */
export function specBodyParsers(app: ApiApp): void {
  app.addContentTypeParser(['application/yaml', 'application/x-yaml', 'text/yaml', 'text/plain'], { parseAs: 'string' }, (_req, body, done) => {
    done(null, body);
  });
  // Fastify's own parser (prototype poisoning refused, as by default) after the scan.
  const json = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    const bounds = req.routeOptions.config.specBounds;
    const text = typeof body === 'string' ? body : body.toString('utf8');
    const over = bounds ? jsonTextBounds(text, bounds, 'body') : undefined;
    if (over) {
      done(new ValidationError([{ path: '', message: over }]), undefined);
      return;
    }
    // Fastify's parser answers through `done` (its type also allows a promise, which it does not return).
    void json(req, text, done);
  });
}
