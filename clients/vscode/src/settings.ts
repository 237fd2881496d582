// Maps the extension's `mevedel.*` settings to the server's settings object.
// No `vscode` import: the extension passes a lookup over its configuration,
// the Node tests pass a plain one.

// One entry per server setting: the VS Code key under `mevedel.` and where it
// goes in the object the server reads (camelCase, as on the wire).
const SERVER_KEYS: ReadonlyArray<readonly [string, readonly string[]]> = [
  ['memoryRoots', ['memoryRoots']],
  ['skillRoots', ['skillRoots']],
  ['completionLimit', ['completionLimit']],
  ['currentSession', ['currentSession']],
  ['diagnostics.unknownSchemes', ['diagnostics', 'unknownSchemes']],
  ['followPublished', ['followPublished']],
  ['sessionWatch.idlePollSeconds', ['sessionWatch', 'idlePollSeconds']],
  ['sessionWatch.activePollSeconds', ['sessionWatch', 'activePollSeconds']],
  ['sessionWatch.debounceMs', ['sessionWatch', 'debounceMs']],
  ['leaseSeconds', ['leaseSeconds']],
  ['controlTransfer.promptTimeoutSeconds', ['controlTransfer', 'promptTimeoutSeconds']],
  ['controlTransfer.fenceSeconds', ['controlTransfer', 'fenceSeconds']],
  ['sessionWatch.notifications', ['sessionWatch', 'notifications']],
  ['remoteWorkspaces', ['remoteWorkspaces']],
  ['agents', ['agents']],
  ['defaultAgent', ['defaultAgent']],
  ['permissions', ['permissions']],
  ['permissionTimeoutSeconds', ['permissionTimeoutSeconds']],
  ['agentStartTimeoutSeconds', ['agentStartTimeoutSeconds']],
  ['cancelTimeoutSeconds', ['cancelTimeoutSeconds']],
  ['agentIdleTimeoutSeconds', ['agentIdleTimeoutSeconds']],
  ['checkpointExclude', ['checkpointExclude']],
  ['terminalOutputMaxBytes', ['terminalOutputMaxBytes']],
  ['executionLogMaxBytes', ['executionLogMaxBytes']],
  ['subagentMaxDepth', ['subagentMaxDepth']],
  ['subagentMaxConcurrent', ['subagentMaxConcurrent']],
  ['mcpMaxMessageBytes', ['mcpMaxMessageBytes']],
  ['maxMessageBytes', ['maxMessageBytes']],
  ['mcpServers', ['mcpServers']],
  ['mcpCallTimeoutSeconds', ['mcpCallTimeoutSeconds']],
  ['mcpStartTimeoutSeconds', ['mcpStartTimeoutSeconds']],
  ['checkpointIntervalSeconds', ['checkpointIntervalSeconds']],
  ['sessionMaxAgeDays', ['sessionMaxAgeDays']],
  ['sessionKeepRecent', ['sessionKeepRecent']],
  ['artifactMaxVersions', ['artifactMaxVersions']],
  ['artifactMaxVersionBytes', ['artifactMaxVersionBytes']],
];

export type Lookup = (key: string) => unknown;

// The server complains about fields it does not know, so the client-only
// `mevedel.server.*` keys never reach it (src/serverDiscovery.ts reads
// them). It keeps any setting a message
// leaves out, so every one is sent, null meaning "the server's default".
export function serverSettings(lookup: Lookup): Record<string, unknown> {
  const settings: Record<string, unknown> = {};
  for (const [key, path] of SERVER_KEYS) {
    const found = lookup(key);
    const value = found === undefined || found === '' ? null : found;
    if (path.length === 1) {
      settings[path[0]] = value;
      continue;
    }
    // Only a whole top-level setting can be null: a nested one that is unset
    // is left out of its object, and an object with nothing set is null.
    const [top, ...rest] = path;
    if (value === null) {
      settings[top] ??= null;
      continue;
    }
    let node = (settings[top] ??= {}) as Record<string, unknown>;
    for (const part of rest.slice(0, -1)) {
      node = (node[part] ??= {}) as Record<string, unknown>;
    }
    node[rest[rest.length - 1]] = value;
  }
  return settings;
}
