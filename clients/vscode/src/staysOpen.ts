// Every quick pick and input box mevedel opens stays open when the focus
// moves (Esc still closes it). VS Code focuses a webview asynchronously: the
// chat whose button or key opened a pick, or a view the pick was opened
// from, takes the focus back a moment later, which would close the pick and
// send the keys meant for it into that view (a lost answer, text typed into
// the chat). One rule for all of them, so none is left behind.
export const STAYS_OPEN = { ignoreFocusOut: true } as const;
