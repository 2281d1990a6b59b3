package run

// A Note is something a caller may want to tell its user, which Start and
// Close pass to Spec.Notes as it happens: UserChosen, NoInit, Closed and
// Recorded.
type Note interface{ isNote() }

// UserChosen says who the command will run as, before anything is made.
type UserChosen struct{ User User }

// WritablePolicyFile says that the policy's file (Policy: Spec.PolicyFile),
// or the file always answers write to (Approvals:
// Spec.Gateway.ApprovalsFile), or both, lies where the sandbox can write:
// Reason is a *WritableError that says through what, or why it cannot be
// told. The sandbox could change the file for later runs that read it;
// it is noted, not refused, as a policy file in the working directory is
// the usual case. It is noted after UserChosen, before anything is made.
type WritablePolicyFile struct {
	Path              string
	Policy, Approvals bool
	Reason            error
}

// NoInit says that no init (tini) was found: the command runs as PID 1,
// which ignores SIGTERM unless it handles it.
type NoInit struct{}

// Closed says that the sandbox and its gateway are gone, so its decision
// log is complete: ID's log is LogFile, and its mocks' journal
// JournalFile ("" when it mocked no LLM).
type Closed struct{ ID, LogFile, JournalFile string }

// Recorded says that a recording's script was written, with Exchanges
// exchanges.
type Recorded struct {
	Host, Path string
	Exchanges  int
}

func (UserChosen) isNote()         {}
func (WritablePolicyFile) isNote() {}
func (NoInit) isNote()             {}
func (Closed) isNote()             {}
func (Recorded) isNote()           {}
