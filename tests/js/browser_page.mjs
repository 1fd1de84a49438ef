// The page's script (bundled with zarrita by build_page.mjs; no CDN). Loaded from one origin, it
// reads stores served by nginx on ANOTHER origin (?base=URL&stores=a,b), so every request is a
// cross-origin fetch: CORS on 200/206/404, the preflight of a suffix Range request, and the
// exposed Content-Range / ETag headers must work in the browser; with ?catalog=1 it checks
// datasets.json's published views as the viewer does. Sets window.__result (JSON).
import * as zarr from "zarrita";
import { readStores } from "./read_stores.mjs";

function hex(bytes) {
	return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// cache: "no-store" everywhere: Chromium would otherwise answer a range from its cached copy of
// the whole file, and the request would never reach nginx
const NO_STORE = { cache: "no-store" };

async function fetchInfo(url, init = {}) {
	try {
		const r = await fetch(url, { ...NO_STORE, ...init });
		const body = new Uint8Array(await r.arrayBuffer());
		return {
			status: r.status,
			type: r.type,
			contentRange: r.headers.get("Content-Range"),
			etag: r.headers.get("ETag"),
			lastModified: r.headers.get("Last-Modified"),
			contentLength: r.headers.get("Content-Length"),
			length: body.length,
			hex: hex(body.subarray(0, 64)),
			tailHex: hex(body.subarray(Math.max(0, body.length - 16))),
		};
	} catch (e) {
		return { error: `${e.name}: ${e.message}` };
	}
}

async function bytesOr(p) {
	try {
		const b = await p;
		return b === undefined ? { missing: true } : { length: b.length, hex: hex(b.subarray(0, 64)) };
	} catch (e) {
		return { error: `${e.name}: ${e.message}` };
	}
}

// raw HTTP checks on one chunk key of one store (`key` relative to the store, e.g. "X/0.0")
async function httpChecks(base, store, key) {
	const storeUrl = new URL(`${encodeURIComponent(store)}/`, base).href;
	const url = new URL(key, storeUrl).href;
	const plain = new zarr.FetchStore(storeUrl);
	const suffix = new zarr.FetchStore(storeUrl, { useSuffixRequest: true });
	return {
		pageOrigin: location.origin,
		url,
		full: await fetchInfo(url),
		// a simple range (CORS-safelisted request header): no preflight needed
		range: await fetchInfo(url, { headers: { Range: "bytes=0-9" } }),
		// a suffix range is not safelisted: the browser sends an OPTIONS preflight first
		suffixRange: await fetchInfo(url, { headers: { Range: "bytes=-7" } }),
		head: await fetchInfo(url, { method: "HEAD" }),
		missing: await fetchInfo(new URL("no-such-key/.zarray", storeUrl).href),
		zarritaRange: await bytesOr(plain.getRange(`/${key}`, { offset: 2, length: 5 }, NO_STORE)),
		zarritaSuffixHead: await bytesOr(plain.getRange(`/${key}`, { suffixLength: 6 }, NO_STORE)),
		zarritaSuffixRange: await bytesOr(suffix.getRange(`/${key}`, { suffixLength: 6 }, NO_STORE)),
		zarritaMissing: await bytesOr(plain.get("/no-such-key/.zarray", NO_STORE)),
	};
}

// The catalog a viewer opens on (?catalog=1): datasets.json, and each published view it names
// fetched and checked as the Cellucid viewer checks it before applying it: the exact length and
// the SHA-256 (crypto.subtle.digest) of the bytes received.
async function catalogChecks(base) {
	const r = await fetch(new URL("datasets.json", base).href, NO_STORE);
	const catalog = await r.json();
	const views = [];
	for (const d of catalog.datasets) {
		if (!d.session) continue;
		const url = new URL(d.session.path, base).href;
		const resp = await fetch(url, NO_STORE);
		const bytes = new Uint8Array(await resp.arrayBuffer());
		const sha256 = hex(new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)));
		views.push({
			id: d.id,
			url,
			status: resp.status,
			type: resp.type,
			listed: d.session,
			length: bytes.length,
			sha256,
			head: hex(bytes.subarray(0, 17)),
			accepted: bytes.length === d.session.bytes && sha256 === d.session.sha256,
		});
	}
	return {
		status: r.status,
		type: r.type,
		secureContext: window.isSecureContext,
		default: catalog.default,
		ids: catalog.datasets.map((d) => d.id),
		views,
	};
}

async function main() {
	const q = new URLSearchParams(location.search);
	const base = q.get("base");
	const out = {
		runtime: navigator.userAgent,
		float16: typeof globalThis.Float16Array === "function" ? "native" : "none",
	};
	if (q.get("checkStore")) out.http = await httpChecks(base, q.get("checkStore"), q.get("checkKey"));
	if (q.get("stores")) out.stores = await readStores(base, q.get("stores").split(","));
	if (q.get("catalog")) out.catalog = await catalogChecks(base);
	return out;
}

main().then(
	(r) => {
		window.__result = JSON.stringify(r);
	},
	(e) => {
		window.__result = JSON.stringify({ fatal: `${e.name}: ${e.message}\n${e.stack}` });
	},
);
