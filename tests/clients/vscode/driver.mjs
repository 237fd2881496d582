// Drives a code-server workbench in Debian's chromium the way a person does
// (keys, the command palette, quick picks, clicks in views and webviews),
// for tests/clients/test_vscode_workbench.py.
//
//   node driver.mjs   (environment: MEVEDEL_PLAYWRIGHT_CORE, its index.mjs;
//                      MEVEDEL_CHROMIUM, the browser)
//
// It reads one JSON request a line on stdin, {"id", "op", ...}, and answers
// each with one line on stdout (in the order they finish), {"id", "ok": true, "value"} or
// {"id", "ok": false, "error"}. Every wait is on something the page shows
// (Playwright's locators wait for it); the caller's deadline bounds a step.
import { createInterface } from 'node:readline';
import { pathToFileURL } from 'node:url';

// playwright-core is installed beside code-server (.venv/code-server).
const { chromium } = await import(pathToFileURL(process.env.MEVEDEL_PLAYWRIGHT_CORE).href);

const browser = await chromium.launch({
  executablePath: process.env.MEVEDEL_CHROMIUM ?? '/usr/bin/chromium',
  headless: true,
  args: [
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
});
let context;
let page;

// The workbench's quick input (command palette, quick picks, input boxes).
const QUICK = '.quick-input-widget';
const ROWS = `${QUICK} .monaco-list-row:visible`;

// A webview's content (request.frame set: the one webview shown, the chat):
// the workbench puts it in an iframe holding another.
function frameOf(name) {
  if (!name) return page;
  return page.frameLocator(`iframe.webview.ready:visible`).frameLocator('#active-frame');
}

function where(request) {
  const root = frameOf(request.frame);
  let found = root.locator(request.selector);
  if (request.hasText !== undefined) found = found.filter({ hasText: request.hasText });
  if (request.nth !== undefined) found = found.nth(request.nth);
  return found;
}

// Types TEXT into the quick input's box. Playwright focuses the box, then
// types: a webview that takes the focus back in between (VS Code focuses
// one asynchronously) gets the text instead, and the box is typed into
// again until it holds it.
async function typeInQuickInput(text) {
  const input = page.locator(`${QUICK} input`);
  do await input.fill(text, { timeout: 0 });
  while ((await input.inputValue({ timeout: 0 })) !== text);
  return input;
}

// Presses KEY in the quick input's box until the box received it. Playwright
// focuses the box, then sends the key: a webview that takes the focus back in
// between (VS Code restores a webview's focus asynchronously, after the
// palette or a dialog closed) gets the key instead, the quick pick (which
// stays open when the focus moves) never sees it, and the step it was to
// take never happens. The key is pressed again only when the box did not
// receive it, so an accepted pick is never accepted twice.
async function pressInQuickInput(key) {
  const input = page.locator(`${QUICK} input`);
  for (;;) {
    const before = await page.evaluate(() => window.__mevedelQuickKeys);
    await input.press(key, { timeout: 0 });
    if ((await page.evaluate(() => window.__mevedelQuickKeys)) > before) return;
    process.stderr.write(`driver: ${key} went outside the quick input; pressing it again\n`);
  }
}

async function quickRow(label) {
  const row = page.locator(ROWS).filter({ hasText: label }).first();
  await row.waitFor({ state: 'visible', timeout: 0 });
  return row;
}

const ops = {
  // Opens URL in a new browser context: the workbench keeps state in the
  // browser (the user settings it read last among it: a window started from
  // that copy activates the extension before the file's settings arrive).
  async open({ url }) {
    await context?.close();
    context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
    page = await context.newPage();
    // MEVEDEL_VSCODE_CPU_THROTTLE=N runs the workbench's page N times
    // slower (Chrome's CPU throttling): a loaded machine's timing, to
    // reproduce its races.
    if (process.env.MEVEDEL_VSCODE_CPU_THROTTLE) {
      const cdp = await context.newCDPSession(page);
      await cdp.send('Emulation.setCPUThrottlingRate', { rate: Number(process.env.MEVEDEL_VSCODE_CPU_THROTTLE) });
    }
    // The workbench's focus moves and key presses, kept for a failed test
    // (focusLog): a key that went elsewhere shows there.
    await page.addInitScript(() => {
      if (window !== window.top) return;
      const log = (window.__mevedelFocusLog = []);
      const start = Date.now();
      const name = (target) => `${target?.tagName ?? '?'}.${String(target?.className ?? '').slice(0, 60)}`;
      const note = (what) => { log.push(`${Date.now() - start} ms ${what}`); if (log.length > 500) log.shift(); };
      document.addEventListener('focusin', (event) => note(`focus ${name(event.target)}`), true);
      document.addEventListener('keydown', (event) => note(`key ${event.key} on ${name(event.target)}`), true);
      // Keys the quick input received (pressInQuickInput): a key that went
      // into a webview's frame never reaches this document.
      window.__mevedelQuickKeys = 0;
      document.addEventListener('keydown', (event) => {
        if (event.target?.closest?.('.quick-input-widget')) window.__mevedelQuickKeys += 1;
      }, true);
    });
    // The window is ready when its parts are drawn, not at the page's `load`
    // event; and the step's one bound is the harness's STEP_SECONDS --
    // Playwright's own 30 s default was a second, shorter one that a loaded
    // machine's page load exceeded.
    await page.goto(url, { waitUntil: 'commit', timeout: 0 });
    await page.locator('.monaco-workbench').waitFor({ timeout: 0 });
    // The first visible part: the status bar, drawn once the window is ready.
    await page.locator('#workbench\\.parts\\.statusbar').waitFor({ timeout: 0 });
  },
  async reload() {
    await page.reload({ waitUntil: 'commit', timeout: 0 });
    await page.locator('#workbench\\.parts\\.statusbar').waitFor({ timeout: 0 });
  },
  // Runs a command from the palette by its title, as typed there. The
  // palette lists the commands known when it opens; one that is not there
  // yet (the window still loading the extension's contributions) is looked
  // for again in a palette opened anew, as a person would.
  async command({ title }) {
    const input = page.locator(`${QUICK} input`);
    const row = page.locator(ROWS).filter({ has: page.locator('.label-name', { hasText: new RegExp(`^${escape(title)}$`) }) }).first();
    for (;;) {
      try {
        await page.keyboard.press('F1');
        await input.fill(`>${title}`, { timeout: 5_000 });
        await row.waitFor({ state: 'visible', timeout: 3_000 });
        await page.locator(`${ROWS}.focused`).filter({ has: page.locator('.label-name', { hasText: new RegExp(`^${escape(title)}$`) }) }).first().waitFor({ state: 'visible', timeout: 3_000 });
        break;
      } catch {
        if (await input.isVisible()) {
          await page.keyboard.press('Escape');
        } else {
          // F1 opened no palette: it went into a webview that had taken the
          // focus back (see pressInQuickInput) and did not pass the key on,
          // however often it was pressed (a CI run's focus log shows none of
          // a minute's F1 presses reaching the workbench). Whatever holds the
          // focus (the webview's frame, or an element inside the frame's
          // host) gives it back to the workbench's own document, as a
          // person's click outside the webview would, and F1 is pressed again.
          const held = await page.evaluate(() => {
            const element = document.activeElement;
            const tag = element ? `${element.tagName}.${element.className}` : 'none';
            if (element && element !== document.body) element.blur();
            return tag;
          });
          process.stderr.write(`driver: F1 opened no palette (focus on ${held}); the focus goes back to the workbench\n`);
        }
      }
    }
    await pressInQuickInput('Enter');
  },
  // The rows of the quick pick titled TITLE (waits for it and one row).
  async quickItems({ title }) {
    await page.locator(`${QUICK} .quick-input-title`, { hasText: title }).waitFor({ state: 'visible', timeout: 0 });
    await page.locator(ROWS).first().waitFor({ state: 'visible', timeout: 0 });
    return await page.locator(ROWS).allInnerTexts();
  },
  async quickTitle() {
    await page.locator(QUICK).waitFor({ state: 'visible', timeout: 0 });
    return await page.locator(QUICK).innerText();
  },
  // Picks the row showing LABEL of the quick pick titled TITLE, by keys:
  // LABEL typed filters the rows, Enter takes the focused one once it is
  // that row.
  async pick({ title, label }) {
    await page.locator(`${QUICK} .quick-input-title`, { hasText: title }).waitFor({ state: 'visible', timeout: 0 });
    await quickRow(label);
    await typeInQuickInput(label);
    await page.locator(`${ROWS}.focused`).filter({ hasText: label }).first().waitFor({ state: 'visible', timeout: 0 });
    await pressInQuickInput('Enter');
  },
  // Types TEXT into the input box titled TITLE and presses Enter.
  async answer({ title, text, enter = true }) {
    await page.locator(`${QUICK} .quick-input-title`, { hasText: title }).waitFor({ state: 'visible', timeout: 0 });
    await page.locator(`${QUICK} input`).waitFor({ state: 'visible', timeout: 0 });
    await typeInQuickInput(text);
    if (enter) await pressInQuickInput('Enter');
  },
  // Esc in the quick input (a person dismissing it), until it is closed.
  async dismiss() {
    await pressInQuickInput('Escape');
    await page.locator(QUICK).waitFor({ state: 'hidden', timeout: 0 });
  },
  async press({ key }) {
    await page.keyboard.press(key);
  },
  // Types TEXT; with `when` (a selector, `whenText` its text), as soon as
  // that shows: a person typing the moment they see it, with no round trip
  // to the test in between.
  async type({ text, when, whenText }) {
    if (when) await where({ selector: when, hasText: whenText }).first().waitFor({ state: 'visible', timeout: 0 });
    await page.keyboard.type(text);
  },
  async click(request) {
    await where(request).click({ timeout: 0, button: request.button ?? 'left' });
  },
  async dblclick(request) {
    await where(request).dblclick({ timeout: 0 });
  },
  async hover(request) {
    await where(request).hover({ timeout: 0 });
  },
  async fill(request) {
    await where(request).fill(request.text, { timeout: 0 });
  },
  async waitFor(request) {
    await where(request).first().waitFor({ state: request.state ?? 'visible', timeout: 0 });
  },
  async texts(request) {
    return await where(request).allInnerTexts();
  },
  // The value of an input or textarea (what the user wrote there).
  async value(request) {
    return await where(request).first().inputValue({ timeout: 0 });
  },
  async count(request) {
    return await where(request).count();
  },
  async attribute(request) {
    return await where(request).first().getAttribute(request.name, { timeout: 0 });
  },
  // A notification toast showing TEXT; clicks its button BUTTON if given.
  async notification({ text, button }) {
    const toast = page.locator('.notification-toast').filter({ hasText: text }).first();
    await toast.waitFor({ state: 'visible', timeout: 0 });
    const shown = await toast.innerText();
    if (button) await toast.locator('.monaco-button', { hasText: button }).first().click({ timeout: 0 });
    return shown;
  },
  // The modal dialog (a confirmation): its text; clicks BUTTON if given.
  async dialog({ button }) {
    const box = page.locator('.monaco-dialog-box');
    await box.waitFor({ state: 'visible', timeout: 0 });
    const shown = await box.innerText();
    if (button) await box.locator('.monaco-button', { hasText: button }).first().click({ timeout: 0 });
    return shown;
  },
  async evaluate({ expression }) {
    return await page.evaluate(expression);
  },
  // The last of the focus moves and key presses (open's log).
  async focusLog() {
    return await page.evaluate(() => (window.__mevedelFocusLog ?? []).slice(-200));
  },
  async screenshot({ path }) {
    await page.screenshot({ path, timeout: 15_000 });
  },
  async close() {
    await browser.close();
    process.exit(0);
  },
};

function escape(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

// Requests run as they come: a screenshot of a failed test is taken while
// the step that timed out still waits.
async function answer(request) {
  try {
    const value = await ops[request.op](request);
    process.stdout.write(JSON.stringify({ id: request.id, ok: true, value: value ?? null }) + '\n');
  } catch (error) {
    process.stdout.write(JSON.stringify({ id: request.id, ok: false, error: String(error?.stack ?? error) }) + '\n');
  }
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (line.trim()) void answer(JSON.parse(line));
}
await browser.close();
