// A small client for the gateway's Prometheus HTTP API (same origin).

const TIMEOUT_MS = 10000;
const TOKEN_KEY = 'canopy-token';

/** Thrown when the gateway asks for a token (401/403). */
export class AuthError extends Error {}

/** Remembers a bearer token for this browser tab (empty clears it). */
export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

async function call(path, params) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
  const headers = { 'Content-Type': 'application/x-www-form-urlencoded' };
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  try {
    const res = await fetch(path, {
      method: 'POST',
      headers,
      body: new URLSearchParams(params),
      signal: ctl.signal,
      cache: 'no-store',
    });
    if (res.status === 401 || res.status === 403) throw new AuthError(`HTTP ${res.status}`);
    const body = await res.json().catch(() => null);
    if (!body || body.status !== 'success') {
      throw new Error(body && body.error ? `${body.errorType}: ${body.error}` : `HTTP ${res.status}`);
    }
    return body.data;
  } catch (e) {
    if (e.name === 'AbortError') throw new Error(`no answer within ${TIMEOUT_MS / 1000} s`);
    throw e;
  } finally {
    clearTimeout(timer);
  }
}

/** Who the gateway says is asking; an open gateway answers admin. */
export const who = { role: 'admin', user: null };

/** Asks the gateway who this tab is; true when that changed. */
export async function refreshAccess() {
  const d = await call('api/v1/status/access', {});
  const user = d.user ?? null;
  const changed = d.role !== who.role || user !== who.user;
  who.role = d.role;
  who.user = user;
  return changed;
}

/** The title of a job's I/O share: a user token sees only its own jobs, so
 *  shares are of those jobs' I/O, not of the cluster's. */
export function ioShareLabel() {
  return who.role === 'user' ? `Share of ${who.user}'s job I/O` : 'Share of cluster I/O';
}

/** The gateway's stress thresholds (its [thresholds] config), snake_case. */
export async function thresholds() {
  return call('api/v1/status/stress_thresholds', {});
}

/** Instant query at the gateway's now: [{metric, value: [t, "v"]}]. */
export async function instant(expr) {
  const d = await call('api/v1/query', { query: expr });
  return d.resultType === 'vector' ? d.result : [];
}

/** Range query: [{metric, values: [[t, "v"], ...]}]. */
export async function range(expr, start, end, step) {
  const d = await call('api/v1/query_range', { query: expr, start, end, step });
  return d.result;
}
