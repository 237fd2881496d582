// Finding the language server: the setting `mevedel.server.path`, else
// `mevedel-lsp` on PATH, else the Python interpreter the Python extension
// has selected (when mevedel is installed in it), else `python3 -m
// mevedel_server`; and what to tell the user when none of them is there.
// No `vscode` import: the extension passes the lookups (and the Python
// extension's interpreter); the Node tests pass real and fake ones.
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

export interface ServerCommand {
  command: string;
  args: string[];
  // Where it was found, for messages.
  source: 'setting' | 'path' | 'python-extension' | 'python3';
}

export interface ServerMissing {
  missing: true;
  // What was looked at, in order, for the message.
  tried: string[];
  // The configured path that does not exist (the setting is wrong).
  badSetting?: string;
}

export interface DiscoveryProbes {
  // The full path of a program on PATH, or undefined.
  which(program: string): string | undefined;
  // The file is there and may be run.
  executable(file: string): boolean;
  // `python -c "import mevedel_server"` succeeds.
  hasServerModule(python: string): Promise<boolean>;
  // The interpreter the Python extension has selected, if any.
  pythonInterpreter?(): Promise<string | undefined>;
}

export type Lookup = (key: string) => unknown;

function stringSetting(lookup: Lookup, key: string): string | undefined {
  const value = lookup(key);
  return typeof value === 'string' && value.trim() ? value.trim() : undefined;
}

function stringList(lookup: Lookup, key: string): string[] {
  const value = lookup(key);
  return Array.isArray(value) ? value.filter((a): a is string => typeof a === 'string') : [];
}

export const SERVER_PROGRAM = 'mevedel-lsp';
export const SERVER_MODULE = 'mevedel_server';

export async function discoverServer(lookup: Lookup, probes: DiscoveryProbes): Promise<ServerCommand | ServerMissing> {
  const args = stringList(lookup, 'server.args');
  const tried: string[] = [];
  // `server.command` is the older spelling of `server.path`.
  const configured = stringSetting(lookup, 'server.path') ?? stringSetting(lookup, 'server.command');
  if (configured && configured !== SERVER_PROGRAM) {
    const resolved = path.isAbsolute(configured) ? configured : probes.which(configured);
    if (resolved && probes.executable(resolved)) return { command: resolved, args, source: 'setting' };
    return { missing: true, tried: [`the setting mevedel.server.path (${configured})`], badSetting: configured };
  }
  const onPath = probes.which(SERVER_PROGRAM);
  if (onPath) return { command: onPath, args, source: 'path' };
  tried.push(`${SERVER_PROGRAM} on PATH`);
  const interpreter = await probes.pythonInterpreter?.().catch(() => undefined);
  if (interpreter) {
    // Its environment's console script, else the module.
    const script = path.join(path.dirname(interpreter), process.platform === 'win32' ? `${SERVER_PROGRAM}.exe` : SERVER_PROGRAM);
    if (probes.executable(script)) return { command: script, args, source: 'python-extension' };
    if (await probes.hasServerModule(interpreter)) {
      return { command: interpreter, args: ['-m', SERVER_MODULE, ...args], source: 'python-extension' };
    }
    tried.push(`the Python extension's interpreter (${interpreter})`);
  }
  const python3 = probes.which(process.platform === 'win32' ? 'python' : 'python3');
  if (python3 && (await probes.hasServerModule(python3))) {
    return { command: python3, args: ['-m', SERVER_MODULE, ...args], source: 'python3' };
  }
  tried.push(`python3 -m ${SERVER_MODULE}`);
  return { missing: true, tried };
}

export function isMissing(found: ServerCommand | ServerMissing): found is ServerMissing {
  return (found as ServerMissing).missing === true;
}

// What to tell the user when the server is not found: where it looked, and
// how to install it.
export function missingServerMessage(missing: ServerMissing): string {
  if (missing.badSetting) {
    return `mevedel: the server \`${missing.badSetting}\` (setting mevedel.server.path) is not an executable file. Fix the setting, or clear it to look for ${SERVER_PROGRAM} on PATH.`;
  }
  return (
    `mevedel: the language server is not installed (looked for ${missing.tried.join(', ')}). ` +
    `Install it from a checkout of mevedel-lsp with \`pipx install <checkout>\` or \`uv tool install <checkout>\` ` +
    `so that ${SERVER_PROGRAM} is on PATH, or set mevedel.server.path.`
  );
}

// The real probes (the extension adds the Python extension's interpreter).

export function which(program: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  const extensions = process.platform === 'win32' ? (env.PATHEXT ?? '.EXE;.CMD;.BAT').split(';') : [''];
  for (const directory of (env.PATH ?? '').split(path.delimiter)) {
    if (!directory) continue;
    for (const extension of extensions) {
      const candidate = path.join(directory, program + extension);
      if (executable(candidate)) return candidate;
    }
  }
  return undefined;
}

export function executable(file: string): boolean {
  try {
    if (!fs.statSync(file).isFile()) return false;
    fs.accessSync(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

export function hasServerModule(python: string, timeoutMs = 15_000): Promise<boolean> {
  return new Promise((done) => {
    execFile(python, ['-c', `import ${SERVER_MODULE}`], { timeout: timeoutMs }, (error) => done(!error));
  });
}

export const realProbes: DiscoveryProbes = { which: (program) => which(program), executable, hasServerModule };
