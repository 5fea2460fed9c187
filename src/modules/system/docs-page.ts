/**
 * A self-contained HTML reference rendered from the OpenAPI document: no
 * script or stylesheet from elsewhere, so it reads the same offline.
 */

type Json = Record<string, any>;

const escape = (text: unknown) =>
  String(text ?? '').replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);

function schemaText(schema: Json | undefined, components: Json, depth = 0): string {
  if (!schema) return '';
  if (schema.$ref) {
    const name = String(schema.$ref).split('/').pop()!;
    return depth > 1 ? name : `${name} ${schemaText(components[name], components, depth + 1)}`;
  }
  if (schema.type === 'array') return `${schemaText(schema.items, components, depth)}[]`;
  if (schema.type === 'object' && schema.properties) {
    const required = new Set<string>(schema.required ?? []);
    const fields = Object.entries<Json>(schema.properties).map(
      ([name, field]) => `${name}${required.has(name) ? '' : '?'}: ${schemaText(field, components, depth + 1)}`,
    );
    return `{ ${fields.join(', ')} }`;
  }
  if (schema.enum) return schema.enum.map((value: unknown) => JSON.stringify(value)).join(' | ');
  if (schema.anyOf) return schema.anyOf.map((s: Json) => schemaText(s, components, depth)).join(' | ');
  return String(schema.type ?? schema.format ?? 'any');
}

export function renderDocsPage(document: Json): string {
  const components = document.components?.schemas ?? {};
  const operations: string[] = [];
  for (const [path, item] of Object.entries<Json>(document.paths ?? {})) {
    for (const [method, op] of Object.entries<Json>(item)) {
      const body = op.requestBody?.content?.['application/json']?.schema;
      const responses = Object.entries<Json>(op.responses ?? {})
        .map(([status, r]) => {
          const schema = r.content?.['application/json']?.schema;
          return `<li><b>${escape(status)}</b> ${escape(r.description)}${schema ? ` <code>${escape(schemaText(schema, components))}</code>` : ''}</li>`;
        })
        .join('');
      operations.push(`<section>
<h3><span class="m">${escape(method.toUpperCase())}</span> <code>${escape(path)}</code></h3>
<p>${escape(op.summary)}</p>${op.description ? `<p class="d">${escape(op.description)}</p>` : ''}
${body ? `<p>Body: <code>${escape(schemaText(body, components))}</code></p>` : ''}
<ul>${responses}</ul></section>`);
    }
  }
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${escape(document.info?.title)} API</title>
<style>body{font:15px/1.5 system-ui,sans-serif;max-width:960px;margin:2rem auto;padding:0 1rem;color:#1b1b1f}
section{border-top:1px solid #ddd;padding:.5rem 0}h3{margin:.3rem 0;font-size:1rem}.m{display:inline-block;min-width:4.5rem;color:#3b5bdb}
code{background:#f3f3f6;padding:0 .25rem;border-radius:3px;word-break:break-word}.d{color:#555}</style></head>
<body><h1>${escape(document.info?.title)} <small>${escape(document.info?.version)}</small></h1>
<p>${escape(document.info?.description)}</p><p>Machine-readable: <a href="/openapi.json">/openapi.json</a> (OpenAPI 3.1).</p>
${operations.join('\n')}</body></html>`;
}
