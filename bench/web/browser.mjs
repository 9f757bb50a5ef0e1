// Open the page of a web output folder (tvmc compile --output-format web) in a headless browser and
// print its result as JSON: {"outputs": {name: [values]}, "timing": {...}} (or {"error": ...}).
//
//   node bench/web/browser.mjs SITE_FOLDER BROWSER_COMMAND_JSON [SCREENSHOT.png]
//
// The folder is served over HTTP on 127.0.0.1 (an ephemeral port, this process only); the browser
// command (the target descriptor's `browser`: a Chromium executable and its flags) is driven by
// playwright-core (npm, bench/web/package.json).
import { createServer } from "node:http";
import { access, readFile } from "node:fs/promises";
import { delimiter, extname, join, normalize } from "node:path";
import { chromium } from "playwright-core";

const [folder, browserJson, screenshot] = process.argv.slice(2);
const [program, ...args] = JSON.parse(browserJson);

async function onPath(name) { // a program name -> its path on PATH (playwright wants a path)
  if (name.includes("/")) return name;
  for (const dir of (process.env.PATH || "").split(delimiter)) {
    try {
      await access(join(dir, name));
      return join(dir, name);
    } catch { /* next */ }
  }
  throw new Error(`browser '${name}' not found on PATH`);
}
const executablePath = await onPath(program);
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".wasm": "application/wasm", ".json": "application/json" };

const server = createServer(async (req, res) => {
  const path = normalize(decodeURIComponent(new URL(req.url, "http://x").pathname)).replace(/^(\.\.[/\\])+/, "");
  try {
    const data = await readFile(join(folder, path === "/" ? "index.html" : path));
    res.writeHead(200, { "content-type": TYPES[extname(path)] || "application/octet-stream" });
    res.end(data);
  } catch {
    res.writeHead(404);
    res.end();
  }
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const browser = await chromium.launch({ executablePath, args: args.filter((a) => a !== "--headless"), headless: true });
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
  await page.goto(`http://127.0.0.1:${server.address().port}/index.html`);
  await page.waitForSelector("body[data-state]", { timeout: 120000 });
  const result = await page.evaluate(() => window.tvmcResult);
  result.userAgent = await page.evaluate(() => navigator.userAgent);
  if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
  console.log(JSON.stringify(result));
} finally {
  await browser.close();
  server.close();
}
