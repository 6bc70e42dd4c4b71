// The dashboard's PromQL, loaded from queries.json: the one list the page
// runs and the gateway's tests evaluate on the engine, so they cannot drift.

const res = await fetch(new URL('./queries.json', import.meta.url), { cache: 'no-cache' });
if (!res.ok) throw new Error(`queries.json: HTTP ${res.status}`);
const all = await res.json();

/** Instant queries run on every refresh, by name. */
export const INSTANT = all.instant;
/** Range queries, by name; `$job` and `$node` are placeholders. */
export const RANGE = all.range;

/** A PromQL double-quoted string literal holding `s`. */
export function quote(s) {
  return '"' + String(s).replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n') + '"';
}

/** `expr` with `$job` / `$node` replaced by quoted label values. */
export function bind(expr, vars) {
  return expr.replace(/\$(job|node)\b/g, (_, k) => {
    if (!(k in vars)) throw new Error(`query needs $${k}`);
    return quote(vars[k]);
  });
}
