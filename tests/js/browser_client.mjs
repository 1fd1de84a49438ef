// node browser_client.mjs CHROMIUM PROFILE_DIR PAGE_URL: opens PAGE_URL in headless Chromium
// (playwright-core, with the given browser binary; it never downloads one), waits for the page's
// window.__result and prints {page: <the page's result>, console, failedRequests, pageErrors}.
// PROFILE_DIR (a fresh folder) names this browser's processes, so the caller can find them.
import { chromium } from "playwright-core";

const [executablePath, profile, pageUrl] = process.argv.slice(2);
const timeout = Number(process.env.JS_CLIENT_TIMEOUT_MS || 60000);
const context = await chromium.launchPersistentContext(profile, {
	executablePath,
	headless: true,
	args: ["--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
	timeout,
});
const out = { console: [], failedRequests: [], pageErrors: [], requests: [] };
try {
	const page = context.pages()[0] ?? (await context.newPage());
	page.on("console", (m) => out.console.push(`${m.type()}: ${m.text()}`));
	page.on("pageerror", (e) => out.pageErrors.push(String(e)));
	page.on("requestfailed", (r) => out.failedRequests.push(`${r.method()} ${r.url()}: ${r.failure()?.errorText}`));
	page.on("request", (r) => {
		if (out.requests.length < 100000) out.requests.push(r.method());
	});
	await page.goto(pageUrl, { timeout });
	try {
		await page.waitForFunction(() => window.__result !== undefined, null, { timeout, polling: 100 });
		out.page = JSON.parse(await page.evaluate(() => window.__result));
	} catch (e) {
		out.page = { fatal: `${e.name}: ${e.message}` };
	}
	out.browserVersion = context.browser()?.version() ?? null;
} finally {
	await context.close();
}
process.stdout.write(JSON.stringify(out));
