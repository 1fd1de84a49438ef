// node node_client.mjs BASE_URL STORE... -> JSON of read_stores.mjs's readStores on stdout.
// Node < 24 has no Float16Array, which zarrita needs for "<f2" arrays: the polyfill stands in
// (as in a Node app that reads float16 with zarrita); Chromium has a native one.
import { Float16Array as Float16Polyfill } from "@petamoriken/float16";

if (typeof globalThis.Float16Array === "undefined") {
	globalThis.Float16Array = Float16Polyfill;
}
const { readStores } = await import("./read_stores.mjs");

const [baseUrl, ...names] = process.argv.slice(2);
if (!baseUrl || names.length === 0) {
	console.error("usage: node node_client.mjs BASE_URL STORE...");
	process.exit(2);
}
const result = await readStores(baseUrl, names);
process.stdout.write(JSON.stringify({ runtime: `node ${process.version}`, float16: globalThis.Float16Array === Float16Polyfill ? "polyfill" : "native", stores: result }));
