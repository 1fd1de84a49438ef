// Reads cellucid-fs stores the way a JavaScript viewer does, with zarrita.js: the root is opened
// through its consolidated metadata (.zmetadata), then every node listed there is opened, and
// every array's first and last chunk are read (zarr.get of the chunk's region, and zarr.getChunk
// of the last chunk). Runs in Node (node_client.mjs) and, bundled by esbuild, in Chromium
// (browser_page.mjs). The result is plain JSON, compared with zarr-python by
// tests/test_js_clients.py:
//
//   {store: {error?, contents: [{path, kind}], nodes: {path: node}, decoded: {path: ...}}}
//   array node: {kind: "array", dtype, shape, chunks, attrs, first, last, lastChunk} (0-d:
//               first = its chunk, scalar = zarr.get's scalar), or {openError} / {readError}
//   read:       {ctor, shape, stride, enc, values}  enc: "f64" (base64 of a Float64Array of the
//               values), "bigint" (decimal strings), "bool" (0/1), "str" (strings)
import * as zarr from "zarrita";

function b64(bytes) {
	let s = "";
	for (let i = 0; i < bytes.length; i += 0x8000) {
		s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
	}
	return btoa(s);
}

// the class of a chunk's data, by instanceof (a bundler may rename classes, so not by .name)
function ctorName(data) {
	const classes = [
		["Int8Array", Int8Array], ["Int16Array", Int16Array], ["Int32Array", Int32Array],
		["BigInt64Array", BigInt64Array], ["Uint8Array", Uint8Array], ["Uint16Array", Uint16Array],
		["Uint32Array", Uint32Array], ["BigUint64Array", BigUint64Array], ["Float32Array", Float32Array],
		["Float64Array", Float64Array], ["Float16Array", globalThis.Float16Array],
		["BoolArray", zarr.BoolArray], ["UnicodeStringArray", zarr.UnicodeStringArray],
		["ByteStringArray", zarr.ByteStringArray],
	];
	for (const [name, cls] of classes) {
		if (typeof cls === "function" && data instanceof cls) return name;
	}
	if (Array.isArray(data)) return "Array";
	return `other:${data?.constructor?.name}`;
}

export function encode(data) {
	const ctor = ctorName(data);
	if (data instanceof BigInt64Array || data instanceof BigUint64Array) {
		return { ctor, enc: "bigint", values: Array.from(data, (v) => v.toString()) };
	}
	if (data instanceof zarr.BoolArray) {
		return { ctor, enc: "bool", values: Array.from(data, (v) => (v ? 1 : 0)) };
	}
	if (
		Array.isArray(data) ||
		data instanceof zarr.UnicodeStringArray ||
		data instanceof zarr.ByteStringArray
	) {
		return { ctor, enc: "str", values: Array.from(data, (v) => (typeof v === "string" ? v : { notString: String(v) })) };
	}
	const f = Float64Array.from(data, Number);
	return { ctor, enc: "f64", values: b64(new Uint8Array(f.buffer)) };
}

function describe(e) {
	return `${e && e.name ? e.name : "Error"}: ${e && e.message ? e.message : String(e)}`;
}

function encodeChunk(chunk) {
	return { shape: Array.from(chunk.shape), stride: Array.from(chunk.stride), ...encode(chunk.data) };
}

// zarr.get of a 0-d array returns a scalar
function encodeScalar(v) {
	const type = typeof v;
	if (type === "bigint") return { type, enc: "bigint", values: [v.toString()] };
	if (type === "boolean") return { type, enc: "bool", values: [v ? 1 : 0] };
	if (type === "number") return { type, ...encode(Float64Array.of(v)), ctor: undefined };
	if (type === "string") return { type, enc: "str", values: [v] };
	return { type, enc: "none", values: [String(v)] };
}

// the selection of chunk `idx` (per dimension) of an array
function chunkSelection(shape, chunks, idx) {
	return shape.map((n, d) => zarr.slice(idx[d] * chunks[d], Math.min(n, (idx[d] + 1) * chunks[d])));
}

async function readArray(arr, out) {
	const shape = arr.shape;
	const chunks = arr.chunks;
	if (shape.length === 0) {
		out.first = encodeChunk(await arr.getChunk([]));
		out.scalar = encodeScalar(await zarr.get(arr));
		return;
	}
	const first = shape.map(() => 0);
	const last = shape.map((n, d) => Math.max(0, Math.ceil(n / chunks[d]) - 1));
	out.first = encodeChunk(await zarr.get(arr, chunkSelection(shape, chunks, first)));
	out.last = encodeChunk(await zarr.get(arr, chunkSelection(shape, chunks, last)));
	if (shape.every((n) => n > 0)) {
		out.lastChunk = encodeChunk(await arr.getChunk(last));
	}
}

async function pool(items, n, fn) {
	let next = 0;
	async function worker() {
		while (next < items.length) {
			const i = next++;
			await fn(items[i], i);
		}
	}
	await Promise.all(Array.from({ length: Math.min(n, items.length) }, worker));
}

async function full(root, path) {
	const arr = await zarr.open(root.resolve(path), { kind: "array" });
	return (await zarr.get(arr)).data;
}

// decoded views of the encoded elements (the way a viewer uses them)
async function decode(root, path, attrs) {
	const et = attrs["encoding-type"];
	const p = path === "/" ? "" : path;
	if (et === "categorical") {
		const codes = await full(root, `${p}/codes`);
		const cats = await full(root, `${p}/categories`);
		const catList = Array.from(cats, (c) => (typeof c === "bigint" ? c.toString() : c));
		return {
			encoding: et,
			codesCtor: ctorName(codes),
			labels: Array.from(codes, (c) => (Number(c) < 0 ? null : catList[Number(c)])),
		};
	}
	if (et === "nullable-integer" || et === "nullable-boolean") {
		const values = await full(root, `${p}/values`);
		const mask = Array.from(await full(root, `${p}/mask`), Boolean);
		const maskArr = await zarr.open(root.resolve(`${p}/mask`), { kind: "array" });
		const vs = Array.from(values, (v) => (typeof v === "bigint" ? v.toString() : typeof v === "boolean" ? (v ? 1 : 0) : v));
		return {
			encoding: et,
			valuesCtor: ctorName(values),
			maskDtype: maskArr.dtype,
			values: vs.map((v, i) => (mask[i] ? null : v)),
		};
	}
	if (et === "csr_matrix" || et === "csc_matrix") {
		const indptr = await full(root, `${p}/indptr`);
		const data = await zarr.open(root.resolve(`${p}/data`), { kind: "array" });
		const indices = await zarr.open(root.resolve(`${p}/indices`), { kind: "array" });
		return {
			encoding: et,
			shape: attrs.shape,
			indptrCtor: ctorName(indptr),
			indptr: Array.from(indptr, (v) => v.toString()),
			nnzData: data.shape[0],
			nnzIndices: indices.shape[0],
		};
	}
	return undefined;
}

export async function readStore(baseUrl, name, { concurrency = 12 } = {}) {
	const res = { contents: [], nodes: {}, decoded: {} };
	let store;
	try {
		const fetchStore = new zarr.FetchStore(new URL(`${encodeURIComponent(name)}/`, baseUrl).href);
		store = await zarr.withConsolidatedMetadata(fetchStore, { format: "v2" });
	} catch (e) {
		res.error = `withConsolidatedMetadata: ${describe(e)}`;
		return res;
	}
	const root = zarr.root(store);
	res.contents = store.contents().map(({ path, kind }) => ({ path, kind }));
	await pool(res.contents, concurrency, async ({ path, kind }) => {
		try {
			if (kind === "group") {
				const g = await zarr.open(root.resolve(path), { kind: "group" });
				res.nodes[path] = { kind: "group", attrs: g.attrs };
				const d = await decode(root, path, g.attrs);
				if (d) res.decoded[path] = d;
			} else {
				let a;
				try {
					a = await zarr.open(root.resolve(path), { kind: "array" });
				} catch (e) {
					res.nodes[path] = { kind, openError: describe(e) };
					return;
				}
				const node = { kind, dtype: a.dtype, shape: a.shape, chunks: a.chunks, attrs: a.attrs };
				res.nodes[path] = node;
				try {
					await readArray(a, node);
				} catch (e) {
					node.readError = describe(e);
				}
			}
		} catch (e) {
			res.nodes[path] = { kind, error: describe(e) };
		}
	});
	return res;
}

export async function readStores(baseUrl, names, opts) {
	const out = {};
	for (const name of names) out[name] = await readStore(baseUrl, name, opts);
	return out;
}
