// The session's agent modes and config options (model, reasoning effort,
// ...) as the VS Code client speaks them: `mevedel/agent/options`,
// `mevedel/agent/setOption` and `mevedel/agent/didChangeOptions`; the line
// the chat shows above its composer; the quick-pick items of the picker.
// No `vscode` import: the Node tests run it against the real server.
import { escapeHtml } from './chatView';
import { RequestSender, Scope } from './protocol';

export const OptionMethods = {
  options: 'mevedel/agent/options',
  setOption: 'mevedel/agent/setOption',
  didChange: 'mevedel/agent/didChangeOptions',
} as const;

export interface AgentMode {
  id: string;
  name: string;
  description?: string | null;
}

export interface AgentOptionValue {
  value: string;
  name: string;
  description?: string | null;
  group?: string | null;
}

export interface AgentConfigOption {
  id: string;
  name: string;
  kind: 'select' | 'boolean';
  current: string | boolean;
  chosen: boolean;
  values?: AgentOptionValue[];
  description?: string | null;
  category?: string | null;
}

export interface AgentOptions {
  workspaceFolder: string;
  sessionId: string;
  agent: string;
  running: boolean;
  known: boolean;
  currentMode?: string | null;
  modeChosen?: boolean;
  modes?: AgentMode[];
  configOptions?: AgentConfigOption[];
}

export interface SetOptionParams extends Scope {
  mode?: string;
  configId?: string;
  value?: string | boolean;
}

export function getOptions(sender: RequestSender, scope: Scope): Promise<AgentOptions> {
  return sender.sendRequest<AgentOptions>(OptionMethods.options, scope);
}

export function setOption(sender: RequestSender, params: SetOptionParams): Promise<AgentOptions> {
  return sender.sendRequest<AgentOptions>(OptionMethods.setOption, params);
}

// The label of VALUE of OPTION.
export function valueName(option: AgentConfigOption, value: string | boolean): string {
  if (option.kind === 'boolean') return value === true ? 'on' : 'off';
  return option.values?.find((v) => v.value === value)?.name ?? String(value);
}

export function modeName(options: AgentOptions): string | undefined {
  const current = options.currentMode ?? undefined;
  if (current === undefined) return undefined;
  return options.modes?.find((m) => m.id === current)?.name ?? current;
}

// 'Mode: Plan · Model: Large · Fast: off', or undefined while the agent has
// not said what it offers.
export function optionsSummary(options: AgentOptions | undefined): string | undefined {
  if (!options?.known) return undefined;
  const parts: string[] = [];
  const mode = modeName(options);
  if (mode !== undefined) parts.push(`Mode: ${mode}`);
  for (const option of options.configOptions ?? []) parts.push(`${option.name}: ${valueName(option, option.current)}`);
  return parts.length ? parts.join(' · ') : undefined;
}

// The chat's line above the composer: what is in effect, and the button
// that changes it.
export function renderOptions(options: AgentOptions | undefined, busy: boolean): string {
  const summary = optionsSummary(options);
  if (!summary) return '';
  const title = options?.running ? 'Choose the agent’s mode, model or another option' : 'Choose; applied with the next prompt';
  return `<span class="options-summary">${escapeHtml(summary)}</span> <button class="action" data-action="pickOption" title="${escapeHtml(title)}"${busy ? ' disabled' : ''}>Change…</button>`;
}

// What the first quick pick offers: the mode, then each option.
export type OptionTarget = { label: string; description: string; mode: true } | { label: string; description: string; option: AgentConfigOption };

export function optionTargets(options: AgentOptions): OptionTarget[] {
  const targets: OptionTarget[] = [];
  if (options.modes?.length) targets.push({ label: 'Mode', description: modeName(options) ?? '', mode: true });
  for (const option of options.configOptions ?? []) {
    targets.push({ label: option.name, description: valueName(option, option.current), option });
  }
  return targets;
}

// The values of a target, the one in effect marked.
export interface ValueItem {
  label: string;
  description?: string;
  detail?: string;
  params: { mode: string } | { configId: string; value: string | boolean };
}

export function valueItems(options: AgentOptions, target: OptionTarget): ValueItem[] {
  if ('mode' in target) {
    return (options.modes ?? []).map((mode) => ({
      label: mode.name,
      description: mode.id === options.currentMode ? 'current' : undefined,
      detail: mode.description ?? undefined,
      params: { mode: mode.id },
    }));
  }
  const option = target.option;
  if (option.kind === 'boolean') {
    return [true, false].map((value) => ({
      label: value ? 'on' : 'off',
      description: option.current === value ? 'current' : undefined,
      params: { configId: option.id, value },
    }));
  }
  return (option.values ?? []).map((value) => ({
    label: value.name,
    description: [value.value === option.current ? 'current' : undefined, value.group ?? undefined].filter(Boolean).join(' · ') || undefined,
    detail: value.description ?? undefined,
    params: { configId: option.id, value: value.value },
  }));
}
