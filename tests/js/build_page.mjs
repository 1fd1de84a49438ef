// node build_page.mjs OUTDIR: writes OUTDIR/index.html and OUTDIR/page.js (browser_page.mjs with
// zarrita and its dependencies bundled by esbuild, so the page needs no CDN).
import { mkdirSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const outdir = process.argv[2];
if (!outdir) {
	console.error("usage: node build_page.mjs OUTDIR");
	process.exit(2);
}
const here = dirname(fileURLToPath(import.meta.url));
mkdirSync(outdir, { recursive: true });
await esbuild.build({
	entryPoints: [join(here, "browser_page.mjs")],
	bundle: true,
	format: "esm",
	platform: "browser",
	target: "es2022",
	outfile: join(outdir, "page.js"),
	logLevel: "warning",
});
writeFileSync(
	join(outdir, "index.html"),
	'<!doctype html>\n<html><head><meta charset="utf-8"><title>cellucid-fs zarrita page</title>\n' +
		'<script type="module" src="page.js"></script></head><body></body></html>\n',
);
process.stdout.write(JSON.stringify({ page: join(outdir, "index.html"), bytes: statSync(join(outdir, "page.js")).size }));
