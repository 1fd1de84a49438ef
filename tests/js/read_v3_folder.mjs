// node read_v3_folder.mjs FOLDER -> JSON of every array of the Zarr v3 store in FOLDER, each read
// whole by zarrita.js through a store over the local files. The v3 fixtures are hand-made (no v3
// writer is packaged for Python here), so zarrita, a v3 reader written by others, is the check
// that they follow the specification: tests/test_js_clients.py compares what it reads with the
// fixtures' v2 twins read by zarr-python.
//
//   {arrays: {path: {dtype, shape, chunks, stride, read} | {error}}}
//   read: the values in zarrita's memory order (stride: a transposed array keeps its stored
//         order), encoded as read_stores.mjs encodes them
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { Float16Array as Float16Polyfill } from "@petamoriken/float16";

if (typeof globalThis.Float16Array === "undefined") {
	globalThis.Float16Array = Float16Polyfill;
}
const zarr = await import("zarrita");
const { encode } = await import("./read_stores.mjs");

const folder = process.argv[2];
if (!folder) {
	console.error("usage: node read_v3_folder.mjs FOLDER");
	process.exit(2);
}

async function bytes(key) {
	try {
		return new Uint8Array(await readFile(join(folder, key)));
	} catch (e) {
		if (e.code === "ENOENT") return undefined;
		throw e;
	}
}

// zarrita's store interface: get(key) gives the bytes, or undefined for a key that is absent;
// getRange ({offset, length} or {suffixLength}) is what shards are read through
const store = {
	get: bytes,
	async getRange(key, range) {
		const all = await bytes(key);
		if (all === undefined) return undefined;
		if ("suffixLength" in range) return all.subarray(all.length - range.suffixLength);
		return all.subarray(range.offset, range.offset + range.length);
	},
};

// the paths ("/obs/cell_type", ...) of the store's arrays, found by their zarr.json
async function arrayPaths(rel) {
	const doc = JSON.parse(await readFile(join(folder, rel, "zarr.json"), "utf8"));
	if (doc.node_type === "array") return [rel || "/"];
	const out = [];
	for (const entry of await readdir(join(folder, rel), { withFileTypes: true })) {
		if (!entry.isDirectory()) continue;
		try {
			out.push(...(await arrayPaths(`${rel}/${entry.name}`)));
		} catch (e) {
			if (e.code !== "ENOENT") throw e; // a folder without zarr.json: chunks, not a node
		}
	}
	return out;
}

const root = zarr.root(store);
const arrays = {};
for (const path of (await arrayPaths("")).sort()) {
	try {
		const arr = await zarr.open.v3(root.resolve(path), { kind: "array" });
		// a 0-d array's zarr.get is a bare scalar: its one chunk keeps the typed array
		const got = arr.shape.length === 0 ? await arr.getChunk([]) : await zarr.get(arr);
		arrays[path] = {
			dtype: arr.dtype,
			shape: Array.from(arr.shape),
			chunks: Array.from(arr.chunks),
			stride: Array.from(got.stride),
			read: encode(got.data),
		};
	} catch (e) {
		arrays[path] = { error: `${e && e.name ? e.name : "Error"}: ${e && e.message ? e.message : e}` };
	}
}
process.stdout.write(JSON.stringify({ arrays }));
