// End-to-end test of the dashboard in a real headless Chromium (Debian's package),
// driven by playwright-core. Run by scripts/e2e.sh, which starts the server and passes:
//   SNITCH_URL   the API listener, e.g. http://127.0.0.1:18080
//   SNITCH_KEY   an API key of a fresh case
//   SCREENSHOTS  where to write a PNG of each page
// Each step is reported; any failure (or a console error, or a dialog: a script that
// should have been inert) exits non-zero. The last line is "N passed, N failed".
import { chromium } from "playwright-core";
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";

const base = process.env.SNITCH_URL;
const key = process.env.SNITCH_KEY;
const shots = process.env.SCREENSHOTS || "target/screenshots";
if (!base || !key) {
  console.error("SNITCH_URL and SNITCH_KEY are required");
  process.exit(2);
}
mkdirSync(shots, { recursive: true });

const hostileName = 'nightly backup <script>alert(1)</script>';
const message = 'dump ok "><img src=x onerror=alert(2)>';

let passed = 0;
let failed = 0;
const problems = [];

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
});
// A zone other than UTC, so the page must convert times for the viewer.
const context = await browser.newContext({
  timezoneId: "Europe/Berlin",
  locale: "en-GB",
  viewport: { width: 1280, height: 900 },
});
const page = await context.newPage();
page.setDefaultTimeout(10_000);
page.on("dialog", async (d) => {
  problems.push(`a dialog opened (${d.message()}): user text ran as script`);
  await d.dismiss();
});
page.on("console", (m) => {
  if (m.type() === "error") problems.push(`console error: ${m.text()}`);
});
page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));

// Each screenshot is also an accessibility check of the page: every control has a
// label, coloured text has AA contrast, the page has one h1 and a language.
async function shot(name) {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  const unlabelled = await page.evaluate(() =>
    [...document.querySelectorAll("input:not([type=hidden]), select, textarea, button")]
      .filter((el) => {
        if (el.labels && el.labels.length) return false;
        if (el.getAttribute("aria-label")) return false;
        return el.tagName !== "BUTTON" || !el.textContent.trim();
      })
      .map((el) => el.outerHTML.slice(0, 80)),
  );
  if (unlabelled.length) problems.push(`${name}: controls without a label: ${unlabelled.join(", ")}`);
  // WCAG AA: text on a coloured background (badges, timeline cells, buttons) at 4.5:1.
  const lowContrast = await page.evaluate(() => {
    const rgb = (c) => (c.match(/[\d.]+/g) || []).map(Number);
    const lum = ([r, g, b]) => {
      const f = (v) => ((v /= 255) <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
      return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    return [...document.querySelectorAll(".badge, .cell, button, a.button")]
      .filter((el) => el.offsetParent !== null)
      .map((el) => {
        const style = getComputedStyle(el);
        const bg = rgb(style.backgroundColor);
        if (bg.length === 4 && bg[3] === 0) return null;
        const [a, b] = [lum(rgb(style.color)), lum(bg)].sort((x, y) => y - x);
        const ratio = (a + 0.05) / (b + 0.05);
        return ratio < 4.5 ? `${el.className || el.tagName} ${ratio.toFixed(2)}` : null;
      })
      .filter(Boolean);
  });
  if (lowContrast.length) problems.push(`${name}: low contrast: ${lowContrast.join(", ")}`);
  const h1 = await page.locator("h1").count();
  if (h1 !== 1) problems.push(`${name}: ${h1} h1 elements`);
  if (!(await page.getAttribute("html", "lang"))) problems.push(`${name}: no lang`);
}

function expect(cond, what) {
  if (!cond) throw new Error(what);
}

// `expected`: console errors a step causes on purpose (a refused sign-in answers 401).
async function step(name, body, expected = null) {
  try {
    await body();
    const left = problems.splice(0).filter((p) => !(expected && expected.test(p)));
    if (left.length) throw new Error(left.join("; "));
    passed += 1;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}: ${e.message}`);
    const path = join(shots, `failed-${name.replace(/\W+/g, "-")}.png`);
    await page.screenshot({ path, fullPage: true }).catch(() => {});
  }
}

let checkInUrl = "";

await step("a wrong key is refused", async () => {
  await page.goto(`${base}/ui/login`);
  await shot("login");
  await page.getByLabel("API key").fill("not-a-key-0123456789abcdef0123456789");
  const [response] = await Promise.all([
    page.waitForResponse((r) => r.url().endsWith("/ui/login") && r.request().method() === "POST"),
    page.getByRole("button", { name: "Sign in" }).click(),
  ]);
  expect(response.status() === 401, `status ${response.status()}`);
  await page.getByText("That API key is not valid.").waitFor();
  const cookies = await context.cookies();
  expect(!cookies.some((c) => c.name === "snitch_session"), "no session cookie");
  await shot("login-refused");
}, /status of 401/);

await step("sign in", async () => {
  await page.getByLabel("API key").fill(key);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "Snitches" }).waitFor();
  const session = (await context.cookies()).find((c) => c.name === "snitch_session");
  expect(session, "a session cookie");
  expect(session.httpOnly && session.sameSite === "Strict", "HttpOnly, SameSite=Strict");
  expect(!session.value.includes(key), "the key is not in the cookie");
  await shot("snitches-empty");
});

await step("the keyboard skips to the content", async () => {
  await page.keyboard.press("Tab");
  const first = await page.evaluate(() => document.activeElement.textContent);
  expect(first === "Skip to content", `first tab stop: ${first}`);
  await page.keyboard.press("Enter");
  await page.keyboard.press("Tab");
  const next = await page.evaluate(() => document.activeElement.textContent);
  expect(next === "New snitch", `after skipping: ${next}`);
});

await step("create a snitch", async () => {
  await page.getByRole("link", { name: "New snitch" }).click();
  await page.getByLabel("Name").fill(hostileName);
  await page.getByLabel("Interval").selectOption("hourly");
  await page.getByLabel("Tags (comma-separated)").fill("e2e, db");
  await page.getByLabel("Notes").fill("Restart the dump job.");
  await shot("snitch-new");
  await page.getByRole("button", { name: "Create snitch" }).click();
  await page.getByText("Snitch created.").waitFor();
  // The name is text, not markup.
  const heading = await page.getByRole("heading", { level: 1 }).textContent();
  expect(heading === hostileName, `heading ${heading}`);
  expect((await page.locator(".title-row .badge").textContent()) === "pending", "pending");
  checkInUrl = await page.locator("#check-in-url").inputValue();
  expect(/^http:\/\/127\.0\.0\.1:\d+\/[a-z0-9]{16,}$/.test(checkInUrl), checkInUrl);
});

await step("copy the check-in URL", async () => {
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: base });
  await page.getByRole("button", { name: "Copy" }).click();
  await page.getByText("Copied.").waitFor();
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  expect(copied === checkInUrl, `copied ${copied}`);
});

await step("check it in with curl and see it turn healthy", async () => {
  const answer = execFileSync("curl", ["-fsS", `${checkInUrl}?m=${encodeURIComponent(message)}`], {
    encoding: "utf8",
  });
  expect(answer === "Got it, thanks!\n", `curl said ${answer}`);
  await page.reload();
  await page.locator(".title-row .badge", { hasText: "healthy" }).waitFor();
  await page.getByText("snitch.reporting").first().waitFor();
});

await step("read its check-in message, inert", async () => {
  const cell = page.locator("td.message").first();
  expect((await cell.textContent()) === message, `message ${await cell.textContent()}`);
  expect((await page.locator("td.message img").count()) === 0, "no img element");
  // Times in the viewer's zone, UTC on hover.
  const t = page.locator("td time[data-local]").first();
  const shown = await t.textContent();
  const title = await t.getAttribute("title");
  expect(!shown.endsWith("UTC") && title.endsWith("UTC"), `shown ${shown}, title ${title}`);
  // The timeline: 30 periods, the current one ok, each with its word.
  expect((await page.locator("ol.timeline li").count()) === 30, "30 periods");
  const last = page.locator("ol.timeline li").last();
  expect((await last.getAttribute("class")).includes("ok"), "current period ok");
  expect((await last.textContent()).includes("ok"), "its word");
  await shot("snitch-healthy");
});

await step("pause it", async () => {
  await page.getByLabel("until I unpause it").check();
  await page.getByRole("button", { name: "Pause", exact: true }).click();
  await page.getByText("Snitch paused.").waitFor();
  await page.locator(".title-row .badge", { hasText: "paused" }).waitFor();
  await page.getByText("until unpaused by hand").waitFor();
  await page.getByText("snitch.paused").first().waitFor();
  await shot("snitch-paused");
});

await step("pause it until a time typed in the viewer's zone", async () => {
  // 03:04 in Berlin (winter, UTC+1) is 02:04 UTC.
  await page.getByLabel("Pause until (your time zone; UTC when scripts are off)").fill("2030-01-02T03:04");
  expect(await page.getByLabel("until a time:").isChecked(), "typing a time picks it");
  await page.getByRole("button", { name: "Pause", exact: true }).click();
  await page.getByText("Snitch paused.").waitFor();
  await page.locator('dd time[title="2030-01-02 02:04:00 UTC"]').waitFor();
  await page.getByLabel("until I unpause it").check();
  await page.getByRole("button", { name: "Pause", exact: true }).click();
  await page.getByText("until unpaused by hand").waitFor();
});

await step("the list shows it, filtered by tag", async () => {
  await page.getByRole("link", { name: "Snitches", exact: true }).first().click();
  await page.getByRole("link", { name: hostileName }).waitFor();
  await page.getByRole("link", { name: "e2e" }).first().click();
  await page.getByRole("link", { name: hostileName }).waitFor();
  expect(page.url().endsWith("/ui/?tags=e2e"), page.url());
  await page.locator("td .badge", { hasText: "paused" }).waitFor();
  await shot("snitches");
  await page.setViewportSize({ width: 390, height: 844 });
  await shot("snitches-phone");
  await page.setViewportSize({ width: 1280, height: 900 });
});

await step("add and remove a webhook", async () => {
  await page.getByRole("link", { name: "Webhooks" }).click();
  await page.getByLabel("URL (http or https)").fill("https://user:hunter2@hooks.example.test/snitch");
  await page.getByRole("button", { name: "Add webhook" }).click();
  await page.getByText("Webhook added.").waitFor();
  const html = await page.content();
  expect(!html.includes("hunter2"), "the password is masked");
  await shot("webhooks");
  await page.getByRole("button", { name: /Remove the hook/ }).click();
  await page.getByText("Webhook removed.").waitFor();
});

// A stand-in for an ntfy server on 127.0.0.1: it keeps what it is sent. The server under
// test reaches it only when it allows private addresses (SNITCH_ALLOW_PRIVATE_WEBHOOKS=true,
// passed on by scripts/e2e.sh to the server and to this script); otherwise the test
// notification must fail with the reason shown, and nothing may reach the stand-in.
const ntfyReceived = [];
const ntfy = createServer((req, res) => {
  let body = "";
  req.on("data", (chunk) => (body += chunk));
  req.on("end", () => {
    ntfyReceived.push({ method: req.method, url: req.url, body });
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ id: "e2e0001", event: "message", topic: "snitch-e2e" }));
  });
});
await new Promise((resolve) => ntfy.listen(0, "127.0.0.1", resolve));
const ntfyUrl = `http://127.0.0.1:${ntfy.address().port}`;
const privateAllowed = process.env.SNITCH_ALLOW_PRIVATE_WEBHOOKS === "true";

await step("add an ntfy channel, send a test, remove it", async () => {
  await page.getByRole("link", { name: "Channels", exact: true }).click();
  await page.getByRole("heading", { name: "Channels" }).waitFor();
  await page.getByLabel("Kind").selectOption("ntfy");
  await page.getByRole("button", { name: "Choose kind" }).click();
  await page.getByRole("heading", { name: "Add a ntfy channel" }).waitFor();
  await page.getByLabel("Name (optional)").fill("e2e phones");
  await page.getByLabel("topic (required").fill("snitch-e2e");
  await page.getByLabel("server (optional").fill(ntfyUrl);
  await page.getByLabel("token (optional").fill("tk_e2e_secret_token");
  await shot("channel-new");
  await page.getByRole("button", { name: "Add channel" }).click();
  await page.getByText("Channel added.").waitFor();
  const html = await page.content();
  expect(!html.includes("tk_e2e_secret_token"), "the token is masked");
  expect(html.includes(ntfyUrl), "the server is shown");
  await shot("channels");
  await page.getByRole("button", { name: "Send a test to e2e phones (ntfy)" }).click();
  const detail = (await page.locator(".test-result .test-detail").textContent()).trim();
  expect(detail.length > 0, "the vendor's answer is shown");
  if (privateAllowed) {
    await page.getByText("Test sent to e2e phones (ntfy).").waitFor();
    expect(ntfyReceived.length === 1, `the stand-in got ${ntfyReceived.length} requests`);
    const got = ntfyReceived[0];
    expect(got.method === "POST", `method ${got.method}`);
    expect(got.body.includes("snitch-e2e"), `body ${got.body.slice(0, 200)}`);
  } else {
    await page.getByText("The test to e2e phones (ntfy) failed.").waitFor();
    expect(ntfyReceived.length === 0, "nothing reached a private address");
  }
  await shot("channel-tested");
  await page.getByRole("button", { name: "Remove e2e phones (ntfy)" }).click();
  await page.getByText("Channel removed.").waitFor();
  await page.getByText("No channels.").waitFor();
});
ntfy.close();

await step("delete asks for confirmation", async () => {
  await page.getByRole("link", { name: "Snitches", exact: true }).first().click();
  await page.getByRole("link", { name: hostileName }).click();
  await page.getByRole("link", { name: "Delete…" }).click();
  await page.getByRole("button", { name: "Delete for good" }).waitFor();
  await shot("snitch-delete");
  await page.getByRole("link", { name: "Cancel" }).click();
  await page.getByRole("heading", { name: hostileName }).waitFor();
});

await step("a cron snitch: its schedule in words and its next runs", async () => {
  await page.getByRole("link", { name: "Snitches", exact: true }).first().click();
  await page.getByRole("link", { name: "New snitch" }).first().click();
  await page.getByLabel("Name").fill("nightly cron job");
  await page.getByLabel("Or a cron schedule").fill("30 2 * * *");
  await page.getByLabel("The schedule's time zone").fill("Europe/Riga");
  await page.getByRole("button", { name: "Create snitch" }).click();
  await page.getByText("Snitch created.").waitFor();
  await page.getByText("every day at 02:30 (Europe/Riga)").first().waitFor();
  expect((await page.locator("ul.runs li").count()) === 5, "five next runs");
  const first = await page.locator("ul.runs li").first().textContent();
  expect(/T02:30:00\.000\+0[23]:00 in Europe\/Riga\)$/.test(first.trim()), `first run ${first}`);
  await shot("snitch-cron");
});

await step("sign out", async () => {
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByText("You are signed out.").waitFor();
  await page.goto(`${base}/ui/`);
  await page.getByRole("heading", { name: "Sign in" }).waitFor();
  expect(page.url().endsWith("/ui/login"), page.url());
});

await browser.close();
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
