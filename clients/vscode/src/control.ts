// Control transfer as the VS Code client speaks it: one client writes a
// session at a time. No `vscode` import: the Node tests run it against the
// real server with another client (the mevedel CLI) on the other side.
import { RequestSender, Scope, SessionState } from './protocol';

export const ControlMethods = {
  take: 'mevedel/control/take',
  release: 'mevedel/control/release',
  grant: 'mevedel/control/grant',
  keep: 'mevedel/control/keep',
  status: 'mevedel/control/status',
  didChange: 'mevedel/control/didChange',
} as const;

// The owner's question (window/showMessageRequest) offers these actions.
export const GRANT = 'Grant';
export const KEEP = 'Keep';

export interface ControlTakeResult {
  sessionId: string;
  outcome: 'acquired' | 'took-over' | 'requested' | 'already-owner';
  state: SessionState;
  ownerHost?: string;
}

export interface ControlReleaseResult {
  sessionId: string;
  committed: boolean;
  state: SessionState;
}

export interface ControlStatus {
  sessionId: string;
  role: 'owner' | 'requester' | 'none';
  phase: 'idle' | 'asking' | 'draining' | 'requested' | 'granted';
  ownerHost?: string;
  requesterHost?: string;
  waitingFor?: string;
  deadline?: number;
}

export interface ControlDidChangeParams {
  workspaceFolder: string;
  sessionId: string;
  role: 'owner' | 'requester';
  phase: string;
  message: string;
  ownerHost?: string;
  requesterHost?: string;
  waitingFor?: string;
  deadline?: number;
}

export function takeControl(sender: RequestSender, params: Scope & { confirmTakeover?: boolean } = {}): Promise<ControlTakeResult> {
  return sender.sendRequest<ControlTakeResult>(ControlMethods.take, params);
}

export function releaseControl(sender: RequestSender, scope: Scope = {}): Promise<ControlReleaseResult> {
  return sender.sendRequest<ControlReleaseResult>(ControlMethods.release, scope);
}

export function grantControl(sender: RequestSender, scope: Scope = {}): Promise<ControlStatus> {
  return sender.sendRequest<ControlStatus>(ControlMethods.grant, scope);
}

export function keepControl(sender: RequestSender, scope: Scope = {}): Promise<ControlStatus> {
  return sender.sendRequest<ControlStatus>(ControlMethods.keep, scope);
}

// What a take did, in one sentence.
export function describeTake(result: ControlTakeResult): string {
  const said = {
    acquired: 'you have control (writable here)',
    'took-over': 'took over the expired lease (writable here)',
    'already-owner': 'you already have control',
    requested: `asked ${result.ownerHost ?? 'its owner'} for control; read-only until it answers`,
  }[result.outcome];
  return `${result.sessionId}: ${said}`;
}

export function describeRelease(result: ControlReleaseResult): string {
  const saved = result.committed ? ' (published its unsaved content)' : '';
  return `released ${result.sessionId}${saved}; it is read-only here now`;
}
